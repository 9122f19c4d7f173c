"""A probes benchmark shaped like a passkey job in which most runs never learned passkey, put together by the
job's own pieces (``effective_length``, then ``learned_per_probe`` and ``not_learned_runs`` as
``assemble_benchmark`` uses them), for the tests of the result's ``not_learned``, its findings and its plots.

Two methods, three seeds, passkey and the control (common_words), trained on 64 tokens:

- alibi: every seed learned both probes, passkey 1.0 at every length (L_eff 256 = 4x, the longest evaluated);
- rope: seed 0 learned both (passkey 1.0 up to 64 tokens, 0.9 at 128 over its depths 1.0 and 0.8, 0.2 at 256:
  L_eff 128 = 2x); seeds 1 and 2 learned the control (0.83 and 0.97) but not passkey (0.1 and 0.3): they are
  unrated, so rope's 2x rests on 1 of its 3 seeds.
"""

from __future__ import annotations

from typing import Any

from posenc.tasks.probes import effective_length
from posenc.training.jobs import learned_per_probe, not_learned_runs
from posenc.training.report import score_series, series_json, summarize

TRAIN = 64
SIZES = (16, 32, 64, 128, 256)
DEPTHS = (0.0, 0.5)
Score = float | tuple[float, float]  # one score at every depth, or one per depth


def flat(value: float) -> dict[int, Score]:
    return dict.fromkeys(SIZES, value)


SCORES: dict[str, dict[int, dict[str, dict[int, Score]]]] = {
    "alibi": {seed: {"passkey": flat(1.0), "common_words": flat(0.9)} for seed in range(3)},
    "rope": {
        0: {"passkey": {16: 1.0, 32: 1.0, 64: 1.0, 128: (1.0, 0.8), 256: 0.2}, "common_words": flat(0.9)},
        1: {"passkey": flat(0.1), "common_words": flat(0.83)},
        2: {"passkey": flat(0.3), "common_words": flat(0.97)},
    },
}


def table() -> list[dict[str, Any]]:
    """The job's long-format rows as ``table_rows`` gives them (``learned`` None: the probes learn per probe)."""
    rows: list[dict[str, Any]] = []
    for method, by_seed in SCORES.items():
        for seed, by_probe in by_seed.items():
            for probe, by_size in by_probe.items():
                for size, score in by_size.items():
                    per_depth = score if isinstance(score, tuple) else (score,) * len(DEPTHS)
                    rows.extend(
                        {"method": method, "seed": seed, "size": size, "probe": probe, "depth": depth,
                         "metric": "score", "value": value, "learned": None, "in_distribution": None}
                        for depth, value in zip(DEPTHS, per_depth, strict=True)
                    )  # fmt: skip
    return rows


def passkey_result() -> dict[str, Any]:
    """The benchmark result's fields that the findings and the page read, as ``assemble_benchmark`` builds them."""
    rows = table()
    extra = effective_length(rows, TRAIN)
    failures = extra["not_learned_probes"]
    rows = learned_per_probe(rows, failures)
    data = {"family": "probes", "task": "probes", "unit": "tokens", "metric": "score", "higher_is_better": True,
            "train_size": TRAIN, "sizes": list(SIZES)}  # fmt: skip
    runs: list[dict[str, Any]] = [
        {"label": method, "seed": seed, "in_distribution": {}, "learned": None, "final_loss": 1.0,
         "train_seconds": 1.0, "loss_curve": [],
         "not_learned_probes": [f["probe"] for f in failures if (f["method"], f["seed"]) == (method, seed)]}
        for method, by_seed in SCORES.items()
        for seed in by_seed
    ]  # fmt: skip
    return {"kind": "benchmark", "data": data, "table": rows, "summary": summarize(rows, TRAIN, ["probe", "depth"]),
            "runs": runs, "not_learned": not_learned_runs(rows, failures),
            "score_series": series_json(score_series(rows, "score", "probe"), "score", extra["control"]["probe"]),
            **extra}  # fmt: skip
