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
    SCORE_MOD = "score_mod"  # content-dependent logit terms (declared; methods come later)
    ATTENTION = "attention"  # replaces softmax (declared; methods come later)


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
    params_schema: dict[str, Any] = Field(description="JSON schema of 'params', with the paper's defaults")
    conventions: dict[str, str] = Field(
        default_factory=dict, description="the conventions papers disagree on, and which one this method follows"
    )


class MethodList(BaseModel):
    data: list[MethodInfo]
    count: int
