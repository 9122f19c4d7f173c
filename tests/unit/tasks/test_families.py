"""The task families: one picks a spec's data, each says its unit and sizes, an unknown task names the close
ones, and no code outside ``posenc.tasks`` looks at which data a spec has."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from posenc.errors import InvalidInput
from posenc.schemas.jobs import DataSpec, JobSpec
from posenc.tasks import FAMILIES, family_of, known_tasks

REPO = Path(__file__).resolve().parents[3]


def spec(data: dict[str, Any], **rest: Any) -> JobSpec:
    return JobSpec.model_validate({"methods": [{"method": "nope"}], "data": data, **rest})


@pytest.mark.parametrize(
    ("data", "name", "unit"),
    [
        ({"corpus": "stdlib"}, "text", "tokens"),
        ({"task": "copy_single"}, "sequence", "items"),
        ({"task": "quadrant"}, "images", "pixels"),
        ({"task": "graph_distance"}, "graphs", "nodes"),
    ],
)
def test_a_spec_has_one_family_with_its_unit(data: dict[str, Any], name: str, unit: str) -> None:
    family = family_of(spec(data))
    assert (family.name, family.unit) == (name, unit)
    described = family.describe()
    assert described["unit"] == unit
    assert described["train_size"] in described["sizes"]  # the training size is always evaluated
    assert set(described["tokens"]) == {str(size) for size in described["sizes"]}


def test_every_task_belongs_to_one_family() -> None:
    owners: dict[str, list[str]] = {}
    for family in FAMILIES:
        for task in family.task_names():
            owners.setdefault(task, []).append(family.name)
    assert all(len(names) == 1 for names in owners.values()), owners
    assert set(known_tasks()) == set(owners)


def test_an_unknown_task_names_the_close_ones() -> None:
    with pytest.raises(InvalidInput, match="did you mean 'copy'") as unknown:
        family_of(spec({"task": "cpy"}))
    assert unknown.value.loc == ("body", "spec", "data", "task")
    assert "graph_distance" in unknown.value.msg  # and lists every known task


# Which data a spec has is a question for its family: spec.data.<field> and the old per-kind properties.
FIELDS = [*DataSpec.model_fields, "image_task", "sequence_task", "graph_task"]  # and the old per-kind properties
DATA_TEST = re.compile(r"\.data\.(" + "|".join(FIELDS) + r")\b")


def test_no_code_outside_posenc_tasks_looks_at_which_data_a_spec_has() -> None:
    offenders = []
    for folder in ("posenc", "service", "workers", "clients/python/posenc_client"):
        for path in (REPO / folder).rglob("*.py"):
            relative = path.relative_to(REPO).as_posix()
            if relative.startswith(("posenc/tasks/", "posenc/schemas/")):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if DATA_TEST.search(line):
                    offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == []


def test_the_guard_sees_a_test_of_which_data_a_spec_has() -> None:
    assert DATA_TEST.search("if spec.data.image_size is not None:")
    assert DATA_TEST.search("task = spec.data.sequence_task")
    assert DATA_TEST.search("corpus = self.spec.data.corpus")
    assert not DATA_TEST.search("from posenc.training.graph_task import graph_batch")
