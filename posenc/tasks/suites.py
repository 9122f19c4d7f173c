"""Suites: named benchmark presets with a known cost. A suite bundles one or more tasks with their sizes, the
model, the training budget and the seeds; a benchmark spec names one (``"suite": "quick"``) with its methods and
gets every task of it, each a benchmark of its own within the job, and across tasks the NoPE paper's aggregate:
each method's mean reciprocal rank (MRR) over (task, seed), ranked by its mean score past the training size.

``quick``     under 5 minutes on 2 CPU cores for four methods: repeat-single-char copy (600 steps) and
              multi-char copy (2,000 steps: it fits slower) at sizes up to 8, a 2-layer d=64 model, one seed;
``standard``  under 30 minutes on 2 CPU cores with two job slots for five methods (estimated from the measured
              runs of its tasks): the two copy tasks at sizes up to 10 (1,500 and 2,500 steps) and the passkey
              probe with the common-words control at 64 tokens (3,000 steps), d=64, 3 seeds;
``paper``     the NoPE paper's task grid at tiny scale (every copy variant, reverse, addition, sort, parity at sizes
              up to 10; d=128, 2,000 steps, 3 seeds): hours on a CPU, minutes on a GPU.

The durations are estimates from the counts of each run (``posenc.job_estimates.estimate_seconds``: set-ups,
steps, tokens, evaluation sizes, multiply-adds) scaled by what the workers measured; a suite's job says its own
estimate when it is submitted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from posenc.errors import InvalidInput
from posenc.schemas.jobs import JobSpec
from posenc.tasks.base import SPEC


@dataclass(frozen=True)
class Suite:
    """A preset: what every task of it shares (model, train, seeds) and each task's data and eval."""

    description: str
    tasks: tuple[Mapping[str, Any], ...]  # each {"data": {...}, "eval": {...}} (and "train" overrides)
    model: Mapping[str, Any]
    train: Mapping[str, Any]
    seeds: tuple[int, ...] = (0,)
    budget: str = ""  # the duration it is sized for
    extra: Mapping[str, Any] = field(default_factory=dict)


COPY_TASKS = ("copy_single", "copy", "copy_replace", "reverse", "addition", "sort", "parity")

SUITES: dict[str, Suite] = {
    "quick": Suite(
        description="repeat-single-char and multi-char copy (NoPE paper rsc and cmc) at sizes up to 8",
        tasks=(
            {"data": {"task": "copy_single", "size": 8}, "eval": {"samples": 50}},
            {"data": {"task": "copy", "size": 8}, "train": {"steps": 2000}, "eval": {"samples": 50}},
        ),
        model={"layers": 2, "dim": 64, "heads": 4},
        train={"steps": 600, "batch_size": 32, "lr": 1e-3, "warmup_steps": 60, "checkpoint_every": 200},
        seeds=(0,),
        budget="under 5 minutes on 2 CPU cores for four methods",
    ),
    "standard": Suite(
        description="the two copy tasks at sizes up to 10 and the passkey probe with its control at 64 tokens, 3 seeds",
        tasks=(
            {"data": {"task": "copy_single", "size": 10}, "eval": {"samples": 50}},
            {"data": {"task": "copy", "size": 10}, "train": {"steps": 2500}, "eval": {"samples": 50}},
            {
                "data": {"task": "probes", "probes": ["passkey", "common_words"]},
                "train": {"length": 64, "steps": 3000},
                "eval": {"lengths": [48, 64, 96, 128, 192, 256], "samples": 30},
            },
        ),
        model={"layers": 2, "dim": 64, "heads": 4},
        train={"steps": 1500, "batch_size": 32, "lr": 1e-3, "warmup_steps": 100, "checkpoint_every": 250},
        seeds=(0, 1, 2),
        budget="under 30 minutes on 2 CPU cores with two job slots for five methods (estimated from its runs)",
    ),
    "paper": Suite(
        description="the NoPE paper's task grid at tiny scale: every copy variant, reverse, addition, sort, parity",
        tasks=tuple({"data": {"task": task, "size": 10}, "eval": {"samples": 100}} for task in COPY_TASKS),
        model={"layers": 2, "dim": 128, "heads": 4},
        train={"steps": 2000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 100, "checkpoint_every": 250},
        seeds=(0, 1, 2),
        budget="hours on a CPU",
    ),
}


def suite_specs(spec: JobSpec) -> list[JobSpec]:
    """The benchmark specs of a suite's tasks with the spec's methods (and its seeds and device, if given), or
    ``[spec]`` for a spec that names no suite. A suite sets data, model, train and eval itself: giving them too
    is refused, naming the field."""
    if spec.suite is None:
        return [spec]
    suite = SUITES.get(spec.suite)
    if suite is None:
        raise InvalidInput((*SPEC, "suite"), f"unknown suite {spec.suite!r}; known: {', '.join(SUITES)}")
    default = JobSpec.model_validate({"methods": [{"method": "nope"}]})
    for name in ("data", "model", "train", "eval"):
        if getattr(spec, name) != getattr(default, name):
            raise InvalidInput(
                (*SPEC, name), f"suite {spec.suite!r} sets data, model, train and eval; give methods and seeds only"
            )
    seeds = list(spec.seeds) if spec.seeds != default.seeds else list(suite.seeds)
    specs = []
    for task in suite.tasks:
        raw = {
            "methods": [ref.model_dump() for ref in spec.methods],
            "data": task["data"],
            "model": dict(suite.model),
            "train": {**suite.train, **task.get("train", {})},
            "eval": task.get("eval", {}),
            "seeds": seeds,
            "device": spec.device,
        }
        specs.append(JobSpec.model_validate(raw))
    return specs


def mean_reciprocal_rank(tasks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The NoPE paper's aggregate over a suite's task results: for each (task, seed), the methods ranked by their
    mean headline score at the sizes past the training size (best first; ties share the better rank); each
    method's reciprocal ranks averaged over (task, seed). Sorted best first."""
    ranks: dict[str, list[float]] = defaultdict(list)
    for result in tasks:
        data = result["data"]
        metric, train_size, better = data["metric"], data["train_size"], 1 if data["higher_is_better"] else -1
        scores: dict[tuple[int, str], list[float]] = defaultdict(list)
        for row in result["table"]:
            if row["metric"] == metric and row["size"] > train_size and row["value"] is not None:
                scores[(row["seed"], row["method"])].append(float(row["value"]))
        for seed in sorted({seed for seed, _ in scores}):
            means = {method: sum(v) / len(v) for (s, method), v in scores.items() if s == seed}
            for method, mean in means.items():
                rank = 1 + sum(1 for other in means.values() if better * other > better * mean)
                ranks[method].append(1.0 / rank)
    table = [{"method": method, "mrr": sum(values) / len(values), "entries": len(values)}
             for method, values in ranks.items()]  # fmt: skip
    return sorted(table, key=lambda entry: -entry["mrr"])
