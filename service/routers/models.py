"""Real models' rotary setups: the presets, any config.json resolved into per-layer rotations, and a GGUF's header
metadata resolved and compared with its config (in a compute slot: the resolution is work, bounded by the config
reader's limits)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from posenc.compute import rope as plans
from posenc.compute.gguf import plan_gguf
from posenc.compute.rope import plan_resolve
from posenc.real_models.presets import PRESETS, get_preset
from posenc.schemas.errors import Problem
from posenc.schemas.models import (
    GgufRequest,
    GgufResolved,
    ModelPreset,
    ModelPresetList,
    ResolvedModel,
    ResolveRequest,
)
from posenc.schemas.rope import ConvertRequest, ConvertResponse
from service.deps import SettingsDep, SlotsDep
from service.transport import json_answer

router = APIRouter(prefix="/v1", tags=["models"])
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "missing or invalid X-API-Key"},
    404: {"model": Problem, "description": "no preset by that name"},
    413: {"model": Problem, "description": "over a budget: size, limit and the fields that drive it"},
    422: {"model": Problem, "description": "a config that cannot be resolved; the error names its key"},
    429: {"model": Problem, "description": "rate limited; see Retry-After"},
    503: {"model": Problem, "description": "every compute slot is busy; see Retry-After"},
}


def _preset(name: str) -> ModelPreset:
    config = get_preset(name)
    return ModelPreset(name=name, model_type=config.get("model_type", config.get("_class_name")), config=config)


@router.get("/models", name="list", response_model=ModelPresetList, responses=_PROBLEMS)
def list_presets() -> ModelPresetList:
    """The presets: the rope-relevant fields of widely used models' published configs."""
    items = [_preset(name) for name in sorted(PRESETS)]
    return ModelPresetList(data=items, count=len(items))


@router.get("/models/{name}", name="retrieve", response_model=ModelPreset, responses=_PROBLEMS)
def retrieve_preset(name: str) -> ModelPreset:
    """One preset by name."""
    return _preset(name)


@router.post("/models/resolve", name="resolve", response_model=ResolvedModel, responses=_PROBLEMS)
async def resolve_model(request: ResolveRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """A model config -> one rotary setup per layer (method and params, rotated slice, pairing, scales,
    window, M-RoPE sections; method null on NoPE layers) and warnings for known bug patterns."""
    return await slots.serve(
        settings,
        lambda: plan_resolve(request.config, request.preset),
        lambda resolved: json_answer(ResolvedModel.model_validate(resolved)),
    )


@router.post("/models/gguf", name="gguf", response_model=GgufResolved, responses=_PROBLEMS)
async def resolve_gguf(request: GgufRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """A GGUF's header metadata -> the same per-layer table as ``/v1/models/resolve`` (for the Hugging Face style
    config the metadata maps to, returned as ``config``), and with ``against`` (a config.json or a preset's name)
    a warning for every rope field the conversion dropped, renamed or changed (both values in ``evidence``) and
    for every layer that resolves differently. The client reads the file (header only) and sends its metadata and
    rope tensors; the server never needs the file."""
    return await slots.serve(
        settings, lambda: plan_gguf(request), lambda answer: json_answer(GgufResolved.model_validate(answer))
    )


@router.post("/models/convert", name="convert", response_model=ConvertResponse, responses=_PROBLEMS)
async def convert(request: ConvertRequest, settings: SettingsDep, slots: SlotsDep) -> Response:
    """The config in the other Hugging Face dialect (v4 rope_scaling <-> v5 rope_parameters); it resolves to the
    same layers."""
    return await slots.serve(
        settings, lambda: plans.plan_convert(request), lambda config: json_answer(ConvertResponse(config=config))
    )
