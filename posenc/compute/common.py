"""What every compute route shares: the tensors a request will produce (``OutputSpec``), the prepared work
(``Prepared``: its cost and its ``run``), the result, and resolving a method and its params."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
import torch
from pydantic import BaseModel, ValidationError

from posenc.compute.cost import Cost
from posenc.errors import FieldErrors, InvalidInput
from posenc.pe import (
    MethodParams,
    MethodSpec,
    get_method,
)
from posenc.pe.kinds import require_kind
from posenc.pe.types import Extent
from posenc.schemas.jobs import ComputeRoute
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import ITEMSIZE, RandomTensor, TensorData, tensor_fields

ROTARY_TENSOR_FIELDS = frozenset({"q", "k", "positions"})
ATTENTION_TENSOR_FIELDS = frozenset({"q", "k", "v", "x", "key_padding_mask", "positions", "params.", "state."})
ARTIFACT_NAME = "tensors.safetensors"
RESULT_NAME = "result.json"
JOB_REQUEST_LOC = ("body", "spec", "request")
# How to get past the gateway's output budget; {route} and {request} are filled in by jobs_hint().
JOBS_HINT = (
    'or submit it as a job: POST /v1/jobs {{"kind": "compute", "spec": {{"route": "{route}", '
    '"request": {request}}}}} and download ' + ARTIFACT_NAME + " from its artifacts"
)
Loc = tuple[str | int, ...]


def jobs_hint(route: ComputeRoute) -> str:
    """The 413 hint naming the compute job for ``route`` (a job takes JSON, never a safetensors body)."""
    request = "<this body>" if route in ("bias", "encodings") else "<this body as JSON>"
    return JOBS_HINT.format(route=route, request=request)


# ------------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class OutputSpec:
    """A tensor a request will produce, known before anything is computed."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * ITEMSIZE[self.dtype]


@dataclass
class TensorResult:
    tensors: dict[str, torch.Tensor]  # in response order; the first is the default single tensor
    meta: dict[str, Any] = field(default_factory=dict)


# Work units (about 1 ns of one core, posenc.compute.cost) per 4 bytes a tensor route writes or reads: its
# elementwise passes over outputs and workspace, seeded inputs drawn (bench/request_costs.py checks the constant).
WORK_PER_WORD = 12
# Work units per multiply-add of a matrix product (about 8 per ns on one core in float32).
WORK_PER_MAC = 1 / 8
# Work units per value drawn from a seeded generator (torch.randn: 8-16 ns a value on the reference machine).
WORK_PER_DRAWN = 16


def method_cost(spec: MethodSpec, params: MethodParams, extent: Extent, loc: Loc = ("params",)) -> Cost:
    """What ``params`` make ``spec`` compute at ``extent`` (its registered ``param_cost``) in the cost model's
    terms: the values it draws and allocates (float64 at worst) as workspace, their work, its multiply-adds; the
    params that drive it named under ``loc``."""
    cost = spec.cost_of(params, extent)
    values = cost.drawn + cost.elements
    work = WORK_PER_DRAWN * cost.drawn + WORK_PER_WORD * (values + cost.passes) + math.ceil(WORK_PER_MAC * cost.macs)
    return Cost(workspace_bytes=8 * values, work=work, fields=tuple((*loc, name) for name in cost.params))


@dataclass
class Prepared:
    """A tensor route's request, validated and sized: its outputs, workspace and work, and ``run``."""

    route: ComputeRoute
    outputs: list[OutputSpec]
    workspace_bytes: int  # intermediate tensors beyond the outputs (scores, copies in compute dtype)
    input_elements: int
    shrink_hint: str  # how to make the request itself smaller
    run: Callable[[], TensorResult]
    fields: tuple[Loc, ...] = ()  # the request fields its size follows
    matmul_macs: int = 0  # multiply-adds of its matrix products, beyond the elementwise passes
    extra_work: int = 0  # work units beyond both (per-entry work a route knows it does)
    method: Cost = field(default_factory=Cost)  # what the method's params make it compute (``method_cost``)

    @property
    def cost(self) -> Cost:
        """The one cost model's terms (``posenc.compute.cost``); JSON answers carry every output element."""
        return Cost(
            output_bytes=sum(output.nbytes for output in self.outputs),
            workspace_bytes=self.workspace_bytes,
            json_elements=self.output_elements,
            work=WORK_PER_WORD * (self.total_bytes // 4) + math.ceil(WORK_PER_MAC * self.matmul_macs) + self.extra_work,
            fields=self.fields,
            input_elements=self.input_elements,
        ).plus(self.method)

    @property
    def total_bytes(self) -> int:
        return sum(output.nbytes for output in self.outputs) + self.workspace_bytes

    @property
    def output_elements(self) -> int:
        return sum(output.elements for output in self.outputs)

    @property
    def jobs_hint(self) -> str:
        return jobs_hint(self.route)

    @property
    def budget_hint(self) -> str:
        """How to get under the gateway's output budget."""
        return f"{self.shrink_hint}, {self.jobs_hint}"


# ------------------------------------------------------------------------------------------ method + params
def resolve_method(name: str, *kinds: Kind) -> MethodSpec:
    """The registered spec (unknown names raise UnknownMethodError, a 404); other kinds than the route serves
    are a 422."""
    spec = get_method(name)
    try:
        require_kind(spec, *kinds)
    except InvalidInput as exc:
        raise InvalidInput(exc.loc, f"{exc.msg}: POST /v1/attention applies every method") from None
    return spec


def parse_params(spec: MethodSpec, raw: dict[str, Any]) -> MethodParams:
    """Validate ``params`` against the method's model; errors point at ``body.params.<field>``."""
    try:
        return spec.parse_params(raw)
    except ValidationError as exc:
        known = ", ".join(spec.params_model.model_fields) or "none"
        errors = []
        for error in exc.errors(include_url=False, include_input=False):
            if error["type"] == "extra_forbidden":
                error = {**error, "msg": f"unknown parameter for {spec.name} (known: {known})"}
            errors.append(error)
        raise FieldErrors({**error, "loc": ("params", *error["loc"])} for error in errors) from None


def summarise(value: Any) -> Any:
    """JSON-able params for meta: tensors are described (dtype, shape or the random spec), never echoed."""
    if isinstance(value, RandomTensor):
        return {"random": value.random.model_dump(mode="json")}
    if isinstance(value, TensorData):
        return {"dtype": value.dtype, "shape": list(value.shape)}
    if isinstance(value, BaseModel):
        return {name: summarise(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, list | tuple):
        return [summarise(item) for item in value]
    if isinstance(value, dict):
        return {str(key): summarise(item) for key, item in value.items()}
    return pydantic_core.to_jsonable_python(value)


def method_meta(spec: MethodSpec, params: MethodParams, dtype: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "method": spec.name,
        "kind": spec.kind.value,
        "params": summarise(params),
        "conventions": dict(spec.conventions),
        "dtype": dtype,
    }
    if spec.learned:
        if tensor_fields(params):
            meta["parameters"] = "supplied"
        else:
            meta["parameters"] = "seeded"
            meta["seed"] = getattr(params, "seed", None)
    return meta
