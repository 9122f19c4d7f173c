"""Rerun one leaderboard cell with other settings: what settles a ``cap`` cell's diagnosis (docs/leaderboard.md,
"Diagnosing a method that does not learn").

Takes the leaderboard suite's own spec of a task (``posenc.tasks.suites.suite_specs``) for one method, changes
the learning rate (``--lr``, several to compare; the suite's is 2e-3) and, with ``--steps``, the cap, and runs
it in this process (``run_job``, one torch thread) for each seed. Prints per (lr, seed): the step it learned at
or ``cap``, the diagnosis of a run that did not (``diagnose_run``), its last held-out check and its score past
the training length.

    .venv/bin/python bench/leaderboard_rerun.py sandwich copy_single --lr 7e-4 2e-3 6e-3 --seeds 0 1 2
    .venv/bin/python bench/leaderboard_rerun.py nope copy --lr 6e-3 --steps 2700
    .venv/bin/python bench/leaderboard_rerun.py kerple_log copy --seeds 0 1 2 --json kerple_log-copy.json

``--json PATH`` writes the benchmark result of the (last) learning rate, the form a suite's task result has, so
that its runs can take the place of the same method's runs in a finished suite's task result.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from posenc.schemas.jobs import JobSpec
from posenc.tasks.suites import suite_specs
from posenc.training.hooks import NoHooks
from posenc.training.jobs import run_job
from posenc.training.leaderboard import diagnose_run, past_training_scores, task_label


def task_spec(method: str, task: str) -> JobSpec:
    """The leaderboard suite's spec of ``task`` (its task name, or its corpus for text) for ``method``."""
    specs = suite_specs(JobSpec.model_validate({"suite": "leaderboard"}))
    for spec in specs:
        label = spec.data.task or spec.data.corpus
        if label == task:
            [entry] = [ref for ref in spec.methods if ref.method == method]
            return spec.model_copy(update={"methods": [entry]})
    known = ", ".join(str(spec.data.task or spec.data.corpus) for spec in specs)
    raise SystemExit(f"no leaderboard task {task!r}; known: {known}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method")
    parser.add_argument("task", help="copy_single, copy, probes or the text corpus (stdlib)")
    parser.add_argument("--lr", type=float, nargs="+", default=[2e-3])
    parser.add_argument("--steps", type=int, help="another cap (the schedule's length changes with it)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--json", type=Path, help="write the benchmark result here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = task_spec(args.method, args.task)
    for lr in args.lr:
        train = {"lr": lr} | ({"steps": args.steps} if args.steps else {})
        spec = base.model_copy(update={"train": base.train.model_copy(update=train), "seeds": args.seeds})
        with tempfile.TemporaryDirectory() as root:
            began = time.perf_counter()
            result = run_job("benchmark", spec, job_dir=Path(root) / "job", artifact_root=Path(root), hooks=NoHooks())
            seconds = time.perf_counter() - began
        if args.json:
            args.json.write_text(json.dumps(result))
        scores = past_training_scores(result)
        higher = bool(result["data"]["higher_is_better"])
        for run in result["runs"]:
            needed = run.get("steps_needed")
            checks = (run.get("until") or {}).get("checks") or []
            last = checks[-1][1] if checks else None
            verdict = f"learned at {needed}" if needed is not None else f"cap ({diagnose_run(run, higher)})"
            score = scores.get((run["label"], run["seed"]))
            print(
                f"{args.method} {task_label(result)} lr {lr:g} cap {spec.train.steps} seed {run['seed']}: {verdict}, "
                f"last check {last if last is None else round(last, 3)}, past training "
                f"{'–' if score is None else round(score, 3)} ({seconds:.0f} s for {len(args.seeds)} seeds)",
                flush=True,
            )


if __name__ == "__main__":
    main()
