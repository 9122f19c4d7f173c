"""posenc.compute: the prepare step shared by the gateway and the workers, and the compute job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError
from safetensors import safe_open

from posenc import compute
from posenc.compute import ARTIFACT_NAME, RESULT_NAME, check_job_budget, prepare, prepare_job, run_compute_job
from posenc.errors import BudgetExceeded, FieldErrors, InvalidInput
from posenc.jobspec import validate_job
from posenc.pe import BiasContext, UnknownMethodError, bias_dense, get_method
from posenc.schemas.jobs import ComputeJobSpec, JobCreate, JobSpec

Q = {"random": {"shape": [1, 2, 5, 8], "seed": 1}}
K = {"random": {"shape": [1, 2, 5, 8], "seed": 2}}
REQUESTS: dict[str, dict[str, Any]] = {
    "bias": {"method": "alibi", "num_heads": 4, "query_length": 6, "key_length": 7},
    "rotary": {"method": "rope", "q": Q, "k": K, "return_tables": True},
    "encodings": {"method": "sinusoidal", "length": 9, "dim": 6, "dtype": "float64"},
    "attention": {"method": "alibi", "q": Q, "k": K, "stats": True},
}


def job_spec(route: str, request: dict[str, Any]) -> ComputeJobSpec:
    return ComputeJobSpec.model_validate({"route": route, "request": request})


def read_artifact(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), framework="pt") as file:
        return {name: file.get_tensor(name) for name in file.keys()}, file.metadata()  # noqa: SIM118


# ------------------------------------------------------------------------------------------------ the job
@pytest.mark.parametrize("route", list(REQUESTS))
def test_a_compute_job_writes_the_tensors_of_the_in_process_result(route: str, tmp_path: Path) -> None:
    spec = job_spec(route, REQUESTS[route])
    expected = prepare(spec.route, spec.request).run()

    result = run_compute_job(spec, job_dir=tmp_path)

    tensors, metadata = read_artifact(tmp_path / ARTIFACT_NAME)
    assert list(tensors) != []
    assert set(tensors) == set(expected.tensors)
    for name, tensor in expected.tensors.items():
        assert tensors[name].dtype == tensor.dtype, name
        assert torch.equal(tensors[name], tensor), name
    # meta: one JSON string per key, as in the gateway's safetensors responses
    assert {key: json.loads(value) for key, value in metadata.items()} == json.loads(json.dumps(expected.meta))
    assert result == {
        "route": route,
        "tensors": {
            name: {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
            for name, t in expected.tensors.items()
        },
        "meta": json.loads(json.dumps(expected.meta)),
        "artifact": ARTIFACT_NAME,
    }
    assert json.loads((tmp_path / RESULT_NAME).read_text()) == result
    assert sorted(path.name for path in tmp_path.iterdir()) == [RESULT_NAME, ARTIFACT_NAME]  # no temp files


def test_the_bias_artifact_is_the_library_bias(tmp_path: Path) -> None:
    request = {"method": "alibi", "num_heads": 3, "query_length": 8, "causal": False, "dtype": "float64"}
    run_compute_job(job_spec("bias", request), job_dir=tmp_path)
    method = get_method("alibi")
    context = BiasContext(num_heads=3, query_length=8, key_length=8, causal=False, dtype=torch.float64)
    reference = bias_dense(method, method.parse_params({}), context)
    tensors, metadata = read_artifact(tmp_path / ARTIFACT_NAME)
    assert torch.equal(tensors["bias"], reference)
    assert json.loads(metadata["method"]) == "alibi"
    assert json.loads(metadata["causal"]) is False


def test_a_rerun_returns_the_recorded_result_without_computing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = job_spec("bias", REQUESTS["bias"])
    first = run_compute_job(spec, job_dir=tmp_path)
    written = (tmp_path / ARTIFACT_NAME).stat().st_mtime_ns

    def must_not_run(_: ComputeJobSpec) -> compute.Prepared:
        raise AssertionError("a finished compute job was computed again")

    monkeypatch.setattr(compute, "prepare_job", must_not_run)
    assert run_compute_job(spec, job_dir=tmp_path) == first
    assert (tmp_path / ARTIFACT_NAME).stat().st_mtime_ns == written


def test_an_artifact_without_its_result_is_computed_again(tmp_path: Path) -> None:
    """result.json is written last: without it the run did not finish, whatever else is on disk."""
    spec = job_spec("encodings", REQUESTS["encodings"])
    first = run_compute_job(spec, job_dir=tmp_path)
    (tmp_path / RESULT_NAME).unlink()
    (tmp_path / ARTIFACT_NAME).write_bytes(b"half a file")
    assert run_compute_job(spec, job_dir=tmp_path) == first
    tensors, _ = read_artifact(tmp_path / ARTIFACT_NAME)
    assert tensors["encoding"].shape == (9, 6)


def test_the_job_budget_is_checked_before_anything_is_computed(tmp_path: Path) -> None:
    spec = job_spec("bias", {"method": "alibi", "num_heads": 8, "query_length": 1024})
    with pytest.raises(BudgetExceeded) as refused:
        run_compute_job(spec, job_dir=tmp_path, max_bytes=1_000_000)
    assert refused.value.size == 2 * 8 * 1024 * 1024 * 4  # the float32 bias and its float32 workspace
    assert refused.value.limit == 1_000_000
    assert "form='toeplitz'" in str(refused.value)
    assert not (tmp_path / ARTIFACT_NAME).exists()
    check_job_budget(prepare_job(spec), refused.value.size)  # at the limit is allowed


# ------------------------------------------------------------------------------------- errors and hints
def test_job_errors_name_the_field_inside_the_job_request() -> None:
    with pytest.raises(UnknownMethodError):
        prepare_job(job_spec("bias", REQUESTS["bias"] | {"method": "no_such_method"}))
    with pytest.raises(FieldErrors) as bad_params:
        prepare_job(job_spec("bias", REQUESTS["bias"] | {"params": {"slopes": "x", "nope": 1}}))
    locs = [error["loc"] for error in bad_params.value.errors]
    assert ("body", "spec", "request", "params", "nope") in locs
    assert all(loc[:4] == ("body", "spec", "request", "params") for loc in locs)
    with pytest.raises(InvalidInput) as wrong_kind:
        prepare_job(job_spec("bias", REQUESTS["bias"] | {"method": "rope"}))
    assert wrong_kind.value.loc == ("body", "spec", "request", "method")


def test_errors_while_running_are_relocated_too(tmp_path: Path) -> None:
    """Non-integer positions are found only when the tensor is decoded, inside ``run``."""
    positions = {"dtype": "float32", "shape": [5], "data": [0, 1, 2, 3, 3.5]}
    spec = job_spec("rotary", {"method": "rope", "q": Q, "rotate": "query", "positions": positions})
    prepared = prepare_job(spec)
    with pytest.raises(InvalidInput, match="must be integers") as refused:
        prepared.run()
    assert refused.value.loc == ("body", "spec", "request", "positions")
    with pytest.raises(InvalidInput):
        run_compute_job(spec, job_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_route_errors_keep_the_body_locs() -> None:
    spec = job_spec("bias", REQUESTS["bias"] | {"params": {"nope": 1}})
    with pytest.raises(FieldErrors) as bad_params:
        prepare(spec.route, spec.request)
    assert [error["loc"] for error in bad_params.value.errors] == [("body", "params", "nope")]


def test_the_budget_hint_says_how_to_submit_the_job() -> None:
    prepared = prepare_job(job_spec("bias", REQUESTS["bias"]))
    assert prepared.budget_hint.startswith("ask for form='toeplitz'")
    assert '{"kind": "compute", "spec": {"route": "bias", "request": <this body>}}' in prepared.budget_hint
    assert "tensors.safetensors" in prepared.budget_hint
    rotary = prepare_job(job_spec("rotary", REQUESTS["rotary"]))
    assert '"route": "rotary", "request": <this body as JSON>' in rotary.jobs_hint


# ------------------------------------------------------------------------------------------- the schema
def test_job_create_pairs_each_kind_with_its_spec() -> None:
    compute_body = {"route": "bias", "request": REQUESTS["bias"]}
    assert isinstance(JobCreate.model_validate({"kind": "compute", "spec": compute_body}).spec, ComputeJobSpec)
    training = JobCreate.model_validate({"kind": "train", "spec": {"methods": [{"method": "rope"}]}})
    assert isinstance(training.spec, JobSpec)

    with pytest.raises(ValidationError, match="a compute job takes a spec") as wrong:
        JobCreate.model_validate({"kind": "compute", "spec": {"methods": [{"method": "rope"}]}})
    assert [error["loc"] for error in wrong.value.errors()] == [("spec",)]
    with pytest.raises(ValidationError, match="is for kind 'compute'"):
        JobCreate.model_validate({"kind": "benchmark", "spec": compute_body})
    with pytest.raises(ValidationError, match="is for kind 'compute'"):
        JobCreate(kind="train", spec=job_spec("bias", REQUESTS["bias"]))


def test_the_request_is_validated_by_the_model_of_its_route() -> None:
    with pytest.raises(ValidationError) as missing:
        JobCreate.model_validate({"kind": "compute", "spec": {"route": "bias", "request": {"method": "alibi"}}})
    assert {error["loc"] for error in missing.value.errors()} == {("spec", "request", "num_heads")}
    with pytest.raises(ValidationError, match="give exactly one of 'query_length' \\(1D\\), 'grid'") as no_layout:
        JobCreate.model_validate(
            {"kind": "compute", "spec": {"route": "bias", "request": {"method": "alibi", "num_heads": 2}}}
        )
    assert {error["loc"] for error in no_layout.value.errors()} == {("spec", "request")}
    with pytest.raises(ValidationError) as wrong_route:
        job_spec("encodings", REQUESTS["bias"])
    assert ("request", "num_heads") in {error["loc"] for error in wrong_route.value.errors()}
    with pytest.raises(ValidationError) as no_route:
        job_spec("no_such_route", REQUESTS["bias"])
    assert [error["loc"] for error in no_route.value.errors()] == [("route",)]


def test_a_job_spec_survives_its_round_trip_through_the_job_record() -> None:
    create = JobCreate.model_validate({"kind": "compute", "spec": {"route": "rotary", "request": REQUESTS["rotary"]}})
    stored = create.spec.model_dump(mode="json")
    assert ComputeJobSpec.model_validate(stored) == create.spec


def test_validate_job_dispatches_on_the_kind() -> None:
    big = {"route": "bias", "request": {"method": "alibi", "num_heads": 8, "query_length": 1024}}
    create = JobCreate.model_validate({"kind": "compute", "spec": big})
    validate_job(create)  # no limit given: the budget is not checked
    with pytest.raises(BudgetExceeded):
        validate_job(create, max_compute_bytes=1_000_000)
    unknown = JobCreate.model_validate(
        {"kind": "compute", "spec": big | {"request": {**big["request"], "method": "x"}}}
    )
    with pytest.raises(UnknownMethodError):
        validate_job(unknown)
    with pytest.raises(UnknownMethodError):
        validate_job(JobCreate.model_validate({"kind": "train", "spec": {"methods": [{"method": "x"}]}}))
