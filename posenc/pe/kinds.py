"""The generic half of each kind: masking and Toeplitz tables for biases, cos/sin and the shared
rotation for rotary methods. Family modules only supply the method-specific formula."""

from __future__ import annotations

import torch

from posenc.errors import InvalidInput
from posenc.pe import compiled
from posenc.pe.ops import Pairing, pairing_layout, rotate_pairs, rotate_pairs_in_place
from posenc.pe.registry import MethodParams, MethodSpec
from posenc.pe.types import AbsoluteContext, BiasContext, RotaryContext, RotaryFrequencies, RotaryGenerators
from posenc.schemas.compute import MAX_ROTARY_POSITION
from posenc.schemas.methods import Kind


def require_kind(spec: MethodSpec, *kinds: Kind) -> None:
    """Refuse a method of another kind than ``kinds`` (a caller that serves some kinds only)."""
    if spec.kind not in kinds:
        wanted = " or ".join(kind.value for kind in kinds)
        raise InvalidInput(("method",), f"{spec.name!r} is a {spec.kind.value} method, not a {wanted} one")


def _expect_kind(spec: MethodSpec, kind: Kind) -> None:
    require_kind(spec, kind)


# --------------------------------------------------------------------------------------------- absolute
def encoding(spec: MethodSpec, params: MethodParams, ctx: AbsoluteContext) -> torch.Tensor:
    """P of shape (*grid, D) for an absolute method."""
    _expect_kind(spec, Kind.ABSOLUTE)
    out: torch.Tensor = spec.fn(params, ctx)
    expected = (*ctx.grid, ctx.dim)
    if tuple(out.shape) != expected:
        raise AssertionError(f"{spec.name} returned {tuple(out.shape)}, expected {expected}")
    return out


# ------------------------------------------------------------------------------------------------- bias
def causal_mask(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """True where key j is in the future of query i (j > i): (Nq, Nk) bool."""
    return k_pos[None, :] > q_pos[:, None]


def bias_dense(
    spec: MethodSpec,
    params: MethodParams,
    ctx: BiasContext,
    q_pos: torch.Tensor | None = None,
    k_pos: torch.Tensor | None = None,
) -> torch.Tensor:
    """B (H, Nq, Nk) in ctx.dtype; with ctx.causal, future keys are −inf.

    Positions default to i + ctx.query_offset for queries and j for keys (0-based).
    """
    _expect_kind(spec, Kind.BIAS)
    if spec.toeplitz and q_pos is None and k_pos is None:
        # one value per i − j: the (H, Nq + Nk − 1) table, expanded with a strided view and one copy (the
        # method's own dense formula would make several passes over the (H, Nq, Nk) output)
        return toeplitz_to_dense(bias_toeplitz(spec, params, ctx), ctx.query_length, ctx.key_length)
    if q_pos is None:
        q_pos = torch.arange(ctx.query_length, dtype=torch.int64, device=ctx.device) + ctx.query_offset
    if k_pos is None:
        k_pos = torch.arange(ctx.key_length, dtype=torch.int64, device=ctx.device)
    bias: torch.Tensor = spec.fn(params, q_pos, k_pos, ctx)
    expected = (ctx.num_heads, q_pos.shape[0], k_pos.shape[0])
    if tuple(bias.shape) != expected:
        raise AssertionError(f"{spec.name} returned {tuple(bias.shape)}, expected {expected}")
    if ctx.causal:
        # in place: the method returned a fresh tensor, and a second (H, Nq, Nk) copy is the dominant cost
        bias.masked_fill_(causal_mask(q_pos, k_pos), float("-inf"))
    return bias


def bias_toeplitz(spec: MethodSpec, params: MethodParams, ctx: BiasContext) -> torch.Tensor:
    """The (H, Nq + Nk − 1) table of a Toeplitz bias: B[h, i, j] = table[h, i − j + Nk − 1] (row i, column j).

    Column t holds the bias at the position difference (i + ctx.query_offset) − j = t − (Nk − 1) + offset;
    with ctx.causal the columns where that difference is negative are −inf.
    """
    _expect_kind(spec, Kind.BIAS)
    if not spec.toeplitz:
        raise InvalidInput(("form",), f"{spec.name!r} does not depend on i - j alone; ask for form='dense'")
    width = ctx.query_length + ctx.key_length - 1
    # Rows 0..width-1 (at their offset positions) against the single key at Nk-1 give every i - j once.
    q_pos = torch.arange(width, dtype=torch.int64, device=ctx.device) + ctx.query_offset  # (width,)
    k_pos = torch.tensor([ctx.key_length - 1], dtype=torch.int64, device=ctx.device)  # (1,)
    column: torch.Tensor = spec.fn(params, q_pos, k_pos, ctx)  # (H, width, 1)
    table = column.reshape(ctx.num_heads, width)  # (H, width)
    if ctx.causal:
        table = table.masked_fill(q_pos[None, :] < ctx.key_length - 1, float("-inf"))
    return table


def toeplitz_to_dense(table: torch.Tensor, query_length: int, key_length: int) -> torch.Tensor:
    """Expand (H, Nq + Nk − 1) to (H, Nq, Nk) with B[h, i, j] = table[h, i − j + Nk − 1], in one copy.

    With the table reversed, rev[h, m] = table[h, Nq + Nk − 2 − m], B[h, i, j] = rev[h, (Nq − 1 − i) + j]: row
    i is a contiguous window of rev. The windows are a strided view (no copy); flipping its rows writes B in one
    pass over the output, as fast as a clone of it.
    """
    width = query_length + key_length - 1
    if table.shape[-1] != width:
        raise ValueError(f"a Toeplitz table for {query_length} x {key_length} has {width} columns, got {table.shape}")
    reversed_table = table.flip(-1).contiguous()  # (H, Nq + Nk − 1)
    heads = reversed_table.shape[0]
    windows = reversed_table.as_strided((heads, query_length, key_length), (width, 1, 1))  # [h, r, j] = rev[h, r + j]
    return windows.flip(1)  # (H, Nq, Nk): row i is window Nq − 1 − i


# ----------------------------------------------------------------------------------------------- rotary
def rotary_frequencies(
    spec: MethodSpec, params: MethodParams, ctx: RotaryContext
) -> RotaryFrequencies | RotaryGenerators:
    _expect_kind(spec, Kind.ROTARY)
    if ctx.rotary_dim % 2:
        raise InvalidInput(("rotary_dim",), f"rotary dimension must be even, got {ctx.rotary_dim}")
    freqs: RotaryFrequencies | RotaryGenerators = spec.fn(params, ctx)
    if isinstance(freqs, RotaryGenerators):
        gens = freqs.generators
        heads_ok = gens.dim() == 5 and gens.shape[0] in (1, ctx.num_heads)
        if not heads_ok or gens.shape[2] * gens.shape[3] != ctx.rotary_dim:
            raise AssertionError(f"{spec.name} returned generators {tuple(gens.shape)}")
        return freqs
    if tuple(freqs.inv_freq.shape) != (ctx.rotary_dim // 2,):
        raise AssertionError(f"{spec.name} returned inv_freq {tuple(freqs.inv_freq.shape)}")
    return freqs


def block_rotations(gens: RotaryGenerators, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """R(p) = expm(Σ_a u_a·G_a) per token and block: positions (N, A) int64 -> (Hg, N, m, b, b) in ``dtype``
    (float32 at least: matrix_exp is not accurate in half precision), u_a = (p_a + offset_a)·scale_a."""
    pos = positions.reshape(positions.shape[0], -1)  # (N, A)
    if pos.shape[1] != gens.num_axes:
        raise InvalidInput(
            ("positions",), f"this method needs {gens.num_axes} coordinate(s) per position, got {pos.shape[1]}"
        )
    work = torch.float64 if dtype == torch.float64 else torch.float32
    coords = (pos.to(torch.float64) + gens.position_offset.to(pos.device)) * gens.position_scale.to(pos.device)
    generators = gens.generators.to(device=pos.device, dtype=work)  # (Hg, A, m, b, b)
    if gens.block_size == 2:
        # closed form: [[0, −f], [f, 0]] summed over axes is the rotation by Σ_a u_a·f_a
        # the angle in float64 as the cos/sin tables are, rounded once after cos and sin
        freq = gens.generators.to(device=pos.device, dtype=torch.float64)[:, :, :, 1, 0]  # (Hg, A, m)
        angle = torch.einsum("na,ham->hnm", coords, freq)  # (Hg, N, m)
        cos, sin = torch.cos(angle).to(work), torch.sin(angle).to(work)
        rows = (torch.stack((cos, -sin), -1), torch.stack((sin, cos), -1))  # each (Hg, N, m, 2)
        return torch.stack(rows, -2)  # (Hg, N, m, 2, 2)
    exponent = torch.einsum("na,hamij->hnmij", coords.to(work), generators).contiguous()  # (Hg, N, m, b, b)
    rotations: torch.Tensor = torch.linalg.matrix_exp(exponent)
    return rotations


def apply_block_rotation(x: torch.Tensor, rotations: torch.Tensor, *, transpose: bool = False) -> torch.Tensor:
    """x (B, H, N, D) with its first m·b features rotated block-wise by ``rotations`` (Hg, N, m, b, b):
    block j of token n becomes R[n, j] @ x_j (Rᵀ with ``transpose``); the rest passes through."""
    blocks, size = rotations.shape[2], rotations.shape[3]
    rot_dim = blocks * size
    if rot_dim > x.shape[-1]:
        raise InvalidInput(("rotary_dim",), f"rotary_dim {rot_dim} is larger than the head dim {x.shape[-1]}")
    part = x[..., :rot_dim].to(rotations.dtype).reshape(*x.shape[:-1], blocks, size)  # (B, H, N, m, b)
    pattern = "hnmji,bhnmj->bhnmi" if transpose else "hnmij,bhnmj->bhnmi"
    rotated = torch.einsum(pattern, rotations, part).reshape(*x.shape[:-1], rot_dim)  # (B, H, N, m·b)
    if rot_dim == x.shape[-1]:
        return rotated.to(x.dtype)
    return torch.cat((rotated.to(x.dtype), x[..., rot_dim:]), dim=-1)


def rotary_angles(freqs: RotaryFrequencies, positions: torch.Tensor) -> torch.Tensor:
    """angle[n, k] = positions[n, pair_axis[k]] · inv_freq[k]: (N,) or (N, A) int64 -> (N, d_rot/2) float64.

    Positions stay int64 until this multiply, which always runs in float64: in float32 a position above 2^24
    is rounded before it is multiplied (rope at n = 2^24 + 1 would return cos(2^24 · ω)). Positions beyond
    ``MAX_ROTARY_POSITION`` are refused, since past it even the float64 angle is not exact to float32 rounding.
    """
    if positions.dtype.is_floating_point:
        raise TypeError("positions must be an integer tensor")
    pos = positions.reshape(positions.shape[0], -1)  # (N, A)
    if pos.shape[1] != freqs.num_axes:
        raise InvalidInput(
            ("positions",),
            f"this method needs {freqs.num_axes} coordinate(s) per position, got {pos.shape[1]}: give positions "
            f"(N, {freqs.num_axes}) or a grid",
        )
    if pos.numel() and int(pos.abs().max()) > MAX_ROTARY_POSITION:
        raise InvalidInput(
            ("positions",),
            f"|position| must be at most 2^26 = {MAX_ROTARY_POSITION}, where rotary angles are still exact to "
            f"float32 rounding; got {int(pos.abs().max())}",
        )
    axis = (
        freqs.pair_axis
        if freqs.pair_axis is not None
        else torch.zeros(freqs.inv_freq.shape[0], dtype=torch.int64, device=pos.device)
    )
    per_pair = pos[:, axis.to(pos.device)].to(torch.float64)  # (N, d_rot/2): the coordinate each pair rotates by
    return per_pair * freqs.inv_freq.to(device=pos.device, dtype=torch.float64)[None, :]


def rotary_tables(
    freqs: RotaryFrequencies, positions: torch.Tensor, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (N, d_rot/2), both multiplied by the method's attention scale; for FoPE the first K
    pairs' cos and sin are the Fourier series of ``RotaryFrequencies.fourier_cos`` / ``fourier_sin``.

    Evaluated in float64 from the float64 angles and rounded once to ``dtype``: cos and sin of a large angle
    need its low bits, which a float32 angle has already lost.
    """
    angles = rotary_angles(freqs, positions)  # (N, d_rot/2) float64
    scale = freqs.attention_scale
    cos, sin = torch.cos(angles), torch.sin(angles)
    if freqs.fourier_cos is not None and freqs.fourier_sin is not None:  # FoPE: each pair a Fourier series
        kept = freqs.fourier_cos.shape[0]
        mix_cos = freqs.fourier_cos.to(device=cos.device, dtype=torch.float64)  # (K, K)
        mix_sin = freqs.fourier_sin.to(device=sin.device, dtype=torch.float64)  # (K, K)
        cos = torch.cat((cos[:, :kept] @ mix_cos, cos[:, kept:]), dim=-1)  # (N, d_rot/2)
        sin = torch.cat((sin[:, :kept] @ mix_sin, sin[:, kept:]), dim=-1)  # (N, d_rot/2)
    return (cos * scale).to(dtype), (sin * scale).to(dtype)


def xpos_scale(freqs: RotaryFrequencies, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """ζ_k^((n − c)/λ) per position and pair: (N, d_rot/2) in ``dtype``, or None for methods without xPos decay.

    c is the method's ``xpos_center`` (0 for the paper's raw positions); it is subtracted in int64. With the
    raw positions it cancels in q·k; with a centre and cached keys (queries and keys of different lengths)
    it does not, since c then depends on the current length. Computed as exp(((n − c)/λ)·ln ζ) in float64
    and rounded once to ``dtype``. A scale (or its reciprocal, used for keys) that over- or underflows
    ``dtype`` is refused rather than returned as inf or 0.
    """
    if freqs.xpos_zeta is None or freqs.xpos_scale_base is None:
        return None
    shifted = positions.reshape(positions.shape[0], -1)[:, 0] - freqs.xpos_center  # (N,) int64
    n = shifted.to(torch.float64)
    log_zeta = torch.log(freqs.xpos_zeta.to(device=n.device, dtype=torch.float64))  # (d_rot/2,)
    scale = torch.exp((n[:, None] / freqs.xpos_scale_base) * log_zeta[None, :]).to(dtype)  # (N, d_rot/2)
    if scale.numel() and not (bool(torch.isfinite(scale).all()) and bool(torch.isfinite(1.0 / scale).all())):
        farthest = int(shifted.abs().max())
        raise InvalidInput(
            ("params", "scale_center"),
            f"the xPos decay ζ^(±n/λ) over- or underflows {dtype} at |n| = {farthest}; "
            "use scale_center='midpoint' (the centring cancels in q·k), a larger scale_base, or float64",
        )
    return scale


def apply_rotary(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    pairing: Pairing,
    scale: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotate the first d_rot features of x (..., N, D) and pass the rest through (partial rotary).

    Works in the tables' dtype (float32 or float64) and casts back to x's dtype last. ``scale`` (N, d_rot/2)
    multiplies both members of each pair (xPos: ζ^(n/λ) for queries, its reciprocal for keys).

    ``out`` (x's shape and the tables' dtype, contiguous) receives the result instead of a new tensor; it may be
    ``x`` itself, rotated in place, for a caller that owns x and no longer needs it (a copy of half the rotated
    features is the only scratch). Outside autograd a large float32 x is rotated in one pass
    by a compiled kernel once it is ready (``posenc.pe.compiled``); otherwise the result is written straight
    into one output in three passes (``rotate_pairs``).
    """
    rot_dim = cos.shape[-1] * 2
    if rot_dim > x.shape[-1]:
        raise InvalidInput(("rotary_dim",), f"rotary_dim {rot_dim} is larger than the head dim {x.shape[-1]}")
    compute = cos.dtype
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad)
    if out is not None:
        if needs_grad:
            raise InvalidInput(("out",), "an out= rotation cannot be differentiated; call without out")
        if tuple(out.shape) != tuple(x.shape) or out.dtype != compute or not out.is_contiguous():
            raise InvalidInput(
                ("out",),
                f"out must be contiguous with x's shape {tuple(x.shape)} and the tables' dtype {compute}; "
                f"got {tuple(out.shape)} {out.dtype}",
            )
    if x.dtype == compute and not needs_grad:
        if out is None:
            fused = compiled.rotate(x, cos, sin, pairing, scale)  # one pass, once its kernel is compiled
            if fused is not None:
                return fused
            out = torch.empty(x.shape, dtype=compute, device=x.device)
        if out.data_ptr() == x.data_ptr():
            rotated = rotate_pairs_in_place(x[..., :rot_dim], cos, sin, pairing)
        else:
            rotated = rotate_pairs(x[..., :rot_dim], cos, sin, pairing, out=out[..., :rot_dim])
            if rot_dim < x.shape[-1]:
                out[..., rot_dim:].copy_(x[..., rot_dim:])
        if scale is not None:
            rotated.mul_(pairing_layout(scale, pairing))
        return out
    rotated_part, passthrough = x[..., :rot_dim].to(compute), x[..., rot_dim:]
    rotated = rotate_pairs(rotated_part, cos, sin, pairing)
    if scale is not None:
        rotated = rotated * pairing_layout(scale, pairing)
    result = rotated.to(x.dtype) if passthrough.shape[-1] == 0 else torch.cat((rotated.to(x.dtype), passthrough), -1)
    if out is None:
        return result
    return out.copy_(result)
