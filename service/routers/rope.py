"""RoPE diagnostics: each request is planned (its setup or config resolved, its cost worked out from the request)
and run in a compute slot, never on the event loop; a cost over the budgets is a 413 naming the fields that
drive it. The math is in ``posenc``; the plans in ``posenc.compute.rope``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from posenc.compute import rope as plans
from posenc.schemas.errors import Problem
from posenc.schemas.rope import (
    CompareRequest,
    DecodeRequest,
    FrequenciesRequest,
    PermutationRequest,
    PermutationResponse,
    PositionIdsRequest,
    PositionIdsResponse,
    PrecisionRequest,
    ServeCheckRequest,
    TemperatureRequest,
    TemperatureResponse,
)
from service.deps import SettingsDep, SlotsDep
from service.transport import json_answer

router = APIRouter(prefix="/v1", tags=["rope"])
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "missing or invalid X-API-Key"},
    413: {"model": Problem, "description": "over a budget: size, limit and the fields that drive it"},
    422: {"model": Problem, "description": "invalid request; the error names the field"},
    429: {"model": Problem, "description": "rate limited; see Retry-After"},
    503: {"model": Problem, "description": "every compute slot is busy; see Retry-After"},
}


@router.post("/rope/position_ids", name="position_ids", response_model=PositionIdsResponse, responses=_PROBLEMS)
async def position_ids(request: PositionIdsRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """Qwen-VL M-RoPE (t, h, w) position ids of text, image and video segments, by the model's own rule."""

    def answer(result: tuple[list[list[int]], int, list[str]]) -> Response:
        ids, next_position, warnings = result
        return json_answer(PositionIdsResponse(ids=ids, next_position=next_position, warnings=warnings))

    return await slots.serve(settings, lambda: plans.plan_position_ids(request), answer)


@router.post("/rope/frequencies", name="frequencies", responses=_PROBLEMS)
async def frequencies(request: FrequenciesRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """Per pair: ω, wavelength, rotations over the training length, whether it wraps, and the band of methods
    that have bands (YaRN's ramp, Llama 3's wavelength bands); the axis of each pair for multi-axis methods."""
    return await slots.serve(settings, lambda: plans.plan_frequencies(request), json_answer, body=request)


@router.post("/rope/precision", name="precision", responses=_PROBLEMS)
async def precision(request: PrecisionRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """The error of rotating q and k (and of their logits) in a dtype against float64, per band of positions."""
    return await slots.serve(settings, lambda: plans.plan_precision(request), json_answer, body=request)


@router.post("/rope/compare", name="compare", responses=_PROBLEMS)
async def compare(request: CompareRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """A weightless divergence probe: the first position where two setups' angles, or the logits of seeded random
    q and k, differ by more than a tolerance (null where they never do)."""
    return await slots.serve(settings, lambda: plans.plan_compare(request), json_answer, body=request)


@router.post("/rope/decode", name="decode", responses=_PROBLEMS)
async def decode(request: DecodeRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """Prefill, then decode step by step with a KV cache, against full recomputation: the logit error per step
    and the first step that diverges (dynamic scalings once the length passes their original length)."""
    return await slots.serve(settings, lambda: plans.plan_decode(request), json_answer, body=request)


@router.post("/rope/permutation", name="permutation", response_model=PermutationResponse, responses=_PROBLEMS)
async def permutation(request: PermutationRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """The row order of a q / k projection within each head between interleaved (Meta) and half (Hugging Face)
    pairing: new row r = old row order[r]."""
    return await slots.serve(
        settings, lambda: plans.plan_permutation(request), lambda order: json_answer(PermutationResponse(order=order))
    )


@router.post("/rope/temperature", name="temperature", response_model=TemperatureResponse, responses=_PROBLEMS)
async def temperature(request: TemperatureRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """The position-dependent query temperature of a config's layer, per position: Llama 4's on its NoPE layers,
    Mistral 3's llama_4_scaling_beta on its RoPE layers (1 where the layer does not scale its queries)."""

    def answer(result: tuple[bool, list[float], str | None]) -> Response:
        applies, values, formula = result
        return json_answer(TemperatureResponse(applies=applies, temperature=values, formula=formula))

    return await slots.serve(settings, lambda: plans.plan_temperature(request), answer)


@router.post("/rope/serve_check", name="serve_check", responses=_PROBLEMS)
async def serve_check(request: ServeCheckRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """A serving simulator: the attention logits of chunked prefill, token-by-token decode, a left-padded batch,
    packed documents and a sink + window cache against full recomputation, in float64, for a method (rotary or
    bias) or a config's layer (NoPE and Llama 4's query temperature included). Per variant: the largest logit
    error (and per batch row or request), the first wrong (sequence, query, key), and for the known-bad schedules
    whether this setup is sensitive to them; every correct schedule is exactly 0. The transformers variants are
    what transformers computes: its left-padded batch rotated for the longest row's length, its cache of rotated
    keys, and its dynamic rotary state carried across requests (``requests``), each reported as measured."""
    return await slots.serve(settings, lambda: plans.plan_serve_check(request), json_answer, body=request)
