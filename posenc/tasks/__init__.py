"""Task families, spec side: every fact about a kind of data in one module per family, importable by the gateway
(no model code). ``family_of(spec)`` is the one place that looks at which data a spec has; everything else (the
gateway's checks, the job cost, the trainer's torch half, the results, the plots) asks the family.

Families (``FAMILIES``, in the order they are tried):

- ``text``      (``text.Text``): a character-level corpus, perplexity by length in tokens;
- ``sequence``  (``sequence.SequenceTasks``): the NoPE paper's and CoPE's synthetic tasks, by size in items;
- ``probes``    (``probes.Probes``): RULER/NoLiMa-style probes, score by length in tokens and depth, effective length;
- ``images``    (``images.Images``): procedural images on a ViT, accuracy by resolution in pixels;
- ``graphs``    (``graphs.Graphs``): random graphs on a graph transformer, accuracy by size in nodes.

Adding a family is its module and its entry in ``FAMILIES``; a token family (``base.TokenTask``) needs nothing
from the trainer.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from posenc.errors import InvalidInput
from posenc.patterns import PATTERNS
from posenc.schemas.jobs import JobSpec
from posenc.schemas.tasks import PatternInfo, SuiteInfo, TaskCatalogue, TaskInfo
from posenc.tasks.base import SPEC, Family, Instance, TokenTask
from posenc.tasks.graphs import Graphs
from posenc.tasks.images import Images
from posenc.tasks.probes import Probes
from posenc.tasks.sequence import SequenceTasks
from posenc.tasks.text import Text

FAMILIES: tuple[type[Family], ...] = (Text, SequenceTasks, Probes, Images, Graphs)

__all__ = ["FAMILIES", "Family", "Instance", "TokenTask", "catalogue", "family_of", "known_tasks"]


def known_tasks() -> dict[str, type[Family]]:
    """Every ``data.task`` name, with its family."""
    return {task: family for family in FAMILIES for task in family.task_names()}


def family_of(spec: JobSpec) -> Family:
    """The family of the spec's data: a corpus is text; a task belongs to the family that owns its name. An
    unknown task is a 422 naming the close ones."""
    if spec.data.corpus is not None:
        return Text(spec)
    tasks = known_tasks()
    task = spec.data.task or ""
    if task not in tasks:
        close = difflib.get_close_matches(task, tasks, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(name) for name in close)}?" if close else ""
        raise InvalidInput((*SPEC, "data", "task"), f"unknown task {task!r}{hint} Known: {', '.join(tasks)}")
    return tasks[task](spec)


def _suite_task(task: Mapping[str, Any]) -> str:
    """A suite task's name: its task, or for text its corpus."""
    data = task["data"]
    return str(data.get("task") or f"text ({data['corpus']})")


def catalogue() -> TaskCatalogue:
    """Every task of every family (its unit, where a spec gives its sizes, its metrics), and the suites: what
    ``GET /v1/tasks`` answers and the README's tasks table shows."""
    from posenc.tasks.suites import SUITES

    tasks = [
        TaskInfo(
            task=task,
            family=family.name,
            unit=family.unit,
            train_field=".".join(map(str, family.train_field)),
            eval_field=".".join(map(str, family.eval_field)),
            metric=family.metric,
            metrics=list(family.metrics),
            higher_is_better=family.higher_is_better,
            about=family.about(task),
        )
        for family in FAMILIES
        for task in family.task_names() or ("(data.corpus)",)
    ]
    suites = [
        SuiteInfo(name=name, description=suite.description, tasks=[_suite_task(task) for task in suite.tasks],
                  seeds=list(suite.seeds), budget=suite.budget)
        for name, suite in SUITES.items()
    ]  # fmt: skip
    patterns = [
        PatternInfo(
            name=pattern.name,
            model=pattern.model,
            description=pattern.description,
            unit=[{**layer, **_json_temperature(layer)} for layer in pattern.unit(CATALOGUE_SPAN)],
        )
        for pattern in PATTERNS.values()
    ]
    return TaskCatalogue(tasks=tasks, suites=suites, patterns=patterns)


CATALOGUE_SPAN = 16  # the local span the catalogue shows a pattern's unit at


def _json_temperature(layer: dict[str, Any]) -> dict[str, Any]:
    """A unit's temperature as the job spec writes it: {"floor_scale", "attn_scale"}."""
    if layer.get("temperature") is None:
        return {}
    floor_scale, attn_scale = layer["temperature"]
    return {"temperature": {"floor_scale": floor_scale, "attn_scale": attn_scale}}
