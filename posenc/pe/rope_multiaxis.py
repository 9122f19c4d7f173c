"""Multi-axis rotary embeddings for video and vision-language models: every rotated pair turns by one coordinate
of a (t, h, w) position, at a frequency of its own.

Methods and the sources their formulas are read from:

- ``mrope``: M-RoPE of Wang et al., "Qwen2-VL: Enhancing Vision-Language Model's Perception of the World at Any
  Resolution" (2024, https://arxiv.org/abs/2409.12191), also Qwen2.5-VL (Bai et al., 2025,
  https://arxiv.org/abs/2502.13923); the ``interleaved`` layout is Qwen3-VL's (``mrope_interleaved``). The pair
  assignment is read from Hugging Face transformers 5.23 ``Qwen2_5_VLRotaryEmbedding.recomposition_frequencies``
  (chunked) and ``Qwen3VLTextRotaryEmbedding.recomposition_frequencies`` (interleaved). Its ``scaling`` param
  composes it with any 1D rotary method's table (one composition, not a method per scaling): the same classes'
  ``forward`` multiply the (3, B, N) positions by the scaled inv_freq of the config's rope type (linear, dynamic,
  YaRN, LongRoPE) and its attention scaling before recomposing by the sections.
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
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Annotated, Any, Literal

import torch
from pydantic import Field, ValidationError, field_validator, model_validator

from posenc.errors import InvalidInput
from posenc.pe.ops import rope_inv_freq
from posenc.pe.registry import MethodParams, MethodSpec, UnknownMethodError, get_method, register
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
class MropeScaling(MethodParams):
    method: str = Field(
        description="a registered 1D rotary method whose table the sections turn (rope_linear, rope_dynamic_ntk, "
        "rope_yarn, rope_longrope, ...): its frequencies, their length dependence and its attention scale"
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="that method's params, validated by its own schema; θ is M-RoPE's base, not given here",
    )

    @model_validator(mode="after")
    def _a_1d_rotary_method(self) -> MropeScaling:
        try:
            spec = get_method(self.method)
        except UnknownMethodError as exc:
            raise ValueError(str(exc)) from None
        if (
            spec.kind is not Kind.ROTARY
            or spec.axes != 1
            or spec.learned
            or "base" not in spec.params_model.model_fields
        ):
            raise ValueError(
                f"{self.method!r} is not a 1D rotary method with a base θ (a table of one frequency per pair that "
                "the sections can turn by t, h or w)"
            )
        if "base" in self.params:
            raise ValueError("θ is M-RoPE's own base: give it there, not in the scaling params")
        return self


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
    truncated_sections: bool = Field(
        default=False,
        description="interleaved only: accept sections the interleaved rule does not place one for one (their "
        "sum need not be rotary_dim/2) and turn the pairs as Qwen3-VL's code does: h on pairs k ≡ 1 (mod 3) "
        "below 3·s_h, w on k ≡ 2 (mod 3) below 3·s_w, cut at the last pair, every other pair t",
    )
    scaling: MropeScaling | None = Field(
        default=None,
        description="the 1D table the sections turn: a scaled RoPE method and its params (Qwen2.5-VL or "
        "Qwen3-VL with rope_type yarn, dynamic, linear, longrope); none: plain RoPE ω_k = θ^(−2k/d)",
    )

    @model_validator(mode="after")
    def _scaling_params(self) -> MropeParams:
        if self.truncated_sections and self.layout != "interleaved":
            raise ValueError(
                "truncated_sections applies to the interleaved layout only (chunked sections split "
                "the pairs and must sum to rotary_dim/2)"
            )
        if self.scaling is not None:
            _scaled_params(self.scaling, self.base)  # the scaling method's own schema, with θ = base
        return self


def _scaled_params(scaling: MropeScaling, base: float) -> MethodParams:
    """The scaling method's params parsed by its own schema with θ = M-RoPE's base; a bad one is a ValueError
    naming the param (pydantic reports it at ``scaling``)."""
    try:
        return get_method(scaling.method).parse_params({**scaling.params, "base": base})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "params"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{scaling.method} param {where}: {message}") from None


def mrope_pair_axis(
    section: tuple[int, int, int], layout: Literal["chunked", "interleaved"], pairs: int | None = None
) -> torch.Tensor:
    """The axis each of ``pairs`` pairs (default sum(section)) turns by: (pairs,) int64.

    chunked:     [t]·s_t + [h]·s_h + [w]·s_w.
    interleaved: pair k turns by h if k ≡ 1 (mod 3) and k < 3·s_h, by w if k ≡ 2 (mod 3) and k < 3·s_w, else by t
                 (Qwen3-VL: the t table, overwritten with h on slice(1, 3·s_h, 3) and with w on slice(2, 3·s_w, 3)).
    """
    if layout == "chunked":
        return _blocks(section)
    k = torch.arange(sum(section) if pairs is None else pairs, dtype=torch.int64)  # (d/2,) pair index
    on_h = (k % 3 == 1) & (k < 3 * section[H_AXIS])
    on_w = (k % 3 == 2) & (k < 3 * section[W_AXIS])
    axis = torch.full_like(k, T_AXIS)
    axis[on_h] = H_AXIS
    axis[on_w] = W_AXIS
    return axis


def _table(params: MropeParams, ctx: RotaryContext) -> tuple[torch.Tensor, float]:
    """The 1D table the sections turn, (inv_freq (d/2,) float64, attention scale): plain RoPE, or the scaling
    method's frequencies at this context (its length dependence with them) and its attention scale."""
    if params.scaling is None:
        return rope_inv_freq(params.base, ctx.rotary_dim, dtype=torch.float64), 1.0
    spec = get_method(params.scaling.method)
    inner = spec.fn(_scaled_params(params.scaling, params.base), replace(ctx, dtype=torch.float64))
    one_angle = isinstance(inner, RotaryFrequencies) and inner.pair_axis is None
    if not one_angle or inner.xpos_zeta is not None or inner.fourier_cos is not None:
        raise InvalidInput(
            ("params", "scaling", "method"),
            f"{spec.name} does not give one frequency per pair turned by the position alone (a block rotation, "
            "xPos decay or Fourier series), so the sections cannot turn its pairs",
        )
    return inner.inv_freq.to(torch.float64), float(inner.attention_scale)


def _scaling_spec(params: MropeParams | Mapping[str, Any]) -> tuple[MethodSpec, dict[str, Any]] | None:
    """The scaling method of M-RoPE params (parsed, or raw as a resolved layer holds them) and its raw params with
    θ, or None without one."""
    parsed = params if isinstance(params, MropeParams) else MropeParams.model_validate(dict(params))
    if parsed.scaling is None:
        return None
    return get_method(parsed.scaling.method), {**parsed.scaling.params, "base": parsed.base}


def mrope_config_warning(params: Mapping[str, Any], attention_scale: float) -> tuple[str, str, dict[str, Any]] | None:
    """What the config doctor says of the scaling method's table (YaRN's static scaling of short prompts)."""
    found = _scaling_spec(params)
    if found is None:
        return None
    spec, inner = found
    return None if spec.config_warning is None else spec.config_warning(inner, attention_scale)


def mrope_length_dependent(params: Mapping[str, Any]) -> bool:
    """Whether the scaling method's frequencies change with the sequence length (dynamic NTK, LongRoPE)."""
    found = _scaling_spec(params)
    return found is not None and found[0].length_dependent


def mrope_config_values(given: Callable[[str], Any]) -> dict[str, Any]:
    """M-RoPE's layout from a config's rope dict: Qwen3-VL's ``mrope_interleaved: true`` interleaves the sections."""
    return {"layout": "interleaved" if given("mrope_interleaved") else "chunked"}


@register(
    "mrope",
    axes=AXES,
    kind=Kind.ROTARY,
    params=MropeParams,
    config_extends=("rope", "mrope_section"),
    config_composes="scaling",
    config_keys=("mrope_section",),
    config_values=mrope_config_values,
    config_warning=mrope_config_warning,
    length_dependence=mrope_length_dependent,
    paper="Wang et al. Qwen2-VL: Enhancing Vision-Language Model's Perception of the World at Any Resolution "
    "(2024). https://arxiv.org/abs/2409.12191; Qwen3-VL's interleaved layout from Hugging Face transformers "
    "Qwen3VLTextRotaryEmbedding",
    conventions={
        "pairing": "request option; Qwen2-VL, Qwen2.5-VL and Qwen3-VL (Hugging Face rotate_half) use half",
        "positions": "(N, 3) int (t, h, w) as the model's get_rope_index builds them: text tokens t = h = w = "
        "running index (then M-RoPE is 1D RoPE); vision tokens offset + (frame time, row, col) "
        "(posenc.real_models.mrope_positions builds them from text/image/video segments)",
        "frequencies": "one 1D table over the whole rotary dim: RoPE ω_k = θ^(−2k/d), or the scaling method's "
        "ω_k (at the request's length, for a length-dependent one) with its attention scale on cos and sin, as "
        "Qwen2.5-VL's and Qwen3-VL's rotary embeddings multiply the (3, B, N) positions by the scaled inv_freq; "
        "the section only picks which coordinate turns each pair (a pair's frequency does not depend on its axis)",
        "layout": "chunked: pairs [0, s_t) by t, [s_t, s_t + s_h) by h, the rest by w (Qwen2/2.5-VL); interleaved: "
        "pair k by h if k ≡ 1 (mod 3) and k < 3·s_h, by w if k ≡ 2 (mod 3) and k < 3·s_w, else by t "
        "(Qwen3-VL); a section that the interleaved rule does not place one for one (3·s_h > d/2 + 1, "
        "3·s_w > d/2, or a sum other than d/2) is refused unless truncated_sections, which turns the pairs as "
        "Qwen3-VL's code does (its slices cut at the last pair)",
    },
)
def mrope(params: MropeParams, ctx: RotaryContext) -> RotaryFrequencies:
    """M-RoPE: pair k of the token at (t, h, w) turns by p_{a(k)}·ω_k, k ∈ [0, d/2), a(k) ∈ {t, h, w} given by
    mrope_section and the layout, ω_k = θ^(−2k/d) or the scaling method's ω_k (its attention scale on cos, sin).

    ⟨R(p)q, R(p')k⟩ depends on p' − p only (per axis), and at t = h = w = n every pair turns by n·ω_k: text
    tokens get exactly the 1D rotation of the table (RoPE, or the scaled method).
    """
    pairs = ctx.rotary_dim // 2
    section = params.mrope_section
    if params.truncated_sections:
        pair_axis = mrope_pair_axis(section, params.layout, pairs)  # (d/2,) Qwen3-VL's slices, cut at d/2
    else:
        if sum(section) != pairs:
            raise InvalidInput(
                ("params", "mrope_section"),
                f"the (t, h, w) sections {list(section)} share the rotated pairs, so they must sum to rotary_dim/2 "
                f"= {pairs}, got {sum(section)}"
                + (" (truncated_sections runs them as Qwen3-VL's code does)" if params.layout == "interleaved" else ""),
            )
        pair_axis = mrope_pair_axis(section, params.layout)  # (d/2,)
        placed = torch.bincount(pair_axis, minlength=AXES).tolist()  # (3,) pairs per axis
        if placed != list(section):
            raise InvalidInput(
                ("params", "mrope_section"),
                f"the interleaved layout turns pairs k ≡ 1 (mod 3) below 3·{section[H_AXIS]} by h and k ≡ 2 "
                f"(mod 3) below 3·{section[W_AXIS]} by w; with {pairs} pairs that gives (t, h, w) = {placed} "
                f"pairs, not {list(section)} (truncated_sections runs them as Qwen3-VL's code does)",
            )
    inv_freq, scale = _table(params, ctx)  # (d/2,) float64
    return replace(_as_frequencies(inv_freq, pair_axis, ctx), attention_scale=scale)


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
