"""Suites: a named preset expands into one benchmark spec per task with the caller's methods; what a suite sets
may not be given too; the NoPE paper's mean reciprocal rank over (task, seed)."""

from __future__ import annotations

from typing import Any

import pytest

from posenc.errors import InvalidInput
from posenc.jobspec import job_cost, validate_spec
from posenc.schemas.jobs import JobCreate, JobSpec
from posenc.tasks import family_of
from posenc.tasks.suites import SUITES, mean_reciprocal_rank, suite_specs

METHODS = [{"method": "nope"}, {"method": "rope"}]


def test_a_suite_expands_into_its_tasks_with_the_callers_methods() -> None:
    spec = JobSpec.model_validate({"suite": "quick", "methods": METHODS})
    specs = suite_specs(spec)
    assert [family_of(task).task for task in specs] == [task["data"]["task"] for task in SUITES["quick"].tasks]
    for task in specs:
        assert [ref.method for ref in task.methods] == ["nope", "rope"]
        assert task.seeds == list(SUITES["quick"].seeds)
        assert task.suite is None
    reseeded = suite_specs(JobSpec.model_validate({"suite": "quick", "methods": METHODS, "seeds": [3, 4]}))
    assert all(task.seeds == [3, 4] for task in reseeded)
    assert suite_specs(JobSpec.model_validate({"methods": METHODS})) == [JobSpec.model_validate({"methods": METHODS})]


@pytest.mark.parametrize("given", [{"data": {"task": "copy"}}, {"model": {"dim": 32}}, {"train": {"steps": 5}}])
def test_what_a_suite_sets_may_not_be_given_too(given: dict[str, Any]) -> None:
    spec = JobSpec.model_validate({"suite": "quick", "methods": METHODS, **given})
    with pytest.raises(InvalidInput, match="sets data, model, train and eval") as refused:
        suite_specs(spec)
    assert refused.value.loc == ("body", "spec", next(iter(given)))


def test_unknown_suites_and_suites_outside_a_benchmark_are_refused() -> None:
    with pytest.raises(InvalidInput, match="known: quick, standard, paper"):
        validate_spec("benchmark", JobSpec.model_validate({"suite": "fast", "methods": METHODS}))
    with pytest.raises(InvalidInput, match="a suite is a benchmark") as refused:
        validate_spec("train", JobSpec.model_validate({"suite": "quick", "methods": METHODS[:1]}))
    assert refused.value.loc == ("body", "spec", "suite")
    validate_spec("benchmark", JobSpec.model_validate({"suite": "quick", "methods": METHODS}))


def test_a_suites_cost_is_the_sum_of_its_tasks() -> None:
    create = JobCreate.model_validate({"kind": "benchmark", "spec": {"suite": "quick", "methods": METHODS}})
    assert isinstance(create.spec, JobSpec)
    parts = [job_cost(JobCreate(kind="benchmark", spec=task)) for task in suite_specs(create.spec)]
    assert job_cost(create) == sum(parts) > 0


def result(task: str, scores: dict[tuple[str, int], float], *, higher: bool = True) -> dict[str, Any]:
    """A task result whose rows past the training size (4) score each (method, seed) as given; the training size
    itself (left out of the ranking) scores the opposite."""
    rows = []
    for (method, seed), value in scores.items():
        rows.append({"method": method, "seed": seed, "size": 6, "metric": "m", "value": value})
        rows.append({"method": method, "seed": seed, "size": 4, "metric": "m", "value": 1 - value})
    return {"data": {"task": task, "metric": "m", "train_size": 4, "higher_is_better": higher}, "table": rows}


def test_mean_reciprocal_rank_over_tasks_and_seeds() -> None:
    first = result("a", {("nope", 0): 0.9, ("rope", 0): 0.1, ("alibi", 0): 0.5})
    second = result("b", {("nope", 0): 0.2, ("rope", 0): 0.3, ("alibi", 0): 0.3})  # a tie shares rank 1
    ranked = {entry["method"]: entry["mrr"] for entry in mean_reciprocal_rank([first, second])}
    assert ranked == pytest.approx({"nope": (1 + 1 / 3) / 2, "rope": (1 / 3 + 1) / 2, "alibi": (1 / 2 + 1) / 2})
    lower = result("ppl", {("nope", 0): 3.0, ("rope", 0): 2.0}, higher=False)  # perplexity: lower ranks first
    assert [entry["method"] for entry in mean_reciprocal_rank([lower])] == ["rope", "nope"]
