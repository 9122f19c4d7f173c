"""Compute routes: bias matrices, rotated q/k, absolute encodings and attention maps.

Every route follows the same steps on the event loop: prepare (validate, cost everything with the one cost
model of ``posenc.compute.cost``, allocate nothing), check the budgets and what the Accept type can carry, wait
for a compute slot; then compute and encode on a compute thread, so torch never blocks the event loop, except for
work within the small-request threshold (``inline_max_bytes``, ``inline_max_work``), which costs less than the
hand-off to a thread. A request naming a model config or giving a graph is prepared in its slot too (resolving
the config, reading the edges is work).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from posenc.compute import (
    ATTENTION_TENSOR_FIELDS,
    ROTARY_TENSOR_FIELDS,
    Prepared,
    prepare,
)
from posenc.compute.cost import Budgets
from posenc.errors import located
from posenc.schemas.compute import AttentionRequest, BiasRequest, EncodingRequest, RotaryRequest
from posenc.schemas.jobs import ComputeRequest, ComputeRoute
from posenc.settings import Settings
from service.deps import MediaTypeDep, SettingsDep, SlotsDep, TensorNameDep
from service.errors import ProblemError
from service.limits import ComputeSlots, check_json_budget
from service.transport import (
    JSON,
    SAFETENSORS,
    SAFETENSORS_TYPES,
    binary_request_body,
    check_deliverable,
    content_type,
    parse_json_request,
    parse_safetensors_request,
    render,
    tensor_responses,
)

router = APIRouter(prefix="/v1", tags=["compute"])
RequestT = TypeVar("RequestT", RotaryRequest, AttentionRequest)


async def _compute(
    route: ComputeRoute,
    request: ComputeRequest,
    media_type: str,
    tensor: str | None,
    settings: Settings,
    slots: ComputeSlots,
) -> Response:
    """Prepare (validate and cost, nothing computed), check the budgets and what the Accept type can carry, then
    compute and encode in a compute slot: on a compute thread, or inline on the event loop when the work is
    within the small-request threshold. A request that names a model config is prepared in the slot too: its
    resolution is work."""
    budgets = Budgets.from_settings(settings)

    def checked() -> Prepared:
        with located(("body",)):
            budgets.check_declared(request)  # before prepare: a method's checks may decode its params' tensors
        prepared = prepare(route, request)
        with located(("body",)):
            budgets.check(prepared.cost, prepared.budget_hint, json_answer=False)
        if media_type == JSON:
            check_json_budget(prepared.output_elements, settings)
        check_deliverable(prepared.outputs, media_type, tensor)
        return prepared

    if getattr(request, "config", None) is not None or getattr(request, "graph", None) is not None:
        # a config to resolve, a graph's edges to read: preparing is work too
        return await slots.run(lambda: _run_and_render(checked(), media_type, tensor))
    prepared = checked()
    work = functools.partial(_run_and_render, prepared, media_type, tensor)
    return await slots.run(work, inline=budgets.small(prepared.cost))


def _run_and_render(prepared: Prepared, media_type: str, tensor: str | None) -> Response:
    return render(prepared.run(), media_type, tensor)


def _json_or_safetensors(
    model: type[RequestT], tensor_fields: frozenset[str]
) -> Callable[[Request], Awaitable[RequestT]]:
    """A body dependency: JSON (``model``), or a safetensors file whose tensors stand in for ``tensor_fields``."""

    async def parse(request: Request) -> RequestT:
        body = await request.body()  # under its cap: BodySizeLimit counted it (the JSON cap unless safetensors)
        if content_type(request.headers) in SAFETENSORS_TYPES:
            settings: Settings = request.app.state.settings
            return parse_safetensors_request(body, model, tensor_fields, settings.max_json_body_bytes)
        _require_json(request)
        return parse_json_request(body, model)

    return parse


rotary_body = _json_or_safetensors(RotaryRequest, ROTARY_TENSOR_FIELDS)
attention_body = _json_or_safetensors(AttentionRequest, ATTENTION_TENSOR_FIELDS)


def _require_json(request: Request) -> None:
    media_type = content_type(request.headers)
    if media_type and media_type != JSON and not media_type.endswith("+json"):
        raise ProblemError(415, f"send {JSON} or {SAFETENSORS}, not {media_type!r}")


@router.post(
    "/bias",
    name="bias",
    summary="Bias matrix B (H, Nq, Nk) of a bias method, or its Toeplitz table (H, Nq + Nk - 1)",
    response_class=Response,
    responses=tensor_responses("tensor `bias`"),
)
async def compute_bias(
    body: BiasRequest, media_type: MediaTypeDep, tensor: TensorNameDep, settings: SettingsDep, slots: SlotsDep
) -> Response:
    return await _compute("bias", body, media_type, tensor, settings, slots)


@router.post(
    "/rotary",
    name="rotary",
    summary="Rotate q (and k) of shape (B, H, N, D) by their positions with a rotary method",
    response_class=Response,
    responses=tensor_responses("tensors `q`, `k` (and `cos`, `sin` with return_tables)"),
    openapi_extra=binary_request_body(RotaryRequest, sorted(ROTARY_TENSOR_FIELDS)),
)
async def compute_rotary(
    request: Annotated[RotaryRequest, Depends(rotary_body)],
    media_type: MediaTypeDep,
    tensor: TensorNameDep,
    settings: SettingsDep,
    slots: SlotsDep,
) -> Response:
    return await _compute("rotary", request, media_type, tensor, settings, slots)


@router.post(
    "/encodings",
    name="encodings",
    summary="Absolute encoding P (length, dim) or (*grid, dim) of an absolute method",
    response_class=Response,
    responses=tensor_responses("tensor `encoding`"),
)
async def compute_encoding(
    body: EncodingRequest,
    media_type: MediaTypeDep,
    tensor: TensorNameDep,
    settings: SettingsDep,
    slots: SlotsDep,
) -> Response:
    return await _compute("encodings", body, media_type, tensor, settings, slots)


@router.post(
    "/attention",
    name="attention",
    summary="Attention weights (B, H, Nq, Nk) of any method, and the output (B, H, Nq, Dv) when v is given",
    response_class=Response,
    responses=tensor_responses(
        "tensor `weights`; with v also `output` (B, H, Nq, Dv) (and `leftover` (B, H, Nq) for methods that keep "
        "mass for no key); with stats also `entropy` (H,), `mean_distance` (H,) and `mass_by_distance` "
        "(H, max(Nq, Nk))"
    ),
    openapi_extra=binary_request_body(AttentionRequest, sorted(ATTENTION_TENSOR_FIELDS)),
)
async def compute_attention(
    request: Annotated[AttentionRequest, Depends(attention_body)],
    media_type: MediaTypeDep,
    tensor: TensorNameDep,
    settings: SettingsDep,
    slots: SlotsDep,
) -> Response:
    return await _compute("attention", request, media_type, tensor, settings, slots)
