"""Real models' rotary setups: the presets, and any config.json resolved into per-layer rotations."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from posenc.errors import located
from posenc.model_configs import resolve_config
from posenc.model_presets import PRESETS, get_preset
from posenc.schemas.errors import Problem
from posenc.schemas.models import ModelPreset, ModelPresetList, ResolvedModel, ResolveRequest

router = APIRouter(prefix="/v1", tags=["models"])
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "missing or invalid X-API-Key"},
    404: {"model": Problem, "description": "no preset by that name"},
    422: {"model": Problem, "description": "a config that cannot be resolved; the error names its key"},
    429: {"model": Problem, "description": "rate limited; see Retry-After"},
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
def resolve_model(request: ResolveRequest) -> ResolvedModel:
    """A model config -> one rotary setup per layer (method and params, rotated slice, pairing, scales,
    window, M-RoPE sections; method null on NoPE layers) and warnings for known bug patterns."""
    if request.preset is not None:
        config = _preset(request.preset).config
        prefix: tuple[str, ...] = ("body", "preset")
    else:
        assert request.config is not None
        config, prefix = request.config, ("body", "config")
    with located(prefix):
        resolved = resolve_config(config)
    return ResolvedModel.model_validate(resolved.to_json())
