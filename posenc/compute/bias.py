"""``POST /v1/bias``: a bias method's (H, Nq, Nk) matrix or its Toeplitz table, 1D or over a grid or a graph."""

from __future__ import annotations

import math

import torch

from posenc.compute.common import (
    OutputSpec,
    Prepared,
    TensorResult,
    method_cost,
    method_meta,
    parse_params,
    resolve_method,
)
from posenc.compute.inputs import (
    elements,
    graph_from_request,
    graph_work,
    token_layout,
)
from posenc.errors import InvalidInput
from posenc.pe import (
    BiasContext,
    MethodParams,
    MethodSpec,
    bias_dense,
    bias_toeplitz,
)
from posenc.pe.appliers import Layer, bias_applier
from posenc.pe.types import Extent
from posenc.schemas.compute import (
    BiasRequest,
)
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import ITEMSIZE, tensor_fields
from posenc.tensors import dtype_name, torch_dtype


# ---------------------------------------------------------------------------------------------------- bias
def prepare_bias(request: BiasRequest) -> Prepared:
    spec = resolve_method(request.method, Kind.BIAS)
    params = parse_params(spec, request.params)
    if request.query_length is None:
        return _prepare_bias_layout(request, spec, params)
    heads, q_len, k_len = request.num_heads, request.query_length, request.resolved_key_length
    query_offset = request.resolved_query_offset
    causal = request.resolved_causal
    toeplitz = request.form == "toeplitz"
    if toeplitz and not spec.toeplitz:
        raise InvalidInput(
            ("form",),
            f"{spec.name!r} does not depend on i - j alone, so it has no Toeplitz form; use 'dense'",
        )
    shape = (heads, q_len + k_len - 1) if toeplitz else (heads, q_len, k_len)
    compute_dtype = torch.float64 if request.dtype == "float64" else torch.float32
    table_bytes = heads * (q_len + k_len - 1) * ITEMSIZE[request.dtype]
    shrink_hint = (
        f"ask for form='toeplitz' (its (H, Nq + Nk - 1) table is {table_bytes} bytes), make the request smaller"
        if spec.toeplitz and not toeplitz
        else "make the request smaller"
    )

    def run() -> TensorResult:
        ctx = BiasContext(
            num_heads=heads,
            query_length=q_len,
            key_length=k_len,
            causal=causal,
            dtype=compute_dtype,
            query_offset=query_offset,
        )
        bias = bias_toeplitz(spec, params, ctx) if toeplitz else bias_dense(spec, params, ctx)
        meta = method_meta(spec, params, request.dtype) | {
            "form": request.form,
            "causal": causal,
            "num_heads": heads,
            "query_length": q_len,
            "key_length": k_len,
            "query_offset": query_offset,
        }
        if toeplitz:
            meta["index"] = "B[h, i, j] = bias[h, i - j + key_length - 1]"
        return TensorResult({"bias": bias.to(torch_dtype(request.dtype))}, meta)

    return Prepared(
        route="bias",
        outputs=[OutputSpec("bias", shape, request.dtype)],
        workspace_bytes=math.prod(shape) * ITEMSIZE[dtype_name(compute_dtype)],
        input_elements=elements(tensor_fields(params)),
        shrink_hint=shrink_hint,
        run=run,
        fields=(("num_heads",), ("query_length",), ("key_length",)),
        # the Toeplitz table is the method on Nq + Nk − 1 queries against one key
        method=method_cost(
            spec, params, Extent(q_len + k_len - 1, 1, heads, 1) if toeplitz else Extent(q_len, k_len, heads, 1)
        ),
    )


def _prepare_bias_layout(request: BiasRequest, spec: MethodSpec, params: MethodParams) -> Prepared:
    """``POST /v1/bias`` over a grid or a graph: self-attention of its tokens (prefix tokens first)."""
    if request.form == "toeplitz":
        raise InvalidInput(("form",), "a grid's or a graph's bias has no Toeplitz form in the token index; use 'dense'")
    heads, tokens, causal = request.num_heads, request.resolved_query_length, request.resolved_causal
    compute_dtype = torch.float64 if request.dtype == "float64" else torch.float32
    graph = graph_from_request(request.graph)
    layer = Layer(num_heads=heads, head_dim=1, causal=causal, dtype=compute_dtype, graph=graph)
    applier = bias_applier(spec, params, layer)
    applier.check(has_x=False, has_v=False)
    layout = token_layout(applier, tokens, grid=request.grid, prefix_tokens=request.prefix_tokens, graph=request.graph)
    shape = (heads, tokens, tokens)

    def run() -> TensorResult:
        assert layout.build is not None
        pos = layout.build()
        bias = applier.bias(pos, pos)  # (H, N, N)
        if causal:
            order = torch.arange(tokens)
            bias = bias.masked_fill(order[None, :] > order[:, None], float("-inf"))  # token order
        meta = method_meta(spec, params, request.dtype) | {
            "form": "dense",
            "causal": causal,
            "num_heads": heads,
            "query_length": tokens,
            "key_length": tokens,
            "tokens": layout.description,
        }
        return TensorResult({"bias": bias.to(torch_dtype(request.dtype))}, meta)

    return Prepared(
        route="bias",
        outputs=[OutputSpec("bias", shape, request.dtype)],
        # the method's (H, N, N) and the placed copy with the prefix entries
        workspace_bytes=2 * math.prod(shape) * ITEMSIZE[dtype_name(compute_dtype)],
        input_elements=elements(tensor_fields(params)),
        shrink_hint="make the grid or the graph smaller",
        run=run,
        fields=(("num_heads",), ("grid",) if request.grid is not None else ("graph",)),
        extra_work=graph_work(request.graph, spec),
        method=method_cost(spec, params, Extent(tokens, tokens, heads, 1)),
    )
