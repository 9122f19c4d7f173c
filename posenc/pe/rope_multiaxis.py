"""Multi-axis rotary embeddings for video and vision-language models: every rotated pair turns by one coordinate
of a (t, h, w) position, at a frequency of its own.

Methods and the sources their formulas are read from:

- ``mrope``: M-RoPE of Wang et al., "Qwen2-VL: Enhancing Vision-Language Model's Perception of the World at Any
  Resolution" (2024, https://arxiv.org/abs/2409.12191), also Qwen2.5-VL (Bai et al., 2025,
  https://arxiv.org/abs/2502.13923); the ``interleaved`` layout is Qwen3-VL's (``mrope_interleaved``). The pair
  assignment is read from Hugging Face transformers 5.23 ``Qwen2_5_VLRotaryEmbedding.recomposition_frequencies``
  (chunked) and ``Qwen3VLTextRotaryEmbedding.recomposition_frequencies`` (interleaved).
- ``rope_nd``: the per-axis RoPE of diffusion transformers, as diffusers 0.42.1 builds it for FLUX.1
  (``FluxPosEmbed``: one ``get_1d_rotary_pos_embed`` table per axis, concatenated) and Wan 2.1
  (``WanRotaryPosEmbed``), with the optional RIFLEx temporal frequency of Zhao et al., "RIFLEx: A Free Lunch for
  Length Extrapolation in Video Diffusion Transformers" (2025, https://arxiv.org/abs/2502.15894; reference
  code thu-ml/RIFLEx ``get_1d_rotary_pos_embed_riflex``).

Positions are (N, 3) int64 (t, h, w) = (frame, row, col), the column order of a (frames, rows, cols) grid
(``posenc.pe.types``). Each method returns ``RotaryFrequencies`` with ``pair_axis`` (d_rot/2,) naming the column
each pair turns by; the shared apply rotates with the request's pairing, half (k, k + d/2) or interleaved
(2k, 2k + 1). Frequencies are built in float64 and rounded once to the context dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

import torch
from pydantic import Field, field_validator, model_validator

from posenc.errors import InvalidInput
from posenc.pe.ops import rope_inv_freq
from posenc.pe.registry import MethodParams, register
from posenc.pe.types import RotaryContext, RotaryFrequencies
from posenc.schemas.methods import Kind

AXES = 3  # positions (N, 3): column 0 = t (frame), 1 = h (row), 2 = w (col)
T_AXIS, H_AXIS, W_AXIS = 0, 1, 2

PairCount = Annotated[int, Field(ge=0)]
Theta = Annotated[float, Field(gt=1)]


def _blocks(counts: tuple[int, ...]) -> torch.Tensor:
    """Axis a for counts[a] consecutive pairs, axes in order: (sum(counts),) int64 (axis 0's pairs first)."""
    return torch.cat([torch.full((count,), axis, dtype=torch.int64) for axis, count in enumerate(counts)])


def _as_frequencies(inv_freq: torch.Tensor, pair_axis: torch.Tensor, ctx: RotaryContext) -> RotaryFrequencies:
    """Round the float64 frequencies (d/2,) once to the context dtype; both tensors onto the context device."""
    return RotaryFrequencies(
        inv_freq=inv_freq.to(dtype=ctx.dtype, device=ctx.device),
        pair_axis=pair_axis.to(ctx.device),
        num_axes=AXES,
    )


# ------------------------------------------------------------------------------------------------ M-RoPE
class MropeParams(MethodParams):
    base: float = Field(
        default=10000.0, gt=1, description="θ in ω_k = θ^(−2k/d) (Qwen2-VL, Qwen2.5-VL: 1e6; Qwen3-VL: 5e6)"
    )
    mrope_section: tuple[PairCount, PairCount, PairCount] = Field(
        default=(16, 24, 24),
        description="pairs turned by t, h and w; their sum is rotary_dim/2 (Qwen2-VL and Qwen2.5-VL, head 128: "
        "[16, 24, 24]; Qwen3-VL: [24, 20, 20])",
    )
    layout: Literal["chunked", "interleaved"] = Field(
        default="chunked",
        description="chunked (Qwen2-VL, Qwen2.5-VL): the first section[0] pairs turn by t, the next section[1] by "
        "h, the rest by w; interleaved (Qwen3-VL mrope_interleaved): pairs cycle t, h, w (see the conventions)",
    )


def mrope_pair_axis(section: tuple[int, int, int], layout: Literal["chunked", "interleaved"]) -> torch.Tensor:
    """The axis each pair turns by: (sum(section),) int64.

    chunked:     [t]·s_t + [h]·s_h + [w]·s_w.
    interleaved: pair k turns by h if k ≡ 1 (mod 3) and k < 3·s_h, by w if k ≡ 2 (mod 3) and k < 3·s_w, else by t
                 (Qwen3-VL: the t table, overwritten with h on slice(1, 3·s_h, 3) and with w on slice(2, 3·s_w, 3)).
    """
    if layout == "chunked":
        return _blocks(section)
    k = torch.arange(sum(section), dtype=torch.int64)  # (d/2,) pair index
    on_h = (k % 3 == 1) & (k < 3 * section[H_AXIS])
    on_w = (k % 3 == 2) & (k < 3 * section[W_AXIS])
    axis = torch.full_like(k, T_AXIS)
    axis[on_h] = H_AXIS
    axis[on_w] = W_AXIS
    return axis


def mrope_config_values(given: Callable[[str], Any]) -> dict[str, Any]:
    """M-RoPE's layout from a config's rope dict: Qwen3-VL's ``mrope_interleaved: true`` interleaves the sections."""
    return {"layout": "interleaved" if given("mrope_interleaved") else "chunked"}


@register(
    "mrope",
    axes=AXES,
    kind=Kind.ROTARY,
    params=MropeParams,
    config_extends=("rope", "mrope_section"),
    config_keys=("mrope_section",),
    config_values=mrope_config_values,
    paper="Wang et al. Qwen2-VL: Enhancing Vision-Language Model's Perception of the World at Any Resolution "
    "(2024). https://arxiv.org/abs/2409.12191; Qwen3-VL's interleaved layout from Hugging Face transformers "
    "Qwen3VLTextRotaryEmbedding",
    conventions={
        "pairing": "request option; Qwen2-VL, Qwen2.5-VL and Qwen3-VL (Hugging Face rotate_half) use half",
        "positions": "(N, 3) int (t, h, w) as the model's get_rope_index builds them: text tokens t = h = w = "
        "running index (then M-RoPE is 1D RoPE); vision tokens offset + (frame time, row, col) "
        "(posenc.real_models.mrope_positions builds them from text/image/video segments)",
        "frequencies": "one RoPE table ω_k = θ^(−2k/d) over the whole rotary dim; the section only picks which "
        "coordinate turns each pair (a pair's frequency does not depend on its axis)",
        "layout": "chunked: pairs [0, s_t) by t, [s_t, s_t + s_h) by h, the rest by w (Qwen2/2.5-VL); interleaved: "
        "pair k by h if k ≡ 1 (mod 3) and k < 3·s_h, by w if k ≡ 2 (mod 3) and k < 3·s_w, else by t "
        "(Qwen3-VL); a section that the interleaved rule cannot place (3·s_h > d/2 + 1 or 3·s_w > d/2) is "
        "refused",
    },
)
def mrope(params: MropeParams, ctx: RotaryContext) -> RotaryFrequencies:
    """M-RoPE: pair k of the token at (t, h, w) turns by p_{a(k)}·ω_k, ω_k = θ^(−2k/d), k ∈ [0, d/2), a(k) ∈ {t, h, w}
    given by mrope_section and the layout.

    ⟨R(p)q, R(p')k⟩ depends on p' − p only (per axis), and at t = h = w = n every pair turns by n·ω_k: text
    tokens get exactly the 1D RoPE rotation.
    """
    pairs = ctx.rotary_dim // 2
    section = params.mrope_section
    if sum(section) != pairs:
        raise InvalidInput(
            ("params", "mrope_section"),
            f"the (t, h, w) sections {list(section)} share the rotated pairs, so they must sum to rotary_dim/2 = "
            f"{pairs}, got {sum(section)}",
        )
    pair_axis = mrope_pair_axis(section, params.layout)  # (d/2,)
    placed = torch.bincount(pair_axis, minlength=AXES).tolist()  # (3,) pairs per axis
    if placed != list(section):
        raise InvalidInput(
            ("params", "mrope_section"),
            f"the interleaved layout turns pairs k ≡ 1 (mod 3) below 3·{section[H_AXIS]} by h and k ≡ 2 (mod 3) "
            f"below 3·{section[W_AXIS]} by w; with {pairs} pairs that gives (t, h, w) = {placed} pairs, not "
            f"{list(section)}",
        )
    inv_freq = rope_inv_freq(params.base, ctx.rotary_dim, dtype=torch.float64)  # (d/2,)
    return _as_frequencies(inv_freq, pair_axis, ctx)


# ------------------------------------------------------------------------------------- per-axis (diffusers)
class RopeNdParams(MethodParams):
    axes_dims: tuple[PairCount, PairCount, PairCount] = Field(
        default=(16, 56, 56),
        description="rotated features per axis (t, h, w), each even, summing to rotary_dim (FLUX.1: [16, 56, 56]; "
        "Wan 2.1, head 128: [44, 42, 42])",
    )
    theta: Theta | tuple[Theta, Theta, Theta] = Field(
        default=10000.0,
        description="θ_a in ω_{a,j} = θ_a^(−2j/d_a): one for every axis, or one per axis (t, h, w) (FLUX.1, Wan "
        "2.1: 10000)",
    )
    riflex_k: int | None = Field(
        default=None,
        ge=1,
        description="RIFLEx: 1-based index j + 1 of the temporal frequency set to 0.9·2π/riflex_length (the "
        "reference's identify_k picks the one whose period is nearest the frame where the video first repeats)",
    )
    riflex_length: int | None = Field(
        default=None, ge=1, description="RIFLEx: L', the number of (latent) frames the video is extrapolated to"
    )

    @field_validator("axes_dims")
    @classmethod
    def _even(cls, dims: tuple[int, int, int]) -> tuple[int, int, int]:
        if any(dim % 2 for dim in dims):
            raise ValueError(f"every axis rotates whole feature pairs, so each entry must be even, got {list(dims)}")
        return dims

    @model_validator(mode="after")
    def _riflex_pair(self) -> RopeNdParams:
        if (self.riflex_k is None) != (self.riflex_length is None):
            raise ValueError("RIFLEx needs both riflex_k and riflex_length (or neither); one alone would be ignored")
        return self


@register(
    "rope_nd",
    axes=AXES,
    kind=Kind.ROTARY,
    params=RopeNdParams,
    config_classes=("FluxTransformer2DModel", "WanTransformer3DModel"),
    paper="Black Forest Labs FLUX.1 and Wan 2.1 (Wan: Open and Advanced Large-Scale Video Generative Models, 2025, "
    "https://arxiv.org/abs/2503.20314) per-axis RoPE as diffusers builds it (FluxPosEmbed, WanRotaryPosEmbed, "
    "https://github.com/huggingface/diffusers); RIFLEx: Zhao et al. (2025) https://arxiv.org/abs/2502.15894",
    conventions={
        "pairing": "request option. interleaved: per-axis feature blocks with adjacent pairs, diffusers "
        "repeat_interleave_real=True + apply_rotary_emb(use_real_unbind_dim=-1) (FLUX.1, Wan 2.1, HunyuanVideo, "
        "CogVideoX) and the complex/polar form (use_real=False; Wan's original view_as_complex); half: "
        "[t, h, w] frequencies duplicated over the two halves, use_real_unbind_dim=-2 (Cosmos, CogView4)",
        "layout": "pairs in axis blocks: the first d_t/2 pairs turn by t, the next d_h/2 by h, the last d_w/2 by w. "
        "Not expressible: per-axis halves, x.chunk(3) with rotate_half inside each chunk (diffusers "
        "apply_rotary_emb_allegro), which pairs features (o_a + j, o_a + d_a/2 + j) and needs a per-axis pairing",
        "positions": "(N, 3) int (t, h, w); FLUX.1 ids are (index, row, col) with index 0 for the image and for "
        "text tokens (all-zero ids: no rotation); Wan: (frame, row, col) of the patchified latent grid",
        "splits": "FLUX.1: axes_dims (16, 56, 56), θ 10000; Wan 2.1: h = w = 2·(D // 6), t = D − h − w (D = 128: "
        "(44, 42, 42)), θ 10000",
        "riflex": "temporal frequency j = riflex_k − 1 replaced by 0.9·2π/riflex_length whatever its value (the "
        "reference code); positions along t are frames, so L' counts latent frames",
    },
)
def rope_nd(params: RopeNdParams, ctx: RotaryContext) -> RotaryFrequencies:
    """Per-axis RoPE: pair j of axis a turns by p_a·ω_{a,j}, ω_{a,j} = θ_a^(−2j/d_a), j ∈ [0, d_a/2), the axes' pairs
    in blocks (t, then h, then w); RIFLEx sets ω_{t,k−1} = 0.9·2π/L'.

    ⟨R(p)q, R(p')k⟩ depends on p' − p only; with RIFLEx the intrinsic temporal component completes at most 0.9 of
    a period over L' frames, so extrapolated frames do not repeat earlier ones.
    """
    dims = params.axes_dims
    if sum(dims) != ctx.rotary_dim:
        raise InvalidInput(
            ("params", "axes_dims"),
            f"the per-axis feature counts {list(dims)} split the rotated features, so they must sum to rotary_dim "
            f"= {ctx.rotary_dim}, got {sum(dims)}",
        )
    thetas = params.theta if isinstance(params.theta, tuple) else (params.theta,) * AXES
    per_axis = [rope_inv_freq(theta, dim, dtype=torch.float64) for theta, dim in zip(thetas, dims, strict=True)]
    if params.riflex_k is not None and params.riflex_length is not None:
        temporal_pairs = dims[T_AXIS] // 2
        if params.riflex_k > temporal_pairs:
            raise InvalidInput(
                ("params", "riflex_k"),
                f"RIFLEx replaces temporal frequency riflex_k (1-based) of the {temporal_pairs} = axes_dims[0]/2 "
                f"temporal pairs, got {params.riflex_k}",
            )
        per_axis[T_AXIS][params.riflex_k - 1] = 0.9 * 2 * math.pi / params.riflex_length  # the intrinsic one
    inv_freq = torch.cat(per_axis)  # (d/2,): t pairs, then h pairs, then w pairs
    pair_axis = _blocks(tuple(dim // 2 for dim in dims))  # (d/2,)
    return _as_frequencies(inv_freq, pair_axis, ctx)
