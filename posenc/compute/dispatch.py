"""One entry for every compute route: ``prepare(route, request)`` picks the route's ``prepare_*`` and names the
errors of the request, and of the math it runs, under ``body``."""

from __future__ import annotations

import dataclasses

from posenc.compute.attention import prepare_attention
from posenc.compute.bias import prepare_bias
from posenc.compute.common import Prepared, TensorResult
from posenc.compute.encodings import prepare_encoding
from posenc.compute.rotary import prepare_rotary
from posenc.errors import located
from posenc.schemas.compute import AttentionRequest, BiasRequest, EncodingRequest, RotaryRequest
from posenc.schemas.jobs import ComputeRequest, ComputeRoute


def prepare(route: ComputeRoute, request: ComputeRequest) -> Prepared:
    """The ``prepare_*`` of ``route``; ``request`` must be that route's request model. Errors of the request,
    and of the math it runs, name their field under ``body``."""
    with located(("body",)):
        prepared = _prepare(route, request)
    run = prepared.run

    def run_located() -> TensorResult:
        with located(("body",)):
            return run()

    return dataclasses.replace(prepared, run=run_located)


def _prepare(route: ComputeRoute, request: ComputeRequest) -> Prepared:
    if route == "bias" and isinstance(request, BiasRequest):
        return prepare_bias(request)
    if route == "rotary" and isinstance(request, RotaryRequest):
        return prepare_rotary(request)
    if route == "encodings" and isinstance(request, EncodingRequest):
        return prepare_encoding(request)
    if route == "attention" and isinstance(request, AttentionRequest):
        return prepare_attention(request)
    raise TypeError(f"route {route!r} does not take a {type(request).__name__}")
