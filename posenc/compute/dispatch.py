"""One entry for every compute route: ``prepare(route, request)`` picks the route's ``prepare_*`` and names the
errors of the request, and of the math it runs, under ``body``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from posenc.compute.attention import prepare_attention
from posenc.compute.bias import prepare_bias
from posenc.compute.common import Prepared, TensorResult
from posenc.compute.encodings import prepare_encoding
from posenc.compute.rotary import prepare_rotary
from posenc.errors import InvalidInput, located
from posenc.schemas.compute import AttentionRequest, BiasRequest, EncodingRequest, RotaryRequest
from posenc.schemas.jobs import ComputeRequest, ComputeRoute


def prepare(route: ComputeRoute, request: ComputeRequest) -> Prepared:
    """The ``prepare_*`` of ``route``; ``request`` must be that route's request model. Errors of the request,
    and of the math it runs, name their field under ``body``: a field the user sent (a rotary method's complaint
    about its rotated width names q's shape when the request gave no rotary_dim: it defaulted to q's head dim)."""
    with located(("body",)), _sent_fields(request):
        prepared = _prepare(route, request)
    run = prepared.run

    def run_located() -> TensorResult:
        with located(("body",)), _sent_fields(request):
            return run()

    return dataclasses.replace(prepared, run=run_located)


@contextmanager
def _sent_fields(request: ComputeRequest) -> Iterator[None]:
    """Errors at ("rotary_dim", …) of a request that did not send rotary_dim are about q's head dim, where the
    default came from: relocated to ("q", "shape"), the message saying so."""
    try:
        yield
    except InvalidInput as exc:
        if exc.loc[:1] != ("rotary_dim",) or getattr(request, "rotary_dim", None) is not None:
            raise
        head_dim = request.q.shape[-1] if isinstance(request, RotaryRequest | AttentionRequest) else None
        where = f"q's head dim D = {head_dim}" if head_dim is not None else "the head dim"
        raise InvalidInput(
            ("q", "shape"), f"{exc.msg} (the rotated width is {where}: no rotary_dim was given)"
        ) from None


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
