"""Primitives shared by two or more families. Not a utility drawer: each is used unchanged by several."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F

from posenc.errors import ContiguousPositionsRequired, InvalidInput
from posenc.tensors import to_torch

if TYPE_CHECKING:
    from posenc.pe.types import LayerInputs

Pairing = Literal["half", "interleaved"]


def rope_inv_freq(base: float, dim: int, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ω_k = base^(−2k/dim), k ∈ [0, dim/2): shape (dim/2,).

    The exponent comes from an integer arange and is evaluated in float64, then rounded once to ``dtype``,
    so the float32 table is the correctly rounded float64 one whatever the default dtype.
    """
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim  # (dim/2,)
    return (1.0 / (float(base) ** exponents)).to(dtype)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a bias or table is built in before its one final cast to ``dtype``.

    float64 stays float64 (references, goldens); float32, bfloat16 and float16 are built in float32, so a
    low-precision result is the float32 one rounded once, never an accumulation of bf16 roundings.
    """
    return torch.float64 if dtype == torch.float64 else torch.float32


def relative_positions(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """i − j for every (query, key) pair: (Nq,), (Nk,) -> (Nq, Nk), int64 (ALiBi/KERPLE sign convention)."""
    return q_pos[:, None] - k_pos[None, :]


def rotate_pairs(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: Pairing, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Rotate every feature pair of ``x`` (..., N, d_rot) by the angles whose cos/sin are (N, d_rot/2).

    half:        pairs (k, k + d/2):  y[k] = x[k]cos − x[k+d/2]sin,  y[k+d/2] = x[k]sin + x[k+d/2]cos
    interleaved: pairs (2k, 2k + 1):  y[2k] = x[2k]cos − x[2k+1]sin, y[2k+1] = x[2k]sin + x[2k+1]cos

    Written into ``out`` (default a new tensor; it may be a view, e.g. the rotated slice of a wider output).
    """
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        return _rotate_pairs_differentiable(x, cos, sin, pairing, out)
    if out is None:
        out = torch.empty(x.shape, dtype=torch.result_type(x, cos), device=x.device)
    first, second = pair_members(x, pairing)
    out_first, out_second = pair_members(out, pairing)
    # x·cos in one contiguous pass over the whole width (cos laid out as the pairing pairs the features), then
    # the sin terms: three passes instead of six temporaries and a concatenation
    torch.mul(x, pairing_layout(cos, pairing), out=out)
    if out.dtype == torch.float64:
        # float64 is the reference dtype: each product rounded, then the sum, exactly as the plain formula
        out_first.sub_(second * sin)
        out_second.add_(first * sin)
    else:  # a fused multiply-add: one rounding fewer than the plain formula, never one more
        out_first.addcmul_(second, sin, value=-1)
        out_second.addcmul_(first, sin)
    return out


def rotate_pairs_in_place(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    """``rotate_pairs`` written over x itself (already in the tables' dtype), with a copy of the first member of
    each pair as the only scratch: the same operations on the same values, so the same bits."""
    first, second = pair_members(x, pairing)
    saved_first = first.clone()
    exact = x.dtype == torch.float64  # as rotate_pairs: float64 rounds each product, then the sum
    first.mul_(cos)  # the first members, while the second ones are still the originals
    if exact:
        first.sub_(second * sin)
    else:
        first.addcmul_(second, sin, value=-1)
    second.mul_(cos)  # then the second members, from the saved first ones
    if exact:
        second.add_(saved_first * sin)
    else:
        second.addcmul_(saved_first, sin)
    return x


def pair_members(t: torch.Tensor, pairing: Pairing) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the first and the second member of every pair of t (..., d_rot): (..., d_rot/2) each."""
    if pairing == "half":
        half = t.shape[-1] // 2
        return t[..., :half], t[..., half:]
    return t[..., 0::2], t[..., 1::2]


def pairing_layout(table: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    """A per-pair table (N, d_rot/2) laid out per feature (N, d_rot) as the pairing pairs them: both members of
    pair k get entry k (half: [t, t]; interleaved: t repeated in place)."""
    return torch.cat((table, table), -1) if pairing == "half" else table.repeat_interleave(2, -1)


def _rotate_pairs_differentiable(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: Pairing, out: torch.Tensor | None
) -> torch.Tensor:
    """The same rotation out of differentiable ops (autograd refuses out= arguments), for training."""
    if pairing == "half":
        half = x.shape[-1] // 2
        first, second = x[..., :half], x[..., half:]
        rotated = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    else:
        even, odd = x[..., 0::2], x[..., 1::2]  # (..., N, d_rot/2) each
        pairs = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., N, d_rot/2, 2)
        rotated = pairs.flatten(-2)  # (..., N, d_rot): back to interleaved order
    if out is None:
        return rotated
    out.copy_(rotated)
    return out


def half_to_interleaved_permutation(dim: int) -> torch.Tensor:
    """perm = [0, 2, 4, …, d−2, 1, 3, …, d−1]: half_split(x[perm]) == interleaved(x)[perm]."""
    return torch.cat((torch.arange(0, dim, 2), torch.arange(1, dim, 2)))


def sinusoid_halves(distances: torch.Tensor, inv_freq: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """R_s = [sin(s·ω_0), …, sin(s·ω_{K−1}), cos(s·ω_0), …, cos(s·ω_{K−1})], K = dim // 2: (S,), (K,) -> (S, dim).

    Concatenated halves, not interleaved; an odd ``dim`` gets a zero last column. ``distances`` int64 (signed
    or not), ``inv_freq`` float64; s·ω, sin and cos in float64, rounded once to ``dtype``.
    """
    angles = distances.to(torch.float64)[:, None] * inv_freq.to(distances.device)[None, :]  # (S, K): s·ω to 2^-53
    table = torch.cat((angles.sin(), angles.cos()), dim=-1).to(dtype)  # (S, 2K), rounded once
    return F.pad(table, (0, dim % 2))  # (S, dim)


def learned_tensors(
    params: Any,
    expected: Mapping[str, tuple[int, ...]],
    seeded: Callable[[], Mapping[str, torch.Tensor]],
    *,
    device: torch.device,
    dtype: torch.dtype,
    labels: Mapping[str, str] | None = None,
) -> dict[str, torch.Tensor]:
    """The learned tensors named in ``expected``, in its order, in ``dtype`` on ``device``: each the params
    field of that name when supplied, else the one ``seeded()`` returns (the method's init).

    A supplied tensor must have its expected shape, else InvalidInput at ("params", name, "shape"), the message
    naming the shape by ``labels[name]`` where given ("[2·clip + 1, head_dim]"). ``seeded`` is called once,
    only when some tensor is missing, and draws the full set in a fixed order, so a seeded tensor does not
    depend on which of the others were supplied.
    """
    supplied: dict[str, torch.Tensor] = {}
    for name, shape in expected.items():
        value: Any = getattr(params, name)
        if value is None:
            continue
        tensor = to_torch(value, ("params", name))
        if tuple(tensor.shape) != shape:
            label = labels.get(name) if labels is not None else None
            named = f"{label} = {list(shape)}" if label is not None else f"{list(shape)}"
            raise InvalidInput(("params", name, "shape"), f"expected {named}, got {list(tensor.shape)}")
        supplied[name] = tensor
    initial: Mapping[str, torch.Tensor] = seeded() if len(supplied) < len(expected) else {}
    return {
        name: (supplied[name] if name in supplied else initial[name]).to(device=device, dtype=dtype)
        for name in expected
    }


def rel_shift(table: torch.Tensor) -> torch.Tensor:
    """Transformer-XL's shift on the last two axes: (..., N, W) -> (..., N, W), out[.., i, j] = table[.., i, N−1+j−i].

    Pad one zero column on the left, view as (W+1, N), drop the first row, view back as (N, W). Exact where
    N−1+j−i <= W−1 (every entry for W = Nq + Nk − 1); the other entries (the upper triangle when W = N) hold
    values of the next row or the pad.
    """
    *lead, rows, width = table.shape
    padded = F.pad(table, (1, 0))  # (..., N, W+1)
    padded = padded.reshape(*lead, width + 1, rows)  # (..., W+1, N): the same memory, rows re-cut
    return padded[..., 1:, :].reshape(*lead, rows, width)  # (..., N, W)


def check_shift_positions(inputs: LayerInputs, query_offset: int) -> None:
    """What ``rel_shift`` assumes of the positions: q_pos = arange(Nq) + query_offset and k_pos = arange(Nk),
    else InvalidInput at ("q_pos",) or ("k_pos",). Nq, Nk from q (B, H, Nq, D) and k (B, H, Nk, D)."""
    q_len, k_len = inputs.q.shape[2], inputs.k.shape[2]
    want_q = torch.arange(q_len, dtype=torch.int64, device=inputs.q_pos.device) + query_offset
    if inputs.q_pos.shape != (q_len,) or not torch.equal(inputs.q_pos, want_q):
        raise ContiguousPositionsRequired(
            ("q_pos",), f"the relative shift needs q_pos = arange({q_len}) + {query_offset}"
        )
    if inputs.k_pos.shape != (k_len,) or not torch.equal(
        inputs.k_pos, torch.arange(k_len, dtype=torch.int64, device=inputs.k_pos.device)
    ):
        raise ContiguousPositionsRequired(("k_pos",), f"the relative shift needs k_pos = arange({k_len})")
