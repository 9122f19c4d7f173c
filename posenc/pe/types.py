"""The one signature of each kind of method, and the legend for shapes.

Shape legend (used in every docstring and shape comment):
    B batch, H heads, N / Nq / Nk sequence lengths (queries, keys), D model or head width,
    d_rot rotated width (even), G grid dims (e.g. (Hh, Ww) or (T, Hh, Ww)).

Signatures (``P`` is the method's params model):
    absolute:  fn(params: P, ctx: AbsoluteContext) -> Tensor (*grid, D)           (1D: grid = (N,))
    bias:      fn(params: P, q_pos: Tensor (Nq,) int64, k_pos: Tensor (Nk,) int64, ctx: BiasContext)
                   -> Tensor (H, Nq, Nk), UNMASKED (the causal mask is applied by posenc.pe.bias_dense)
               A Toeplitz method's value must depend on q_pos[:, None] - k_pos[None, :] only.
    rotary:    fn(params: P, ctx: RotaryContext) -> RotaryFrequencies
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class AbsoluteContext:
    grid: tuple[int, ...]  # (N,) for 1D methods, (Hh, Ww) for 2D, (T, Hh, Ww) for 3D
    dim: int
    dtype: torch.dtype = torch.float32  # table dtype: float32, or float64 for references
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))


@dataclass(frozen=True)
class BiasContext:
    num_heads: int
    query_length: int
    key_length: int
    causal: bool
    dtype: torch.dtype = torch.float32
    # Query i sits at position i + query_offset, key j at j (bottom-right alignment is Nk − Nq).
    query_offset: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))


@dataclass(frozen=True)
class RotaryContext:
    rotary_dim: int  # even; frequencies are computed with d = rotary_dim
    seq_len: int  # current length (max position + 1); dynamic methods depend on it
    # Frequencies stay float64 by default: the angle n·ω is formed in float64 (``rotary_angles``), and a
    # float32-rounded ω would already be off by n·2^-24 rad at position n. float32 is for tests of that rounding.
    dtype: torch.dtype = torch.float64
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))


@dataclass(frozen=True)
class RotaryFrequencies:
    """What a rotary method returns; ``posenc.pe.rotary_tables`` turns it into cos/sin.

    angle[n, k] = positions[n, pair_axis[k]] * inv_freq[k]           (positions int64 until this multiply)
    cos, sin    = cos(angle) * attention_scale, sin(angle) * attention_scale
    xPos only: q is further scaled by zeta[k] ** ((n - center) / scale_base) and k by its reciprocal.
    """

    inv_freq: torch.Tensor  # (d_rot/2,) in the context dtype (float64 unless a caller asks otherwise)
    attention_scale: float = 1.0  # multiplies cos and sin (YaRN mscale, LongRoPE factor): logits x scale**2
    pair_axis: torch.Tensor | None = None  # (d_rot/2,) int64 axis of each pair for 2D methods; None = axis 0
    num_axes: int = 1  # positions have this many coordinates
    xpos_zeta: torch.Tensor | None = None  # (d_rot/2,) xPos per-pair decay base
    xpos_scale_base: float | None = None  # xPos lambda
    xpos_center: int = 0  # xPos: scale positions are n − center (cancels in q·k; keeps ζ^(±n/λ) in range)
