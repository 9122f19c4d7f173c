"""Multi-axis RoPE (``mrope``, ``rope_nd``) against the models' own rotary code: Hugging Face transformers 5.23
(Qwen2.5-VL, Qwen3-VL) and diffusers 0.42.1 (FLUX.1, Wan 2.1, Cosmos), both pinned test-only dependencies; a
float64 reference written from the formulas (RIFLEx included); and the properties a user would assume."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pydantic
import pytest
import torch
from diffusers.models.embeddings import apply_rotary_emb
from diffusers.models.transformers import transformer_wan
from diffusers.models.transformers.transformer_cosmos import CosmosRotaryPosEmbed
from diffusers.models.transformers.transformer_flux import FluxPosEmbed
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLTextConfig
from transformers.models.qwen3_vl import modeling_qwen3_vl
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

from posenc.errors import InvalidInput
from posenc.pe import RotaryContext, RotaryFrequencies, get_method, rotary_frequencies
from posenc.pe.appliers import Layer, grid_positions, rotary_applier
from posenc.pe.ops import Pairing

# The param sets of the real models (docstrings of posenc.pe.rope_multiaxis)
QWEN2_5_VL = {"base": 1e6, "mrope_section": [16, 24, 24]}  # Qwen2.5-VL-7B, head 128
QWEN3_VL = {"base": 5e6, "mrope_section": [24, 20, 20], "layout": "interleaved"}  # Qwen3-VL-8B text, head 128
FLUX = {"axes_dims": [16, 56, 56], "theta": 10000.0}  # FLUX.1, head 128
WAN = {"axes_dims": [44, 42, 42], "theta": 10000.0}  # Wan 2.1, head 128: h = w = 2·(128 // 6), t the rest


def rotate(
    name: str, params: dict[str, Any], x: torch.Tensor, positions: torch.Tensor, pairing: Pairing
) -> torch.Tensor:
    """x (B, H, N, D) rotated by the method at positions (N, 3) through its applier, as POST /v1/rotary does."""
    spec = get_method(name)
    head_dim = x.shape[-1]
    layer = Layer(x.shape[1], head_dim, causal=False, pairing=pairing, rotary_dim=head_dim, dtype=torch.float64)
    applier = rotary_applier(spec, spec.parse_params(params), layer)
    return applier.rotate_side(x, positions, int(positions.max()) + 1, keys=False)


def frequencies(name: str, params: dict[str, Any], rotary_dim: int) -> RotaryFrequencies:
    spec = get_method(name)
    freqs = rotary_frequencies(spec, spec.parse_params(params), RotaryContext(rotary_dim, 16, torch.float64))
    assert isinstance(freqs, RotaryFrequencies)
    return freqs


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def qwen_positions() -> torch.Tensor:
    """(N, 3) (t, h, w) ids shaped like get_rope_index's: text, a 3-frame video grid, text again far on."""
    text = torch.arange(5)[:, None].expand(-1, 3)  # (5, 3): t = h = w
    video = grid_positions((3, 4, 5)) * torch.tensor([50, 1, 1]) + 5  # (60, 3): frames 50 ids apart (Qwen2.5-VL)
    tail = torch.arange(2000, 2006)[:, None].expand(-1, 3)  # (6, 3)
    return torch.cat((text, video, tail))  # (71, 3)


# ------------------------------------------------------------------------------------------------- mrope
def test_mrope_is_registered_for_three_axes() -> None:
    assert get_method("mrope").axes == 3
    assert get_method("rope_nd").axes == 3


# The text config fields of the real checkpoints' config.json that their rotary embedding reads
QWEN2_5_VL_7B_CONFIG: dict[str, Any] = {
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "rope_theta": 1e6,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
}
QWEN3_VL_8B_CONFIG: dict[str, Any] = {
    "head_dim": 128,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "rope_theta": 5e6,
    "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True},
}


@pytest.mark.parametrize(
    ("config", "module", "embedding", "params"),
    [
        (
            Qwen2_5_VLTextConfig(**QWEN2_5_VL_7B_CONFIG),
            modeling_qwen2_5_vl,
            "Qwen2_5_VLRotaryEmbedding",
            QWEN2_5_VL,
        ),
        (Qwen3VLTextConfig(**QWEN3_VL_8B_CONFIG), modeling_qwen3_vl, "Qwen3VLTextRotaryEmbedding", QWEN3_VL),
    ],
    ids=["qwen2_5_vl_chunked", "qwen3_vl_interleaved"],
)
def test_mrope_matches_transformers(config: Any, module: Any, embedding: str, params: dict[str, Any]) -> None:
    positions = qwen_positions()  # (N, 3)
    q, k = randn(1, 2, positions.shape[0], 128, seed=0), randn(1, 2, positions.shape[0], 128, seed=1)  # (B, H, N, D)
    cos, sin = getattr(module, embedding)(config)(q, positions.T[:, None, :])  # ids (3, B, N) -> (B, N, D) each
    expected_q, expected_k = module.apply_rotary_pos_emb(q, k, cos, sin)
    # HF forms ω (a float32 power) and p·ω in float32: at p ≈ 2000 the product alone is rounded by up to
    # 2000·2^-24 ≈ 1.2e-4 rad, ω by a few float32 ulps more, so a rotated entry of a pair of norm up to ~6
    # (unit-variance q) can be off by ~1e-3 (3e-4 seen); a wrong pair assignment is off by O(1)
    torch.testing.assert_close(rotate("mrope", params, q, positions, "half"), expected_q, rtol=0, atol=1e-3)
    torch.testing.assert_close(rotate("mrope", params, k, positions, "half"), expected_k, rtol=0, atol=1e-3)
    # the text tokens (p < 5) see almost none of it: there the match is to a few float32 ulps
    near = rotate("mrope", params, q, positions, "half")[:, :, :5]  # (B, H, 5, D)
    torch.testing.assert_close(near, expected_q[:, :, :5], rtol=0, atol=1e-6)


def test_mrope_pair_axes_of_qwen_layouts() -> None:
    chunked = frequencies("mrope", QWEN2_5_VL, 128).pair_axis
    interleaved = frequencies("mrope", QWEN3_VL, 128).pair_axis
    assert chunked is not None
    assert interleaved is not None
    assert chunked.tolist() == [0] * 16 + [1] * 24 + [2] * 24
    # Qwen3-VL: t, h, w cycle over the first 3·20 pairs, the last 4 pairs turn by t
    assert interleaved.tolist() == [0, 1, 2] * 20 + [0] * 4


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("params", [QWEN2_5_VL, QWEN3_VL], ids=["chunked", "interleaved"])
def test_mrope_on_text_positions_is_exactly_1d_rope(params: dict[str, Any], pairing: Pairing) -> None:
    """t = h = w = n for text tokens: every pair turns by n·ω_k, the 1D rope rotation, bit for bit."""
    n = torch.tensor([0, 1, 7, 300, 2047, 65_000])  # (N,)
    x = randn(1, 2, n.shape[0], 128, seed=2)  # (B, H, N, D)
    text = rotate("mrope", params, x, n[:, None].expand(-1, 3), pairing)  # positions (N, 3)
    one_d = rotate("rope", {"base": params["base"]}, x, n, pairing)
    assert torch.equal(text, one_d)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("params", [QWEN2_5_VL, QWEN3_VL], ids=["chunked", "interleaved"])
@pytest.mark.parametrize("shift", [(3, 0, 0), (0, 5, 0), (0, 0, 7), (11, 2, 9)])
def test_mrope_scores_depend_only_on_the_3d_offset(
    params: dict[str, Any], pairing: Pairing, shift: tuple[int, int, int]
) -> None:
    positions = qwen_positions()  # (N, 3)
    q, k = randn(1, 1, positions.shape[0], 128, seed=3), randn(1, 1, positions.shape[0], 128, seed=4)
    moved = positions + torch.tensor(shift)
    before = rotate("mrope", params, q, positions, pairing) @ rotate("mrope", params, k, positions, pairing).mT
    after = rotate("mrope", params, q, moved, pairing) @ rotate("mrope", params, k, moved, pairing).mT
    torch.testing.assert_close(after, before, rtol=0, atol=1e-10)
    # and the scores do see the positions: moving the queries alone changes them
    alone = rotate("mrope", params, q, moved, pairing) @ rotate("mrope", params, k, positions, pairing).mT
    assert (alone - before).abs().max() > 1e-3


@pytest.mark.parametrize("layout", ["chunked", "interleaved"])
def test_mrope_section_that_does_not_sum_to_half_the_rotary_dim_is_refused(layout: str) -> None:
    params = {"mrope_section": [16, 24, 20], "layout": layout}  # 60 pairs for a 128-wide head
    with pytest.raises(InvalidInput, match="must sum to rotary_dim/2 = 64, got 60") as refused:
        frequencies("mrope", params, 128)
    assert refused.value.loc == ("params", "mrope_section")
    with pytest.raises(InvalidInput) as through_the_applier:
        rotate("mrope", params, randn(1, 1, 2, 128, seed=5), torch.zeros(2, 3, dtype=torch.int64), "half")
    assert through_the_applier.value.loc == ("params", "mrope_section")


def test_mrope_interleaved_section_it_cannot_place_is_refused() -> None:
    """Qwen2.5-VL's [16, 24, 24] interleaved would put h on pairs 1, 4, …, 70 of only 64: 21 h pairs, not 24."""
    with pytest.raises(InvalidInput, match=r"\[22, 21, 21\] pairs, not \[16, 24, 24\]") as refused:
        frequencies("mrope", {"mrope_section": [16, 24, 24], "layout": "interleaved"}, 128)
    assert refused.value.loc == ("params", "mrope_section")


def test_mrope_section_needs_three_non_negative_entries() -> None:
    spec = get_method("mrope")
    for bad in ([32, 32], [16, 24, 24, 0], [-1, 33, 32]):
        with pytest.raises(pydantic.ValidationError, match="mrope_section"):
            spec.parse_params({"mrope_section": bad})


# ----------------------------------------------------------------------------------------------- rope_nd
def test_rope_nd_matches_diffusers_flux() -> None:
    """FluxPosEmbed on (index, row, col) ids, rotated by diffusers' apply_rotary_emb (adjacent pairs)."""
    text = torch.zeros(4, 3, dtype=torch.int64)  # (4, 3): FLUX text ids are all zero
    image = grid_positions((1, 6, 7))  # (42, 3): index 0, rows, cols
    reference = grid_positions((1, 3, 4)) + torch.tensor([1, 0, 0])  # (12, 3): a Kontext-style image at index 1
    ids = torch.cat((text, image, reference))  # (58, 3)
    q = randn(1, 2, ids.shape[0], 128, seed=6)  # (B, H, N, D)
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])(ids)  # (N, D) each, float32
    pair: Any = (cos, sin)  # diffusers annotates the (cos, sin) pair as tuple[Tensor]
    expected = apply_rotary_emb(q, pair, use_real=True, use_real_unbind_dim=-1)
    # diffusers rotates in float32 (x.float()) with float32 cos/sin: entries match to a few float32 ulps
    torch.testing.assert_close(rotate("rope_nd", FLUX, q, ids, "interleaved"), expected, rtol=0, atol=2e-6)


def test_rope_nd_matches_diffusers_wan() -> None:
    """WanRotaryPosEmbed on a (1, 16, 3, 8, 10) latent (patches (1, 2, 2): a 3 x 4 x 5 token grid), rotated by Wan's
    own attention processor; q is captured where it enters attention."""
    heads, head_dim, grid = 2, 128, (3, 4, 5)
    rope = transformer_wan.WanRotaryPosEmbed(attention_head_dim=head_dim, patch_size=(1, 2, 2), max_seq_len=1024)
    assert [rope.t_dim, rope.h_dim, rope.w_dim] == WAN["axes_dims"]
    cos, sin = rope(torch.zeros(1, 16, 3, 8, 10))  # (1, N, 1, D) each
    attention = transformer_wan.WanAttention(
        dim=heads * head_dim,
        heads=heads,
        dim_head=head_dim,
        processor=transformer_wan.WanAttnProcessor(),  # type: ignore[no-untyped-call]  # untyped __init__
    ).double()
    with torch.no_grad():  # identity projections and no q/k norm: the processor's q is the rotated input
        for projection in (attention.to_q, attention.to_k, attention.to_v):
            projection.weight.copy_(torch.eye(heads * head_dim))
            projection.bias.zero_()
    attention.norm_q = attention.norm_k = torch.nn.Identity()  # type: ignore[assignment]  # typed as RMSNorm
    seen: dict[str, torch.Tensor] = {}

    def capture(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **_: Any) -> torch.Tensor:
        seen["q"], seen["k"] = query, key  # (B, N, H, D) each
        return torch.zeros_like(query)

    tokens = math.prod(grid)
    x = randn(1, tokens, heads * head_dim, seed=7)  # (B, N, H·D)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformer_wan, "dispatch_attention_fn", capture)
        attention(x, rotary_emb=(cos, sin))
    q = x.reshape(1, tokens, heads, head_dim).transpose(1, 2)  # (B, N, H·D) -> (B, H, N, D)
    ours = rotate("rope_nd", WAN, q, grid_positions(grid), "interleaved").transpose(1, 2)  # (B, N, H, D)
    # float32 cos/sin tables (diffusers .float()), applied in float64: agreement to float32 rounding
    torch.testing.assert_close(ours, seen["q"], rtol=0, atol=1e-6)
    torch.testing.assert_close(ours, seen["k"], rtol=0, atol=1e-6)


def test_rope_nd_half_pairing_matches_diffusers_cosmos() -> None:
    """Cosmos: [t, h, w] frequencies over both halves (use_real_unbind_dim=-2), per-axis θ from its NTK factors."""
    rope = CosmosRotaryPosEmbed(hidden_size=128)  # dims (44, 42, 42); t θ = 10000·2^(44/42)
    cos, sin = rope(torch.zeros(1, 16, 3, 8, 10))  # (N, D) each, images (fps None): integer positions
    grid = (3, 4, 5)
    q = randn(1, 2, math.prod(grid), 128, seed=8)  # (B, H, N, D)
    pair: Any = (cos, sin)  # diffusers annotates the (cos, sin) pair as tuple[Tensor]
    expected = apply_rotary_emb(q, pair, use_real=True, use_real_unbind_dim=-2)
    thetas = [10000.0 * rope.t_ntk_factor, 10000.0 * rope.h_ntk_factor, 10000.0 * rope.w_ntk_factor]
    params = {"axes_dims": [rope.dim_t, rope.dim_h, rope.dim_w], "theta": thetas}
    # Cosmos builds ω, p·ω and cos/sin in float32 (positions < 5 here): agreement to float32 rounding
    torch.testing.assert_close(rotate("rope_nd", params, q, grid_positions(grid), "half"), expected, rtol=0, atol=2e-6)


def reference_rope_nd(
    x: np.ndarray,
    positions: np.ndarray,
    dims: list[int],
    thetas: list[float],
    pairing: Pairing,
    riflex: tuple[int, int] | None = None,
) -> np.ndarray:
    """Written from the formula: pair j of axis a turns by p_a·θ_a^(−2j/d_a), axes in blocks; RIFLEx (k, L') sets the
    temporal ω_{k−1} = 0.9·2π/L'. x (N, D) -> (N, D), complex float64."""
    phases = []
    for axis, (dim, theta) in enumerate(zip(dims, thetas, strict=True)):
        omega = np.array([theta ** (-2.0 * j / dim) for j in range(dim // 2)])  # (d_a/2,)
        if axis == 0 and riflex is not None:
            omega[riflex[0] - 1] = 0.9 * 2 * math.pi / riflex[1]
        phases.append(positions[:, axis : axis + 1].astype(np.float64) * omega)  # (N, d_a/2)
    phase = np.concatenate(phases, axis=1)  # (N, D/2)
    half = x.shape[1] // 2
    z = x[:, :half] + 1j * x[:, half:] if pairing == "half" else x[:, 0::2] + 1j * x[:, 1::2]  # (N, D/2)
    rotated = z * np.exp(1j * phase)
    out = np.empty_like(x)
    if pairing == "half":
        out[:, :half], out[:, half:] = rotated.real, rotated.imag
    else:
        out[:, 0::2], out[:, 1::2] = rotated.real, rotated.imag
    return out


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("riflex", [None, (2, 20)])
def test_rope_nd_matches_the_float64_formula(pairing: Pairing, riflex: tuple[int, int] | None) -> None:
    dims, thetas = [8, 12, 12], [500.0, 10000.0, 100.0]
    positions = grid_positions((5, 3, 4)) * torch.tensor([7, 1, 3])  # (60, 3)
    x = randn(1, 1, positions.shape[0], 32, seed=9)  # (B, H, N, D)
    params: dict[str, Any] = {"axes_dims": dims, "theta": thetas}
    if riflex is not None:
        params |= {"riflex_k": riflex[0], "riflex_length": riflex[1]}
    got = rotate("rope_nd", params, x, positions, pairing)[0, 0]  # (N, D)
    expected = reference_rope_nd(x[0, 0].numpy(), positions.numpy(), dims, thetas, pairing, riflex)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


def test_riflex_replaces_only_the_intrinsic_temporal_frequency() -> None:
    """Wan 2.1's split with RIFLEx k = 6 for 40 latent frames: ω_{t,5} = 0.9·2π/40, every other frequency kept."""
    plain = frequencies("rope_nd", WAN, 128)
    riflex = frequencies("rope_nd", WAN | {"riflex_k": 6, "riflex_length": 40}, 128)
    changed = (riflex.inv_freq != plain.inv_freq).nonzero().flatten().tolist()
    assert changed == [5]
    assert riflex.inv_freq[5].item() == 0.9 * 2 * math.pi / 40
    # over the extrapolated length the intrinsic component turns 0.9 of a period: frame 40 is not frame 0 again
    assert 40 * riflex.inv_freq[5].item() == pytest.approx(0.9 * 2 * math.pi, rel=1e-15)
    assert riflex.pair_axis is not None
    assert riflex.pair_axis.tolist() == [0] * 22 + [1] * 21 + [2] * 21


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("params", [FLUX, WAN | {"riflex_k": 4, "riflex_length": 30}], ids=["flux", "wan_riflex"])
@pytest.mark.parametrize("shift", [(3, 0, 0), (0, 5, 0), (0, 0, 7), (11, 2, 9)])
def test_rope_nd_scores_depend_only_on_the_3d_offset(
    params: dict[str, Any], pairing: Pairing, shift: tuple[int, int, int]
) -> None:
    positions = grid_positions((3, 4, 5))  # (60, 3)
    q, k = randn(1, 1, 60, 128, seed=10), randn(1, 1, 60, 128, seed=11)  # (B, H, N, D)
    moved = positions + torch.tensor(shift)
    before = rotate("rope_nd", params, q, positions, pairing) @ rotate("rope_nd", params, k, positions, pairing).mT
    after = rotate("rope_nd", params, q, moved, pairing) @ rotate("rope_nd", params, k, moved, pairing).mT
    torch.testing.assert_close(after, before, rtol=0, atol=1e-10)
    alone = rotate("rope_nd", params, q, moved, pairing) @ rotate("rope_nd", params, k, positions, pairing).mT
    assert (alone - before).abs().max() > 1e-3


def test_rope_nd_axes_dims_that_do_not_sum_to_the_rotary_dim_are_refused() -> None:
    with pytest.raises(InvalidInput, match="must sum to rotary_dim = 64, got 128") as refused:
        frequencies("rope_nd", FLUX, 64)
    assert refused.value.loc == ("params", "axes_dims")


def test_rope_nd_riflex_index_past_the_temporal_pairs_is_refused() -> None:
    with pytest.raises(InvalidInput, match="of the 8 = axes_dims") as refused:
        frequencies("rope_nd", FLUX | {"riflex_k": 9, "riflex_length": 30}, 128)
    assert refused.value.loc == ("params", "riflex_k")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"axes_dims": [16, 55, 57]}, "each entry must be even"),
        ({"axes_dims": [64, 64]}, "axes_dims"),
        ({"theta": [10000.0, 10000.0]}, "theta"),
        ({"riflex_k": 4}, "both riflex_k and riflex_length"),
        ({"riflex_length": 30}, "both riflex_k and riflex_length"),
        ({"riflex_k": 0, "riflex_length": 30}, "riflex_k"),
    ],
)
def test_rope_nd_params_the_schema_refuses(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=field):
        get_method("rope_nd").parse_params(raw)


# ------------------------------------------------------------------------------------- M-RoPE over a scaled table
# (scaling method, its params without θ); original lengths short enough that the test positions run past them
SCALINGS: list[tuple[str, dict[str, Any]]] = [
    ("rope_linear", {"factor": 4.0}),
    ("rope_dynamic_ntk", {"factor": 2.0, "original_max_position_embeddings": 64}),
    ("rope_yarn", {"factor": 8.0, "original_max_position_embeddings": 64}),
    ("rope_longrope", {"short_factor": [1.0] * 64, "long_factor": [1.5 + k / 32 for k in range(64)],
                       "original_max_position_embeddings": 64, "max_position_embeddings": 512}),
]  # fmt: skip


def reference_axes(section: list[int], layout: str, pairs: int) -> list[int]:
    """The axis of each pair written from the layouts' rules, pair by pair."""
    if layout == "chunked":
        return [0] * section[0] + [1] * section[1] + [2] * section[2]
    return [
        1 if k % 3 == 1 and k < 3 * section[1] else 2 if k % 3 == 2 and k < 3 * section[2] else 0 for k in range(pairs)
    ]


@pytest.mark.parametrize(("scaling", "scaling_params"), SCALINGS)
@pytest.mark.parametrize("model", [QWEN2_5_VL, QWEN3_VL], ids=["chunked", "interleaved"])
def test_mrope_over_a_scaled_table_turns_each_pair_by_its_axis(
    scaling: str, scaling_params: dict[str, Any], model: dict[str, Any]
) -> None:
    """M-RoPE with a scaled table = the scaled method's angles n_{a(k)}·ω_k (its ω at the request's length, its
    attention scale on cos and sin), a(k) the axis the sections give pair k; float64 reference, rotate_half."""
    params = {**model, "scaling": {"method": scaling, "params": scaling_params}}
    positions = qwen_positions()  # (71, 3), up to 2005: past every original length above
    seq_len = int(positions.max()) + 1
    x = randn(1, 2, positions.shape[0], 128, seed=11)
    spec = get_method(scaling)
    table = spec.fn(spec.parse_params({**scaling_params, "base": model["base"]}), RotaryContext(128, seq_len))
    axes = torch.tensor(reference_axes(model["mrope_section"], model.get("layout", "chunked"), 64))  # (64,)
    angle = positions[:, axes].to(torch.float64) * table.inv_freq.to(torch.float64)  # (N, 64)
    cos = torch.cat((angle.cos(), angle.cos()), -1) * table.attention_scale  # (N, 128)
    sin = torch.cat((angle.sin(), angle.sin()), -1) * table.attention_scale
    expected = x * cos + torch.cat((-x[..., 64:], x[..., :64]), -1) * sin
    torch.testing.assert_close(rotate("mrope", params, x, positions, "half"), expected, rtol=0, atol=1e-12)
    plain = rotate("mrope", model, x, positions, "half")
    assert (plain - expected).abs().max() > 1e-3  # the scaling changes the rotation at these positions


def test_mrope_scaling_carries_the_length_dependence_and_attention_scale() -> None:
    spec = get_method("mrope")
    dynamic = {**QWEN2_5_VL, "scaling": {"method": "rope_dynamic_ntk", "params": dict(SCALINGS[1][1])}}
    linear = {**QWEN2_5_VL, "scaling": {"method": "rope_linear", "params": {"factor": 4.0}}}
    assert spec.depends_on_length(dynamic)
    assert not spec.depends_on_length(linear)
    assert not spec.depends_on_length(QWEN2_5_VL)
    short = rotary_frequencies(spec, spec.parse_params(dynamic), RotaryContext(128, 32, torch.float64))
    long = rotary_frequencies(spec, spec.parse_params(dynamic), RotaryContext(128, 4096, torch.float64))
    assert isinstance(short, RotaryFrequencies)
    assert isinstance(long, RotaryFrequencies)
    assert float(long.inv_freq[-1]) < float(short.inv_freq[-1])  # dynamic NTK grows θ past 64 tokens
    yarn = {**QWEN3_VL, "scaling": {"method": "rope_yarn", "params": dict(SCALINGS[2][1])}}
    freqs = frequencies("mrope", yarn, 128)
    assert freqs.attention_scale == pytest.approx(0.1 * math.log(8.0) + 1.0)  # YaRN's mscale carried over


@pytest.mark.parametrize(
    ("scaling", "message"),
    [
        ({"method": "rope_nope", "params": {}}, "unknown method 'rope_nope'"),
        ({"method": "rope_nd", "params": {}}, "is not a 1D rotary method"),
        ({"method": "alibi", "params": {}}, "is not a 1D rotary method"),
        ({"method": "rope_linear", "params": {"factor": 4.0, "base": 1e4}}, "θ is M-RoPE's own base"),
        ({"method": "rope_linear", "params": {}}, "rope_linear param factor: Field required"),
        ({"method": "rope_linear", "params": {"factor": 4.0, "beta": 1}}, "rope_linear param beta"),
    ],
)
def test_mrope_scaling_that_cannot_be_honoured_is_refused(scaling: dict[str, Any], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        get_method("mrope").parse_params({**QWEN2_5_VL, "scaling": scaling})


def test_mrope_scaling_by_a_method_without_one_angle_per_pair_is_refused() -> None:
    with pytest.raises(InvalidInput, match="xpos does not give one frequency per pair") as refused:
        frequencies("mrope", {**QWEN2_5_VL, "scaling": {"method": "xpos", "params": {}}}, 128)
    assert refused.value.loc == ("params", "scaling", "method")


@pytest.mark.parametrize(
    ("section", "pairs", "counts"),
    [([16, 24, 24], 64, [22, 21, 21]), ([24, 20, 20], 128, [88, 20, 20]), ([24, 20, 20], 32, [11, 11, 10])],
)
def test_mrope_truncated_sections_run_as_qwen3_vl_slices_them(
    section: list[int], pairs: int, counts: list[int]
) -> None:
    """Qwen3-VL's code: t everywhere, h on slice(1, 3·s_h, 3), w on slice(2, 3·s_w, 3), cut at the last pair."""
    params = {"base": 5e6, "mrope_section": section, "layout": "interleaved", "truncated_sections": True}
    axis = frequencies("mrope", params, 2 * pairs).pair_axis
    assert axis is not None
    assert axis.tolist() == reference_axes(section, "interleaved", pairs)
    assert torch.bincount(axis, minlength=3).tolist() == counts
    with pytest.raises(InvalidInput, match="truncated_sections runs them as Qwen3-VL's code does"):
        frequencies("mrope", {**params, "truncated_sections": False}, 2 * pairs)


def test_mrope_truncated_sections_refused_for_the_chunked_layout() -> None:
    with pytest.raises(pydantic.ValidationError, match="interleaved layout only"):
        get_method("mrope").parse_params({**QWEN2_5_VL, "truncated_sections": True})
