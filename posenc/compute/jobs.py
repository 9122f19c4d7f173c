"""Compute jobs: a compute route's request run on a worker without the gateway's output budget, its tensors
written to the artifact ``tensors.safetensors`` and its result to ``result.json``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pydantic_core
import safetensors.torch

from posenc.compute.common import (
    ARTIFACT_NAME,
    JOB_REQUEST_LOC,
    RESULT_NAME,
    Prepared,
    TensorResult,
)
from posenc.compute.dispatch import prepare
from posenc.errors import BudgetExceeded, FieldErrors, InvalidInput
from posenc.files import spell_non_finite, write_atomic, write_json_atomic
from posenc.schemas.jobs import ComputeJobSpec
from posenc.tensors import dtype_name


# ---------------------------------------------------------------------------------------------------- jobs
@contextmanager
def _job_locs() -> Iterator[None]:
    """Errors of the request name it where a job carries it: ("spec", "request", ...)."""
    try:
        yield
    except InvalidInput as exc:
        raise exc.relocated(("body",), JOB_REQUEST_LOC) from None
    except FieldErrors as exc:
        raise exc.relocated(("body",), JOB_REQUEST_LOC) from None


def prepare_job(spec: ComputeJobSpec) -> Prepared:
    """The prepare step of a compute job: the gateway runs it at submission, the worker again before the work."""
    with _job_locs():
        prepared = prepare(spec.route, spec.request)
    run = prepared.run

    def run_with_job_locs() -> TensorResult:
        with _job_locs():
            return run()

    return dataclasses.replace(prepared, run=run_with_job_locs)


def check_job_budget(prepared: Prepared, limit: int) -> None:
    """A compute job's own budget (``max_job_output_bytes``): outputs plus workspace; BudgetExceeded is a 413."""
    cost = prepared.cost
    if cost.total_bytes > limit:
        raise BudgetExceeded(
            "the memory this compute job needs (outputs and workspace)",
            cost.total_bytes,
            limit,
            f"{prepared.shrink_hint} (the limit of a compute job is the setting max_job_output_bytes)",
            fields=cost.fields,
        )


def safetensors_metadata(meta: Mapping[str, Any]) -> dict[str, str]:
    """A result's meta as safetensors metadata: one JSON string per key (responses and artifacts alike)."""
    return {key: json.dumps(value, default=str) for key, value in meta.items()}


def run_compute_job(spec: ComputeJobSpec, *, job_dir: Path, max_bytes: int | None = None) -> dict[str, Any]:
    """Run a compute job: every tensor with the meta to ``job_dir/tensors.safetensors``; returns the JSON-able
    result ``{"route", "tensors": {name: {"dtype", "shape"}}, "meta", "artifact"}``.

    Idempotent: ``result.json`` is written last, and a rerun that finds it returns it without computing again.
    ``max_bytes`` is the job budget (``max_job_output_bytes``), checked again here as the gateway did.
    """
    result_file = job_dir / RESULT_NAME
    if result_file.is_file() and (job_dir / ARTIFACT_NAME).is_file():
        recorded: dict[str, Any] = json.loads(result_file.read_text())
        return recorded
    prepared = prepare_job(spec)
    if max_bytes is not None:
        check_job_budget(prepared, max_bytes)
    computed = prepared.run()
    tensors = {name: tensor.detach().to("cpu").contiguous() for name, tensor in computed.tensors.items()}
    write_atomic(
        job_dir / ARTIFACT_NAME,
        lambda path: safetensors.torch.save_file(tensors, str(path), metadata=safetensors_metadata(computed.meta)),
    )
    result = {
        "route": spec.route,
        "tensors": {name: {"dtype": dtype_name(t.dtype), "shape": list(t.shape)} for name, t in tensors.items()},
        "meta": _jsonable(computed.meta),
        "artifact": ARTIFACT_NAME,
    }
    write_json_atomic(result_file, result)
    return result


def _jsonable(value: Any) -> Any:
    """Meta for a JSON job result: non-finite floats spelled "nan", "inf", "-inf" like tensors on the wire."""
    if isinstance(value, float):
        return spell_non_finite(value)
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return pydantic_core.to_jsonable_python(value, fallback=str)
