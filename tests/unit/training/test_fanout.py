"""The runs a benchmark fans out into: one per (method, seed), one per (task, method, seed) for a suite; each
run's one-run spec costs its share of the job."""

from __future__ import annotations

import pytest

from posenc.jobspec import job_cost
from posenc.schemas.jobs import JobCreate, JobSpec
from posenc.tasks.suites import SUITES
from posenc.training.fanout import plan, run_spec


def spec(**fields: object) -> JobSpec:
    raw = {"methods": [{"method": "nope"}, {"method": "rope"}], "data": {"task": "copy", "size": 6}} | fields
    return JobSpec.model_validate(raw)


def test_a_benchmark_has_one_run_per_method_and_seed() -> None:
    runs = plan(spec(seeds=[0, 1, 1]))  # a seed listed twice is one run
    assert [(run["method"], run["seed"]) for run in runs] == [("nope", 0), ("nope", 1), ("rope", 0), ("rope", 1)]
    assert all("task" not in run for run in runs)


def test_a_suite_has_one_run_per_task_method_and_seed() -> None:
    suite = JobSpec.model_validate({"methods": [{"method": "nope"}, {"method": "rope"}], "suite": "quick"})
    runs = plan(suite)
    tasks = [task["data"]["task"] for task in SUITES["quick"].tasks]
    expected = [(task, position, method, seed) for position, task in enumerate(tasks) for method in ("nope", "rope")
                for seed in SUITES["quick"].seeds]  # fmt: skip
    assert [(run["task"], run["position"], run["method"], run["seed"]) for run in runs] == expected


@pytest.mark.parametrize("raw", [{"seeds": [0, 1, 2]}, {"suite": "quick", "data": None}])
def test_the_runs_costs_add_up_to_the_jobs(raw: dict[str, object]) -> None:
    fields = {key: value for key, value in raw.items() if value is not None}
    whole = spec(**fields) if "suite" not in fields else JobSpec.model_validate(
        {"methods": [{"method": "nope"}, {"method": "alibi"}], **fields})  # fmt: skip
    parts = [
        job_cost(JobCreate(kind="benchmark", spec=run_spec(whole, run.get("position"), run["index"], run["seed"])))
        for run in plan(whole)
    ]
    assert sum(parts) == job_cost(JobCreate(kind="benchmark", spec=whole))
    assert all(part > 0 for part in parts)
