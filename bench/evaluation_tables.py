"""The evaluation tables of the docs' measured results, through the job API of a running service (``make run``
or ``posenc serve``).

Each table is one benchmark job (3 seeds unless ``--seeds``), submitted with the SDK and waited for; the script
prints its wall time (the job's created_at to finished_at), the job id, the plot artifacts, the runs that did
not learn their training sizes, and per method and size the headline metric's mean +- std over seeds.

    rsc     repeat-single-char copy (NoPE paper rsc): nope, alibi, rope, sinusoidal; size 10, 2 layers, d=128,
            4 heads, 2,000 steps of 64 (the NoPE paper's tasks at a tiny CPU scale)
    cmc     multi-char copy (NoPE paper cmc): the same methods and setup
    fox     FoX (its training default) on multi-char copy, the same setup: does it fit in distribution?
    probes  the tiny RULER-style probes passkey, multi_key and common_words (the control) at 64 tokens, d=64,
            2 layers, 2,000 steps of 32: nope, alibi, rope, sinusoidal; effective length and leaderboard
    passkey the probes passkey and common_words only, 3,000 steps, otherwise as probes
    quick   the quick suite with four methods (one seed, its own)

    .venv/bin/python bench/evaluation_tables.py rsc cmc [--base-url http://127.0.0.1:8000] [--seeds 0 1 2]
        [--out DIR]   # also writes each job's record as DIR/<table>.json

Nothing is asserted: the tables are what the jobs measured. Start the service with two job slots (``posenc serve
--concurrency 2``) so the runs of a benchmark use both cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from posenc_client import Client

FOUR = ["nope", "alibi", "rope", "sinusoidal"]
COPY_SETUP: dict[str, Any] = {
    "model": {"layers": 2, "dim": 128, "heads": 4},
    "train": {"steps": 2000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 100, "checkpoint_every": 500},
    "eval": {"sizes": [5, 8, 10, 11, 12, 13, 14, 15, 20], "samples": 100},
}


def copy_table(task: str, methods: list[str]) -> dict[str, Any]:
    return {"methods": [{"method": m} for m in methods], "data": {"task": task, "size": 10}, **COPY_SETUP}


TABLES: dict[str, dict[str, Any]] = {
    "rsc": copy_table("copy_single", FOUR),
    "cmc": copy_table("copy", FOUR),
    "fox": copy_table("copy", ["fox"]),
    "probes": {
        "methods": [{"method": m} for m in FOUR],
        "data": {"task": "probes", "probes": ["passkey", "multi_key", "common_words"]},
        "model": {"layers": 2, "dim": 64, "heads": 4},
        "train": {
            "length": 64,
            "steps": 2000,
            "batch_size": 32,
            "lr": 1e-3,
            "warmup_steps": 100,
            "checkpoint_every": 500,
        },
        "eval": {"lengths": [48, 64, 96, 128, 192, 256], "samples": 30},
    },
    "passkey": {
        "methods": [{"method": m} for m in FOUR],
        "data": {"task": "probes", "probes": ["passkey", "common_words"]},
        "model": {"layers": 2, "dim": 64, "heads": 4},
        "train": {
            "length": 64,
            "steps": 3000,
            "batch_size": 32,
            "lr": 1e-3,
            "warmup_steps": 100,
            "checkpoint_every": 500,
        },
        "eval": {"lengths": [48, 64, 96, 128, 192, 256], "samples": 30},
    },
    "quick": {"suite": "quick", "methods": [{"method": m} for m in FOUR]},
}


def mean_std(values: list[float]) -> str:
    if not values:
        return "   -      "
    spread = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):4.2f}+-{spread:4.2f}"


def print_benchmark(result: dict[str, Any], indent: str = "") -> None:
    data = result["data"]
    metric = data["metric"]
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    per_seed: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for row in result["table"]:
        if row["metric"] == metric and row["value"] is not None:
            per_seed[(row["method"], row["seed"], row["size"])].append(float(row["value"]))
    for (method, _, size), values in per_seed.items():  # a run's mean over its groups (probes, depths)
        cells[(method, size)].append(statistics.fmean(values))
    sizes = sorted({size for _, size in cells})
    methods = list(dict.fromkeys(method for method, _ in cells))
    print(f"{indent}{data['task']}: {metric} by size in {data['unit']} (training size {data['train_size']}), "
          "mean+-std over seeds")  # fmt: skip
    print(indent + "method      " + "".join(f"{size:>11}" for size in sizes))
    for method in methods:
        print(indent + f"{method:<12}" + "".join(f" {mean_std(cells[(method, size)]):>10}" for size in sizes))
    print(f"{indent}not learned: {', '.join(result['not_learned']) or 'none'}")
    for run in result["runs"]:
        score = run["in_distribution"].get(metric)
        print(f"{indent}  run {run['label']} seed {run['seed']}: in distribution {score}, learned {run['learned']}, "
              f"{run['train_seconds']:.0f} s training")  # fmt: skip
    for entry in result.get("leaderboard", []):
        print(f"{indent}leaderboard {entry}")
    if "control" in result:
        print(f"{indent}control {json.dumps(result['control'].get('by_method', {}))}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tables", nargs="+", choices=sorted(TABLES))
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with Client(base_url=args.base_url, timeout=60) as client:
        for name in args.tables:
            spec = dict(TABLES[name])
            if name != "quick":
                spec["seeds"] = args.seeds
            job = client.jobs.create("benchmark", spec)
            print(f"== {name}: job {job.id}, estimated {job.estimate_s} s on one worker", flush=True)
            job = client.jobs.wait(job.id, timeout=3 * 3600)
            if job.status != "succeeded" or job.result is None:
                print(f"   {job.status}: {job.error}")
                continue
            assert job.finished_at is not None
            wall = (job.finished_at - job.created_at).total_seconds()
            print(
                f"   wall {wall:.0f} s; artifacts: {', '.join(a.url for a in job.artifacts if a.name.endswith('.png'))}"
            )
            results = job.result.get("tasks", [job.result])
            for result in results:
                print_benchmark(result, "   ")
            if "mrr" in job.result:
                print(f"   mrr {job.result['mrr']}")
            if args.out is not None:
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / f"{name}.json").write_text(job.model_dump_json(indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
