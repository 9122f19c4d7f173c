"""Primitives shared by two or more families. Not a utility drawer: each is used unchanged by several."""

from __future__ import annotations

from typing import Literal

import torch

Pairing = Literal["half", "interleaved"]


def rope_inv_freq(base: float, dim: int, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ω_k = base^(−2k/dim), k ∈ [0, dim/2): shape (dim/2,).

    The exponent comes from an integer arange and is evaluated in float64, then rounded once to ``dtype``,
    so the float32 table is the correctly rounded float64 one whatever the default dtype.
    """
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim  # (dim/2,)
    return (1.0 / (float(base) ** exponents)).to(dtype)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a bias or table is built in before its one final cast to ``dtype`` (methods.md §6).

    float64 stays float64 (references, goldens); float32, bfloat16 and float16 are built in float32, so a
    low-precision result is the float32 one rounded once, never an accumulation of bf16 roundings.
    """
    return torch.float64 if dtype == torch.float64 else torch.float32


def relative_positions(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """i − j for every (query, key) pair: (Nq,), (Nk,) -> (Nq, Nk), int64 (ALiBi/KERPLE sign convention)."""
    return q_pos[:, None] - k_pos[None, :]


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    """Rotate every feature pair of ``x`` (..., N, d_rot) by the angles whose cos/sin are (N, d_rot/2).

    half:        pairs (k, k + d/2):  y[k] = x[k]cos − x[k+d/2]sin,  y[k+d/2] = x[k]sin + x[k+d/2]cos
    interleaved: pairs (2k, 2k + 1):  y[2k] = x[2k]cos − x[2k+1]sin, y[2k+1] = x[2k]sin + x[2k+1]cos
    """
    if pairing == "half":
        half = x.shape[-1] // 2
        first, second = x[..., :half], x[..., half:]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., N, d_rot/2) each
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., N, d_rot/2, 2)
    return rotated.flatten(-2)  # (..., N, d_rot): back to interleaved order


def half_to_interleaved_permutation(dim: int) -> torch.Tensor:
    """perm = [0, 2, 4, …, d−2, 1, 3, …, d−1]: half_split(x[perm]) == interleaved(x)[perm] (methods.md D1)."""
    return torch.cat((torch.arange(0, dim, 2), torch.arange(1, dim, 2)))
