"""``POST /v1/encodings``: an absolute method's encoding (N, D) or (*grid, D)."""

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
)
from posenc.pe import (
    AbsoluteContext,
    encoding,
)
from posenc.pe.appliers import Layer, build_applier, grid_positions
from posenc.pe.types import Extent
from posenc.schemas.compute import (
    EncodingRequest,
)
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import ITEMSIZE, tensor_fields
from posenc.tensors import dtype_name, torch_dtype


# ----------------------------------------------------------------------------------------------- encodings
def prepare_encoding(request: EncodingRequest) -> Prepared:
    spec = resolve_method(request.method, Kind.ABSOLUTE)
    params = parse_params(spec, request.params)
    graph = graph_from_request(request.graph)
    if graph is not None:
        grid: tuple[int, ...] = (graph.num_nodes,)
    else:
        grid = (request.length,) if request.length is not None else tuple(request.grid or ())
    shape = (*grid, request.dim)
    compute_dtype = torch.float64 if request.dtype == "float64" else torch.float32
    layer = Layer(num_heads=1, head_dim=request.dim, causal=False, dtype=compute_dtype, graph=graph)
    applier = build_applier(spec, params, layer)
    applier.check(has_x=False, has_v=False)
    prefix = request.prefix_tokens
    outputs = [OutputSpec("encoding", shape, request.dtype)]
    if prefix:
        outputs.append(OutputSpec("prefix", (prefix, request.dim), request.dtype))

    def run() -> TensorResult:
        ctx = AbsoluteContext(grid=grid, dim=request.dim, dtype=compute_dtype, graph=graph)
        tensors = {"encoding": encoding(spec, params, ctx).to(torch_dtype(request.dtype))}
        if prefix:
            # the prefix tokens' rows: what embedding zeros at their positions −1 … −P adds
            prefix_pos = grid_positions(grid, prefix)[:prefix]  # (P, A)
            zeros = torch.zeros(prefix, request.dim, dtype=compute_dtype)  # (P, D)
            tensors["prefix"] = applier.embed(zeros, prefix_pos).to(torch_dtype(request.dtype))
        meta = method_meta(spec, params, request.dtype) | {"grid": list(grid), "dim": request.dim}
        return TensorResult(tensors, meta)

    return Prepared(
        route="encodings",
        outputs=outputs,
        workspace_bytes=math.prod(shape) * ITEMSIZE[dtype_name(compute_dtype)],
        input_elements=elements(tensor_fields(params)),
        shrink_hint="make the request smaller",
        run=run,
        fields=(("length",) if request.length is not None else ("grid",) if request.grid else ("graph",), ("dim",)),
        extra_work=graph_work(request.graph, spec),
        method=method_cost(spec, params, Extent(math.prod(grid), math.prod(grid), 1, request.dim)),
    )
