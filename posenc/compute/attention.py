"""``POST /v1/attention``: attention weights (and output, statistics) with any method applied."""

from __future__ import annotations

import math

from posenc.attention import attention_maps, attention_statistics, compute_dtype_for
from posenc.compute.common import (
    OutputSpec,
    Prepared,
    TensorResult,
    method_cost,
    method_meta,
    parse_params,
)
from posenc.compute.inputs import (
    declared,
    decode,
    decode_mask,
    float_input,
    graph_from_request,
    graph_work,
    input_elements,
    mask_shape,
    token_layout,
)
from posenc.errors import InvalidInput
from posenc.pe import (
    get_method,
)
from posenc.pe.appliers import Layer, build_applier
from posenc.pe.types import Extent
from posenc.schemas.compute import (
    AttentionRequest,
    default_query_offset,
)
from posenc.schemas.tensors import ITEMSIZE
from posenc.tensors import dtype_name, torch_dtype

# ----------------------------------------------------------------------------------------------- attention
# Work units per attention score (posenc.compute.cost), beyond the bytes it touches (bench/request_costs.py).
WORK_PER_SCORE = 100


def prepare_attention(request: AttentionRequest) -> Prepared:
    spec = get_method(request.method)
    params = parse_params(spec, request.params)
    q_dtype, q_shape = float_input(request.q, ("q",), 4, "(B, H, Nq, D)")
    _, k_shape = float_input(request.k, ("k",), 4, "(B, H, Nk, D)")
    batch, heads, q_len, head_dim = q_shape
    k_len = k_shape[2]
    if (k_shape[0], k_shape[1], k_shape[3]) != (batch, heads, head_dim):
        raise InvalidInput(("k", "shape"), f"k {k_shape} must share B, H and D with q {q_shape}")
    v_dim = 0
    if request.v is not None:
        _, v_shape = float_input(request.v, ("v",), 4, "(B, H, Nk, Dv)")
        if v_shape[:3] != [batch, heads, k_len]:
            raise InvalidInput(("v", "shape"), f"v {v_shape} must be (B, H, Nk, Dv) with B, H, Nk = {k_shape[:3]}")
        v_dim = v_shape[3]
    model_dim = None
    if request.x is not None:
        _, x_shape = float_input(request.x, ("x",), 3, "(B, Nk, D_model)")
        if x_shape[:2] != [batch, k_len]:
            raise InvalidInput(("x", "shape"), f"x {x_shape} must be (B, Nk, D_model) with B, Nk = {[batch, k_len]}")
        model_dim = x_shape[2]
    if request.key_padding_mask is not None and mask_shape(request.key_padding_mask) != [batch, k_len]:
        raise InvalidInput(
            ("key_padding_mask",),
            f"must be (B, Nk) = {[batch, k_len]}, got {mask_shape(request.key_padding_mask)}",
        )
    out_dtype = request.dtype or q_dtype
    compute_dtype = compute_dtype_for(torch_dtype(q_dtype))
    stats_dtype = dtype_name(compute_dtype)
    causal = request.resolved_causal
    graph = graph_from_request(request.graph)
    layer = Layer(
        num_heads=heads,
        head_dim=head_dim,
        causal=causal,
        model_dim=model_dim,
        pairing=request.pairing,
        dtype=compute_dtype,
        graph=graph,
    )
    applier = build_applier(spec, params, layer)
    applier.check(has_x=request.x is not None, has_v=request.v is not None)  # before anything is allocated
    query_offset = default_query_offset(request.query_offset, q_len, k_len)
    layout = token_layout(
        applier,
        k_len,
        grid=request.grid,
        prefix_tokens=request.prefix_tokens,
        positions=request.positions,
        graph=request.graph,
    )
    if layout.build is not None and query_offset + q_len > k_len:
        raise InvalidInput(
            ("query_offset",),
            f"with a grid, positions or a graph the queries are keys {query_offset} … {query_offset + q_len - 1}: "
            f"query_offset + Nq must be at most Nk = {k_len}",
        )
    width = max(q_len + query_offset, k_len)  # distances |i + offset − j| run from 0 to width − 1
    state_fields = applier.state_fields
    if request.state is not None:
        if sorted(request.state) != sorted(state_fields):
            wanted = f"the tensors {list(state_fields)}" if state_fields else "no state"
            raise InvalidInput(("state",), f"{spec.name!r} takes {wanted}, got {sorted(request.state)}")
        for name, value in request.state.items():
            float_input(value, ("state", name), 4, "(B, H, Nk, D)")
            if declared(value)[1] != [batch, heads, k_len, head_dim]:
                raise InvalidInput(
                    ("state", name, "shape"),
                    f"must be (B, H, Nk, D) = {[batch, heads, k_len, head_dim]}, got {declared(value)[1]}",
                )

    outputs = [OutputSpec("weights", (batch, heads, q_len, k_len), out_dtype)]
    outputs += [OutputSpec(f"state.{name}", (batch, heads, q_len, head_dim), stats_dtype) for name in state_fields]
    if request.v is not None:
        outputs.append(OutputSpec("output", (batch, heads, q_len, v_dim), out_dtype))
        if applier.keeps_leftover:
            outputs.append(OutputSpec("leftover", (batch, heads, q_len), stats_dtype))
    if request.stats:
        outputs += [
            OutputSpec("entropy", (heads,), stats_dtype),
            OutputSpec("mean_distance", (heads,), stats_dtype),
            OutputSpec("mass_by_distance", (heads, width), stats_dtype),
        ]
    itemsize = ITEMSIZE[stats_dtype]
    workspace_elements = 2 * batch * heads * q_len * k_len  # scores and weights in the compute dtype
    workspace_elements += batch * heads * (q_len + k_len) * head_dim  # q and k in the compute dtype
    workspace_elements += batch * heads * (k_len + q_len) * v_dim  # v and the output in the compute dtype
    workspace_elements += applier.extra_workspace_elements(batch, q_len, k_len)
    workspace_elements += 2 * len(state_fields) * batch * heads * k_len * head_dim  # the states in and out
    if request.stats:
        workspace_elements += batch * heads * q_len * width  # per-row mass by distance

    def run() -> TensorResult:
        q = decode(request.q, "q")
        k = decode(request.k, "k")
        v = None if request.v is None else decode(request.v, "v")
        x = None if request.x is None else decode(request.x, "x")
        mask = None if request.key_padding_mask is None else decode_mask(request.key_padding_mask)
        state = (
            None
            if request.state is None
            else {name: decode(value, f"state.{name}") for name, value in request.state.items()}
        )
        positions = None if layout.build is None else layout.build()
        maps = attention_maps(
            q,
            k,
            v=v,
            x=x,
            spec=spec,
            params=params,
            causal=causal,
            key_padding_mask=mask,
            scale=request.scale,
            pairing=request.pairing,
            query_offset=query_offset,
            state=state,
            positions=positions,
            graph=graph,
        )
        tensors = {"weights": maps.weights.to(torch_dtype(out_dtype))}
        for name, tensor in (maps.state or {}).items():
            tensors[f"state.{name}"] = tensor
        if maps.output is not None:
            tensors["output"] = maps.output.to(torch_dtype(out_dtype))
            if applier.keeps_leftover:
                assert maps.leftover is not None
                tensors["leftover"] = maps.leftover
        if request.stats:
            on_grid = positions if request.grid is not None else None
            stats = attention_statistics(
                maps.weights, maps.fully_masked, query_offset=query_offset, grid_coordinates=on_grid
            )
            tensors |= {
                "entropy": stats.entropy,
                "mean_distance": stats.mean_distance,
                "mass_by_distance": stats.mass_by_distance,
            }
        meta = method_meta(spec, params, out_dtype) | {
            "causal": causal,
            "query_offset": query_offset,
            "tokens": layout.description,
            "scale": request.scale if request.scale is not None else 1.0 / math.sqrt(head_dim),
            "pairing": applier.pairing,
            "fully_masked_rows": int(maps.fully_masked.sum()),
            "stats_dtype": stats_dtype,
            "stats": "per head, averaged over batch and over queries that attend to at least one key; "
            "entropy in nats; "
            + (
                "distance: the grid distance Σ_a |p_a - p'_a| between query and key cells (0 to and from prefix tokens)"
                if request.grid is not None
                else "distance |(i + query_offset) - j| between query and key indices (token order)"
            ),
        }
        return TensorResult(tensors, meta)

    return Prepared(
        route="attention",
        outputs=outputs,
        workspace_bytes=workspace_elements * itemsize,
        input_elements=input_elements(request, params, ("q", "k", "v", "x", "key_padding_mask", "positions")),
        shrink_hint="make the request smaller (fewer heads, shorter sequences)",
        run=run,
        fields=(("q", "shape"), ("k", "shape"), *((("x", "shape"),) if request.x is not None else ())),
        matmul_macs=batch * heads * q_len * k_len * (head_dim + v_dim),
        # per score: the method's terms, the mask, the softmax in the compute dtype and the statistics
        extra_work=WORK_PER_SCORE * batch * heads * q_len * k_len + graph_work(request.graph, spec),
        method=method_cost(spec, params, Extent(q_len, k_len, heads, head_dim, batch, model_dim or 0)),
    )
