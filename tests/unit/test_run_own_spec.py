"""A run of a fanned-out benchmark reports its own spec (posenc.jobspec.run_own_spec): its one method entry and
seed, its task's for a suite, its arm for a context-extension study, from the runs the worker plans."""

from __future__ import annotations

from typing import Any

import pytest

from posenc.jobspec import run_own_spec, validate_spec
from posenc.schemas.jobs import JobSpec
from posenc.training.fanout import plan

BENCHMARK = {
    "methods": [{"method": "nope"}, {"method": "rope", "params": {"base": 500.0}}, {"method": "alibi"}],
    "data": {"task": "copy_single", "size": 4},
    "model": {"layers": 1, "dim": 16, "heads": 2},
    "train": {"steps": 20, "batch_size": 8},
    "seeds": [3, 7],
}
SUITE = {"suite": "quick", "methods": [{"method": "nope"}, {"method": "rope"}], "seeds": [0, 1]}
STUDY = {
    "methods": [{"method": "rope_linear"}, {"method": "rope_yarn"}],
    "extension": {"factor": 2, "finetune_steps": 10},
    "data": {"corpus": "stdlib"},
    "model": {"layers": 1, "dim": 16, "heads": 2},
    "train": {"length": 16, "steps": 10, "batch_size": 4},
    "eval": {"lengths": [16, 32], "max_tokens": 256},
}


def own_specs(spec: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    whole = JobSpec.model_validate(spec)
    return [(run, run_own_spec(whole.model_dump(mode="json"), run)) for run in plan(whole)]


def test_each_run_of_a_benchmark_shows_its_method_and_seed() -> None:
    runs = own_specs(BENCHMARK)
    assert len(runs) == 6
    for run, own in runs:
        entry = BENCHMARK["methods"][run["index"]]
        (ref,) = own["methods"]
        assert (ref["method"], ref["params"]) == (entry["method"], entry.get("params", {}))
        assert own["seeds"] == [run["seed"]]
        assert own["data"]["task"] == "copy_single"
        assert own["train"]["steps"] == 20
        validate_spec("benchmark", JobSpec.model_validate(own))  # a spec of its own, valid as submitted
    assert sorted((own["methods"][0]["method"], own["seeds"][0]) for _, own in runs) == sorted(
        (ref["method"], seed) for ref in BENCHMARK["methods"] for seed in (3, 7)
    )


def test_a_suite_run_shows_its_task_not_the_suite() -> None:
    runs = own_specs(SUITE)
    assert {run["task"] for run, _ in runs} == {"copy_single", "copy"}
    for run, own in runs:
        assert own["suite"] is None
        assert own["data"]["task"] == run["task"]
        assert [ref["method"] for ref in own["methods"]] == [run["method"]]
        assert own["seeds"] == [run["seed"]]


def test_a_study_run_shows_its_arm_with_the_params_the_study_fills_in() -> None:
    runs = own_specs(STUDY)
    labels = [own["methods"][0]["label"] for _, own in runs]
    assert labels == [run["method"] for run, _ in runs]
    assert labels == ["base", "rope_linear", "rope_yarn", "base+ft", "rope_linear+ft", "rope_yarn+ft"]
    yarn = next(own["methods"][0] for _, own in runs if own["methods"][0]["label"] == "rope_yarn")
    assert yarn["method"] == "rope_yarn"
    assert yarn["params"]["factor"] == 2
    assert yarn["params"]["original_max_position_embeddings"] == 16
    assert all(own["extension"]["factor"] == 2 for _, own in runs)


def test_a_run_the_spec_does_not_have_is_an_error() -> None:
    whole = JobSpec.model_validate(BENCHMARK).model_dump(mode="json")
    with pytest.raises(IndexError):
        run_own_spec(whole, {"index": 5, "seed": 3})
