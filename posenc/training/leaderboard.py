"""The leaderboard table of a finished suite: per method and task, how well it extrapolates among the runs that
learned the task, how many seeds that rests on and how many steps learning took; and an overall rank of the
methods that learned every task.

A run *learned* its task when, trained with ``train.until``, it reached the threshold before the cap (its record's
``steps_needed`` is not None); without ``until``, when its family's rule says so (``learned`` is True; a family
without a rule, ``learned`` None, counts every run). Per (method, task):

    score             mean ± std over the seeds that learned of the run's *score past the training length*: the
                      mean of the task's headline metric at every evaluated size larger than the training size
                      (as ``posenc.tasks.suites.mean_reciprocal_rank`` scores a run); std is the sample std
                      (None on fewer than 2 seeds)
    learned / run     seeds that learned of the seeds run: what the cell rests on
    steps_needed      the median of ``steps_needed`` over the seeds that learned; None when none did (the table
                      shows "cap": it never learned within ``cap`` steps)

    diagnosis         for each seed that did not learn, what its ``until`` checks (the held-out score every
                      ``until.every`` steps) say of why (:func:`diagnose_run`): diverged, flat from the start
                      (learning rate or initialisation), still improving at the cap (more steps), or plateaued
                      (the method's limit at this size, or a learning rate too high)

Overall rank: over the tasks some method learned (``rated_over``; a task no method learned compares nothing), the
methods that learned every one of them (on at least one seed) are *rated*; for every (task, seed) the rated
methods' learned runs are ranked by their score (best first, ties share the better rank) and each rated method's
reciprocal ranks are averaged over its entries (MRR, as ``mean_reciprocal_rank`` but over learned runs only). A
method that did not learn some task is listed unrated with those tasks (``not_learned``): its scores elsewhere are
in the table but it is not ranked against methods that did more.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from posenc.schemas.jobs import JobSpec
from posenc.tasks.suites import SUITES, suite_specs

RULE = (
    "score: mean ± std over the seeds that learned of the headline metric past the training length; learned: seeds "
    "that learned / seeds run; steps: median steps to learn (cap: none learned within the cap); rank: MRR over "
    "(task, seed) among the learned runs of the methods that learned every task some method learned; †: the value "
    "flips with the seed (some seeds learned and some did not, or the learned seeds' scores spread over a fifth of "
    "the scale): more seeds are needed before it is quoted"
)


def run_learned(run: Mapping[str, Any]) -> bool:
    """Whether a run learned its task: reached ``until`` before the cap, else its family's rule (None: no rule,
    every run counts)."""
    if run.get("until") is not None:
        return run.get("steps_needed") is not None
    return run.get("learned") is not False


NON_FINITE = ("nan", "inf", "-inf")  # how a JSON result spells a non-finite number

# A change of the held-out score counts as progress above this: an accuracy's absolute change, a perplexity's
# relative one.
PROGRESS = 0.02


def _progress(before: float, after: float, higher_is_better: bool) -> float:
    """How much better ``after`` is than ``before``: the difference of accuracies, the relative drop of a
    perplexity."""
    if higher_is_better:
        return after - before
    return (before - after) / before if before else 0.0


def diagnose_run(run: Mapping[str, Any], higher_is_better: bool) -> str:
    """Why a run did not learn, from its ``until`` checks ([step, held-out value] every ``until.every`` steps) and
    its final loss: ``diverged`` (the loss is not finite: lower the learning rate), ``flat`` (no progress past its
    first check: a learning rate too low or too high for the method to start, or its initialisation), ``improving``
    (it gained over the last third of its checks: more steps, or a higher learning rate), ``regressed`` (it fell
    from its best: unstable, lower the learning rate), else ``plateaued`` (the method's own limit at this size, or
    a learning rate to lower); ``unchecked`` when no check scored."""
    loss = run.get("final_loss")
    if loss in NON_FINITE or (isinstance(loss, float) and not math.isfinite(loss)):
        return "diverged"
    checks = [float(value) for _, value in (run.get("until") or {}).get("checks") or [] if value is not None]
    if not checks:
        return "unchecked"
    first, last = checks[0], checks[-1]
    best = max(checks) if higher_is_better else min(checks)
    if _progress(first, best, higher_is_better) < PROGRESS:
        return "flat"
    if _progress(last, best, higher_is_better) > 2 * PROGRESS:
        return "regressed"
    if _progress(checks[len(checks) * 2 // 3], last, higher_is_better) > PROGRESS:
        return "improving"
    return "plateaued"


def task_label(result: Mapping[str, Any]) -> str:
    """A suite task's name in the table: its task (a text task's corpus)."""
    data = result["data"]
    return str(data.get("task") or data.get("family"))


def past_training_scores(result: Mapping[str, Any]) -> dict[tuple[str, int], float]:
    """Per (method, seed): the mean headline metric at the sizes past the training size (runs without any such
    value are left out)."""
    data = result["data"]
    values: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in result["table"]:
        if row["metric"] == data["metric"] and row["size"] > data["train_size"] and row["value"] is not None:
            values[(row["method"], row["seed"])].append(float(row["value"]))
    return {key: statistics.fmean(scores) for key, scores in values.items()}


# A cell's value flips with the seed when its seeds disagree on whether the method learned, or when the scores of
# the seeds that learned spread over more than this: a fifth of an accuracy's range, a fifth of a perplexity.
FLIP_SPREAD = 0.2


def seed_dependence(learned: int, run: int, values: Sequence[float], higher_is_better: bool) -> list[str]:
    """Why a cell's value would flip with the seed (empty: it holds over its seeds): some seeds learned and others
    did not, or the learned seeds' scores spread more than ``FLIP_SPREAD`` (absolute for accuracies, relative to
    the lowest for perplexities). Such a cell needs more seeds than the suite's three before it is quoted."""
    reasons = []
    if 0 < learned < run:
        reasons.append(f"learned on {learned} of {run} seeds")
    if len(values) >= 2:
        low, high = min(values), max(values)
        spread = high - low if higher_is_better else (high - low) / low if low > 0 else math.inf
        if round(spread, 9) > FLIP_SPREAD:  # 0.8 - 0.6 is 0.2 and a rounding error
            reasons.append(f"scores {low:.3g} to {high:.3g}")
    return reasons


def _cell(
    runs: Sequence[Mapping[str, Any]], scores: Mapping[tuple[str, int], float], cap: int | None, higher: bool
) -> dict[str, Any]:
    """One (method, task) cell from that method's runs of the task."""
    learned = [run for run in runs if run_learned(run)]
    diagnosis = [{"seed": run["seed"], "verdict": diagnose_run(run, higher)} for run in runs if not run_learned(run)]
    values = [scores[(run["label"], run["seed"])] for run in learned if (run["label"], run["seed"]) in scores]
    steps = [int(run["steps_needed"]) for run in learned if run.get("steps_needed") is not None]
    return {
        "score": statistics.fmean(values) if values else None,
        "std": statistics.stdev(values) if len(values) >= 2 else None,
        "seeds_learned": len(learned),
        "seeds_run": len(runs),
        "seeds_scored": len(values),
        "steps_needed": statistics.median(steps) if steps else None,
        "cap": cap,
        "diagnosis": diagnosis,
        "seed_dependent": seed_dependence(len(learned), len(runs), values, higher),
    }


def leaderboard_table(tasks: Sequence[Mapping[str, Any]], caps: Sequence[int | None] | None = None) -> dict[str, Any]:
    """The leaderboard of a suite's task results (``tasks``, in the suite's order; ``caps``: each task's
    ``train.steps``). Returns ``{"tasks": [{"task", "metric", "higher_is_better", "train_size"}], "rows": [{"method",
    "rank", "mrr", "entries", "not_learned", "cells": {task: cell}}], "rated_over", "rule"}``, rows by rank (the
    unrated after, by the number of tasks they learned, then name)."""
    columns: list[dict[str, Any]] = []
    cells: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    learned_runs: dict[str, dict[tuple[str, int], float]] = {}  # task -> (method, seed) -> score, learned only
    order: list[str] = []
    for position, result in enumerate(tasks):
        label = task_label(result)
        data = result["data"]
        columns.append({
            "task": label,
            "metric": data["metric"],
            "higher_is_better": bool(data["higher_is_better"]),
            "train_size": data["train_size"],
        })  # fmt: skip
        scores = past_training_scores(result)
        by_method: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for run in result["runs"]:
            by_method[run["label"]].append(run)
            if run["label"] not in order:
                order.append(run["label"])
        cap = caps[position] if caps is not None and position < len(caps) else None
        for method, runs in by_method.items():
            cells[method][label] = _cell(runs, scores, cap, bool(data["higher_is_better"]))
        learned_runs[label] = {
            (run["label"], run["seed"]): scores[(run["label"], run["seed"])]
            for run in result["runs"]
            if run_learned(run) and (run["label"], run["seed"]) in scores
        }
    labels = [column["task"] for column in columns]
    missing = {
        method: [task for task in labels if cells[method].get(task, {}).get("seeds_learned", 0) == 0]
        for method in order
    }
    # A task no method learned compares nothing: it is left out of the rank rather than leaving every method out.
    rated_over = [task for task in labels if any(task not in missing[method] for method in order)]
    rated = [method for method in order if not set(missing[method]) & set(rated_over)]
    reciprocal: dict[str, list[float]] = defaultdict(list)
    for column in columns:
        if column["task"] not in rated_over:
            continue
        better = 1 if column["higher_is_better"] else -1
        chosen = {key: value for key, value in learned_runs[column["task"]].items() if key[0] in rated}
        for seed in sorted({seed for _, seed in chosen}):
            means = {method: value for (method, s), value in chosen.items() if s == seed}
            for method, value in means.items():
                rank = 1 + sum(1 for other in means.values() if better * other > better * value)
                reciprocal[method].append(1.0 / rank)
    mrr = {method: statistics.fmean(values) for method, values in reciprocal.items()}
    ranked = sorted((method for method in rated if method in mrr), key=lambda method: -mrr[method])
    rank_of: dict[str, int] = {}
    for method in ranked:
        rank_of[method] = 1 + sum(1 for other in ranked if mrr[other] > mrr[method])
    rows: list[dict[str, Any]] = [
        {
            "method": method,
            "rank": rank_of.get(method),
            "mrr": mrr.get(method),
            "entries": len(reciprocal.get(method, [])),
            "not_learned": missing[method],
            "cells": {task: cells[method][task] for task in labels if task in cells[method]},
        }
        for method in order
    ]
    rows.sort(key=lambda row: (rank_of.get(row["method"], len(order) + 1), len(missing[row["method"]]), row["method"]))
    return {"tasks": columns, "rows": rows, "rated_over": rated_over if ranked else [], "rule": RULE}


def _number(value: float | None) -> str:
    """Three significant digits, or a dash."""
    return "–" if value is None else f"{value:.3g}"


def format_cell(cell: Mapping[str, Any] | None) -> str:
    """``score ± std (learned/run, steps; verdicts)``: the cell as the docs' table shows it (the verdicts of the
    seeds that did not learn, :func:`diagnose_run`); a † after the score marks a cell whose value flips with the
    seed (:func:`seed_dependence`)."""
    if cell is None:
        return "–"
    score = _number(cell["score"]) + ("†" if cell.get("seed_dependent") else "")
    if cell["std"] is not None:
        score += f" ± {_number(cell['std'])}"
    steps = "cap" if cell["steps_needed"] is None else f"{cell['steps_needed']:g} steps"
    verdicts = verdict_counts(cell.get("diagnosis") or [])
    return f"{score} ({cell['seeds_learned']}/{cell['seeds_run']}, {steps}{'; ' + verdicts if verdicts else ''})"


def verdict_counts(diagnosis: Sequence[Mapping[str, Any]]) -> str:
    """The verdicts of the seeds that did not learn, most frequent first: ``flat ×2, improving ×1``."""
    counts: dict[str, int] = defaultdict(int)
    for entry in diagnosis:
        counts[entry["verdict"]] += 1
    return ", ".join(f"{verdict} ×{count}" for verdict, count in sorted(counts.items(), key=lambda kv: -kv[1]))


def leaderboard_markdown(table: Mapping[str, Any]) -> str:
    """The table as Markdown (what docs/leaderboard.md's "Measured" section holds): rank, method, MRR and its
    entries, then per task its cell (:func:`format_cell`)."""
    columns = table["tasks"]
    head = ["rank", "method", "MRR (entries)"] + [
        f"{column['task']} ({column['metric']} {'↑' if column['higher_is_better'] else '↓'})" for column in columns
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for row in table["rows"]:
        rank = "–" if row["rank"] is None else str(row["rank"])
        mrr = "unrated" if row["mrr"] is None else f"{row['mrr']:.3f} ({row['entries']})"
        cells = [format_cell(row["cells"].get(column["task"])) for column in columns]
        lines.append("| " + " | ".join([rank, row["method"], mrr, *cells]) + " |")
    return "\n".join(lines)


def suite_results(spec: JobSpec, tasks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a suite's result adds to its tasks' results and their MRR: the leaderboard table
    (:func:`leaderboard_table`, each task's cap its ``train.steps``) for a suite with
    one; {} otherwise."""
    suite = SUITES.get(spec.suite or "")
    if suite is None or not suite.leaderboard:
        return {}
    caps: list[int | None] = [part.train.steps for part in suite_specs(spec)]
    return {"leaderboard": leaderboard_table(tasks, caps)}
