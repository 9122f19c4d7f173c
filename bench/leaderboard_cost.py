"""What the ``leaderboard`` suite costs on this machine: per method and task, seconds per training step and the
seconds a run spends outside its steps, and the projected wall time of the whole suite on two job slots.

Each (method, task) is one short run of the suite's own task spec (seed 0, ``--steps`` steps, no ``train.until``,
``posenc.training.jobs.run_unit`` in this process as a fanned-out run does, torch on ``--threads`` threads):

    step_s     the run's ``train_seconds`` / steps
    other_s    the rest of the run: preparing the data (``Trainer.prepare``, once per run's process), building
               the model, evaluating at every evaluation size
    cpu_share  the process's CPU time / its wall time: under 1 when other work shares the cores; the idle-machine
               projection scales each run's wall by it
    check_s    one ``train.until`` check, estimated as the evaluation's time per example at one size times the
               check's examples (``until.samples``): an upper bound, since the evaluation's longer sizes cost more

A run at its cap then takes ``other_s + cap x step_s + (cap / until.every) x check_s``; the suite's projection is
every run at its cap (the worst case), for every seed, divided by the slots (perfect packing; a process's start,
about a second, is not counted). The job's own estimate (``posenc.job_estimates``, what the gateway says at
submission before any worker measured, on one worker) is printed beside, divided by the slots too.

The machine may be shared: ``uptime``'s load average is printed before and after, and per run. From the
repository root:

    .venv/bin/python bench/leaderboard_cost.py [--steps 100] [--threads 1] [--slots 2]
        [--methods rope alibi ...] [--tasks copy_single copy probes text]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from posenc.job_estimates import estimate_seconds, job_groups
from posenc.schemas.jobs import JobCreate, JobSpec
from posenc.tasks import family_of
from posenc.tasks.suites import SUITES, suite_specs
from posenc.training.families import trainer_for
from posenc.training.hooks import NoHooks
from posenc.training.jobs import JobProgress, run_unit, units

SUITE = "leaderboard"


def load() -> str:
    """The 1-, 5- and 15-minute load averages."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def task_name(part: JobSpec) -> str:
    return family_of(part).task


def measure(part: JobSpec, index: int, steps: int, threads: int) -> dict[str, float]:
    """One short run of method ``index`` of suite task ``part`` (seed 0, ``steps`` steps, no until)."""
    import torch

    torch.set_num_threads(threads)
    train = part.train.model_copy(update={"steps": steps, "until": None, "warmup_steps": min(steps, 10)})
    spec = part.model_copy(update={"methods": [part.methods[index]], "seeds": [0], "train": train})
    family = family_of(spec)
    began, cpu_began = time.perf_counter(), time.process_time()
    trainer = trainer_for(family)
    data = trainer.prepare(None, None)
    prepared = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        (unit,) = units(spec)
        progress = JobProgress(hooks=NoHooks(), total=steps)
        record = run_unit(spec, unit, job_dir=Path(root), data=data, trainer=trainer, progress=progress, device="cpu")
    ended, cpu = time.perf_counter(), time.process_time() - cpu_began
    train_s = float(record["train_seconds"])
    evaluation = max(0.0, ended - prepared - train_s)  # building the model and evaluating every size
    until = part.train.until
    per_size = evaluation / len(family.eval_sizes())
    if until is None:
        check = 0.0
    elif family.name == "text":  # a check reads until.samples windows of L; the evaluation max_tokens per size
        check = per_size * min(1.0, until.samples * family.train_size() / family.spec.eval.max_tokens)
    else:  # a check scores until.samples examples at the training size; the evaluation eval.samples per size
        check = per_size * min(1.0, until.samples / family.spec.eval.samples)
    share = min(1.0, cpu / (ended - began))  # of a core this process got: 1 on an idle machine (one thread)
    return {"step_s": train_s / steps, "other_s": ended - began - train_s, "check_s": check, "cpu_share": share}


def cap_seconds(part: JobSpec, cost: dict[str, float]) -> float:
    """A run of ``part`` at its cap: the outside of the steps, every step, every until check."""
    cap = part.train.steps
    until = part.train.until
    checks = 0 if until is None else cap // until.every
    return cost["other_s"] + cap * cost["step_s"] + checks * cost["check_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--methods", nargs="*", default=None, help="default: every method of the suite")
    parser.add_argument("--tasks", nargs="*", default=None, help="copy_single, copy, probes, text; default all")
    args = parser.parse_args()

    create = JobCreate.model_validate({"kind": "benchmark", "spec": {"suite": SUITE, "device": "cpu"}})
    assert isinstance(create.spec, JobSpec)
    parts = suite_specs(create.spec)
    seeds = len(SUITES[SUITE].seeds)
    print(f"load before: {load()}; {len(parts)} tasks x {len(parts[0].methods)} methods x {seeds} seeds", flush=True)
    costs: dict[tuple[str, str], dict[str, float]] = {}
    caps: dict[tuple[str, str], float] = {}
    failed: list[str] = []
    for part in parts:
        task = task_name(part)
        if args.tasks and task not in args.tasks:
            continue
        for index, ref in enumerate(part.methods):
            if args.methods and ref.name not in args.methods:
                continue
            try:
                cost = measure(part, index, args.steps, args.threads)
            except Exception as error:  # a method that cannot train here: said, and left out of the projection
                failed.append(f"{ref.name} on {task}: {type(error).__name__}: {error}")
                print(f"{ref.name:18s} {task:12s} FAILED: {failed[-1]}", flush=True)
                continue
            costs[(ref.name, task)] = cost
            caps[(ref.name, task)] = cap_seconds(part, cost)
            print(
                f"{ref.name:18s} {task:12s} step {1000 * cost['step_s']:7.1f} ms  other {cost['other_s']:6.2f} s  "
                f"check {cost['check_s']:5.2f} s  at cap {caps[(ref.name, task)]:7.1f} s  "
                f"(cpu share {cost['cpu_share']:.2f}, load {load()})",
                flush=True,
            )
    print(f"load after: {load()}")
    for failure in failed:
        print(f"failed (not in the projection): {failure}")
    tasks = sorted({task for _, task in caps}, key=[task_name(part) for part in parts].index)
    methods = sorted({method for method, _ in caps}, key=lambda name: -sum(v for k, v in caps.items() if k[0] == name))
    print("\nseconds per run at its cap (seed 0):")
    print(f"{'method':18s} " + " ".join(f"{task:>12s}" for task in tasks) + f" {'sum':>9s}")
    for method in methods:
        row = [caps.get((method, task)) for task in tasks]
        print(f"{method:18s} " + " ".join(f"{v:12.1f}" if v is not None else f"{'-':>12s}" for v in row)
              + f" {sum(v for v in row if v is not None):9.1f}")  # fmt: skip
    total = seeds * sum(caps.values())
    idle = seeds * sum(value * costs[key]["cpu_share"] for key, value in caps.items())
    mean_step = statistics.fmean(cost["step_s"] for cost in costs.values())
    print(f"\nmean step {1000 * mean_step:.1f} ms over {len(costs)} (method, task) pairs")
    print(f"every run at its cap, {seeds} seeds: {total / 60:.1f} min of one slot, {total / args.slots / 60:.1f} min "
          f"on {args.slots} slots (the measured methods and tasks only)")  # fmt: skip
    print(f"the same on an idle machine (each run's wall x the share of a core it got): {idle / 60:.1f} min of one "
          f"slot, {idle / args.slots / 60:.1f} min on {args.slots} slots")  # fmt: skip
    estimate = estimate_seconds(job_groups(create), "cpu", {})
    print(f"the job's estimate (posenc.job_estimates, one worker, before any measurement): {estimate / 60:.1f} min; "
          f"{estimate / args.slots / 60:.1f} min on {args.slots} slots (the whole suite)")  # fmt: skip


if __name__ == "__main__":
    main()
