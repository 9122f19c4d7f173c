"""The method catalogue as it appears on the wire (``GET /v1/methods``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class Kind(StrEnum):
    """What a method changes; each kind has one function signature (see ``posenc.pe.types``)."""

    ABSOLUTE = "absolute"  # added to token embeddings: returns P (N, D) or (*grid, D)
    BIAS = "bias"  # added to the logits: returns B (H, Nq, Nk)
    ROTARY = "rotary"  # rotates q and k: returns frequencies, one shared apply
    SCORE_MOD = "score_mod"  # content-dependent logits from q, k and the layer input
    ATTENTION = "attention"  # replaces the softmax: returns the attention weights


class MethodInfo(BaseModel):
    name: str
    kind: Kind
    family: str = Field(description="the module the method lives in, e.g. 'rope_scaling'")
    paper: str = Field(description="citation and URL of the paper the formula comes from")
    summary: str = Field(description="first line of the method's docstring")
    learned: bool = Field(description="has trainable parameters (supplied as tensors or initialised from a seed)")
    toeplitz: bool = Field(
        default=False, description="bias methods only: depends on i - j alone, so form='toeplitz' is available"
    )
    axes: int = Field(
        default=1, description="coordinates per position: 1 for sequences, 2 for images, 3 for video, 0 for graph nodes"
    )
    per_layer: bool = Field(
        default=False, description="a model keeps one set of the method's learned parameters per layer"
    )
    needs: list[str] = Field(
        default_factory=list, description="layer inputs the method reads besides q and k ('x': the layer input)"
    )
    causal_only: bool = Field(default=False, description="defined for causal attention only")
    model_coupled: bool = Field(
        default=False,
        description="carries a position state from layer to layer (TAPE); /v1/attention gives one layer's update",
    )
    config_spellings: list[str] = Field(
        default_factory=list,
        description="real models' configs: the rope_type values that name this method (POST /v1/models/resolve)",
    )
    config_keys: list[str] = Field(
        default_factory=list, description="real models' configs: the keys of a rope dict this method reads"
    )
    pairings: list[str] = Field(
        default_factory=list,
        description="rotary methods: the pairings it rotates in, its own first (a request that names none gets it; "
        "another is refused)",
    )
    params_schema: dict[str, Any] = Field(description="JSON schema of 'params', with the paper's defaults")
    conventions: dict[str, str] = Field(
        default_factory=dict, description="the conventions papers disagree on, and which one this method follows"
    )


class MethodList(BaseModel):
    data: list[MethodInfo]
    count: int
