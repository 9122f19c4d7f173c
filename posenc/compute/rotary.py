"""``POST /v1/rotary``: q and k rotated by a rotary method, or by the rotation of a model config's layer."""

from __future__ import annotations

import math

import torch

from posenc.attention import compute_dtype_for
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
    declared,
    decode,
    float_input,
    input_elements,
    token_layout,
)
from posenc.errors import InvalidInput, located
from posenc.pe import (
    MethodParams,
    MethodSpec,
)
from posenc.pe.appliers import Layer, rotary_applier
from posenc.pe.types import Extent
from posenc.real_models.diagnostics import RotarySetup, rotation
from posenc.schemas.compute import (
    MAX_ROTARY_POSITION,
    RotaryRequest,
)
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import ITEMSIZE
from posenc.tensors import dtype_name, torch_dtype


# -------------------------------------------------------------------------------------------------- rotary
def _rotary_setup(request: RotaryRequest, head_dim: int) -> tuple[RotarySetup, MethodSpec, MethodParams]:
    """The request's rotation (``posenc.real_models.diagnostics.rotation``: a method, or a config's layer), its
    method and its params parsed (a config's errors at the config key the param came from)."""
    rotary_dim = _rotary_dim(request.rotary_dim, head_dim) if request.config is None else 0
    setup = rotation(request.method, request.params, rotary_dim, request.pairing, request.config, request.layer)
    if setup.layer is not None and head_dim != setup.layer.head_dim:
        raise InvalidInput(
            ("q", "shape"),
            f"D = {head_dim}, but the config's heads have head_dim = {setup.layer.head_dim} "
            f"(layer {setup.layer.layer})",
        )
    spec = resolve_method(setup.method, Kind.ROTARY)
    if setup.layer is None:
        return setup, spec, parse_params(spec, dict(setup.params))
    with located(("config",)):
        return setup, spec, parse_params(spec, dict(setup.params))


def prepare_rotary(request: RotaryRequest) -> Prepared:
    q_dtype, q_shape = float_input(request.q, ("q",), 4, "(B, H, N, D)")
    seq_len, head_dim = q_shape[2], q_shape[3]
    setup, spec, params = _rotary_setup(request, head_dim)
    params_loc = ("params",) if setup.layer is None else ("config",)
    rotary_dim, start = setup.rotary_dim, setup.start
    out_dtype = request.dtype or q_dtype
    compute_dtype = compute_dtype_for(torch_dtype(q_dtype))
    layer = Layer(
        num_heads=q_shape[1],
        head_dim=head_dim - start,  # a slice that starts later (MLA) is rotated as a head of its own
        causal=False,
        pairing=setup.pairing,
        rotary_dim=rotary_dim,
        dtype=compute_dtype,
    )
    applier = rotary_applier(spec, params, layer)
    layout = token_layout(
        applier,
        seq_len,
        grid=request.grid,
        prefix_tokens=request.prefix_tokens,
        positions=request.positions,
        tokens_loc=("q", "shape"),
    )

    rotate_k = request.rotate == "both"
    k_shape: list[int] | None = None
    k_dtype = out_dtype
    if request.k is None:
        if rotate_k:
            raise InvalidInput(("k",), "k is required unless rotate='query'")
    elif rotate_k:
        k_dtype, k_shape = float_input(request.k, ("k",), 4, "(B, H, N, D)")
        if (k_shape[2], k_shape[3]) != (seq_len, head_dim):
            raise InvalidInput(
                ("k", "shape"),
                f"k {k_shape} must have the N and D of q {q_shape}: both are rotated by the same positions",
            )
        k_dtype = out_dtype
    else:
        k_dtype, k_shape = declared(request.k)  # passed through unchanged

    if layout.build is None and request.offset + seq_len - 1 > MAX_ROTARY_POSITION:
        raise InvalidInput(
            ("offset",),
            f"offset + N - 1 = {request.offset + seq_len - 1} is over 2^26 = {MAX_ROTARY_POSITION}, the largest "
            "position whose rotary angles are exact to float32 rounding",
        )

    table_dtype = dtype_name(compute_dtype)
    outputs = [OutputSpec("q", tuple(q_shape), out_dtype)]
    if k_shape is not None:
        outputs.append(OutputSpec("k", tuple(k_shape), k_dtype))
    if request.return_tables:
        outputs += [OutputSpec(name, (seq_len, rotary_dim // 2), table_dtype) for name in ("cos", "sin")]
    rotated_elements = math.prod(q_shape) + (math.prod(k_shape) if k_shape is not None and rotate_k else 0)
    rotated_elements += applier.rotation_elements(seq_len)  # block rotations' matrices, if any

    def run() -> TensorResult:
        q = decode(request.q, "q")
        if layout.build is None:
            positions = torch.arange(seq_len, dtype=torch.int64) + request.offset
        else:
            positions = layout.build()
        context = max(int(positions.max()) if positions.numel() else 0, 0) + 1  # what dynamic scalings see

        def rotate(t: torch.Tensor, keys: bool) -> torch.Tensor:
            # Rotated in the compute dtype and cast once at the end, so a bfloat16 output is rounded only once;
            # xPos scales queries by ζ^(n/λ) and keys by its inverse. Features before the slice pass through.
            rotated = applier.rotate_side(t[..., start:], positions, context, keys=keys)
            if start:
                rotated = torch.cat((t[..., :start].to(rotated.dtype), rotated), dim=-1)  # (B, H, N, D)
            return rotated.to(torch_dtype(out_dtype))

        tensors = {"q": rotate(q, keys=False)}
        if request.k is not None:
            k = decode(request.k, "k")
            tensors["k"] = rotate(k, keys=True) if rotate_k else k
        if request.return_tables:
            cos, sin, _, _ = applier.tables(positions, context)  # (N, rotary_dim/2) each, from float64 angles
            tensors |= {"cos": cos, "sin": sin}
        meta = method_meta(spec, params, out_dtype) | {
            "pairing": setup.pairing,
            "rotate": request.rotate,
            "rotary_dim": rotary_dim,
            "rotary_slice": [start, start + rotary_dim],
            "positions": layout.description if layout.build is not None else f"arange(N) + {request.offset}",
            "attention_scale": applier.attention_scale(context),
            "tables_dtype": table_dtype,
        }
        if setup.layer is not None:
            meta["config_layer"] = setup.layer.to_json()
        return TensorResult(tensors, meta)

    return Prepared(
        route="rotary",
        outputs=outputs,
        # rotated copies in the table dtype, plus the float64 angles, cos and sin the tables are rounded from
        workspace_bytes=rotated_elements * ITEMSIZE[table_dtype] + 3 * seq_len * (rotary_dim // 2) * 8,
        input_elements=input_elements(request, params, ("q", "k", "positions")),
        shrink_hint="make the request smaller",
        run=run,
        fields=(("q", "shape"), ("k", "shape")),
        method=method_cost(spec, params, Extent(seq_len, seq_len, q_shape[1], rotary_dim, q_shape[0]), params_loc),
    )


def _rotary_dim(requested: int | None, head_dim: int) -> int:
    if requested is None:
        if head_dim % 2:
            raise InvalidInput(
                ("q", "shape"),
                f"rotary methods rotate pairs of features, so the head dim D must be even; got D={head_dim} "
                "(or set an even rotary_dim < D to rotate only the first features)",
            )
        return head_dim
    if requested % 2:
        raise InvalidInput(("rotary_dim",), f"must be even (features are rotated in pairs), got {requested}")
    if requested > head_dim:
        raise InvalidInput(("rotary_dim",), f"{requested} is larger than the head dim D={head_dim}")
    return requested
