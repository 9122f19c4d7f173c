"""Absolute encodings (posenc.pe.absolute) against float64 references written here from the papers'
formulas, hand-computed golden values (T7, T17), structural properties and the error cases."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from posenc.errors import InvalidInput
from posenc.pe import AbsoluteContext, encoding, get_method
from posenc.schemas.methods import Kind


def encode(
    name: str, grid: tuple[int, ...], dim: int, dtype: torch.dtype = torch.float64, **params: Any
) -> torch.Tensor:
    spec = get_method(name)
    return encoding(spec, spec.parse_params(params), AbsoluteContext(grid=grid, dim=dim, dtype=dtype))


def as_wire(table: torch.Tensor) -> dict[str, Any]:
    """A tensor as the JSON wire form a client would send (flat row-major data)."""
    return {"dtype": "float64", "shape": list(table.shape), "data": table.reshape(-1).tolist()}


# ------------------------------------------------------------------------------ references (from the papers)
def ref_sinusoidal_paper(position: int, dim: int, base: float = 10000.0) -> list[float]:
    """Vaswani 2017: PE[p, 2k] = sin(p / base^(2k/D)), PE[p, 2k+1] = cos(p / base^(2k/D))."""
    row = []
    for k in range(dim // 2):
        angle = position / base ** (2 * k / dim)
        row += [math.sin(angle), math.cos(angle)]
    return row


def ref_sinusoidal_t2t(position: int, dim: int, base: float = 10000.0) -> list[float]:
    """tensor2tensor get_timing_signal_1d: [sin(p·e^(−k·ln(base)/(D/2−1)))…, cos(…)…]."""
    half = dim // 2
    angles = [position * math.exp(-k * math.log(base) / (half - 1)) for k in range(half)]
    return [math.sin(a) for a in angles] + [math.cos(a) for a in angles]


def ref_emb1d(u: int, width: int, base: float = 10000.0) -> list[float]:
    """MAE get_1d_sincos_pos_embed_from_grid: ω_k = 1/base^(k/(width/2)); [sin(u ω)…, cos(u ω)…]."""
    omegas = [1.0 / base ** (k / (width / 2)) for k in range(width // 2)]
    return [math.sin(u * w) for w in omegas] + [math.cos(u * w) for w in omegas]


def ref_mae(height: int, width: int, dim: int) -> torch.Tensor:
    rows = [ref_emb1d(c, dim // 2) + ref_emb1d(r, dim // 2) for r in range(height) for c in range(width)]
    return torch.tensor(rows, dtype=torch.float64)  # (H·W, D), token t = r·W + c


# ----------------------------------------------------------------------------------------------- registry
@pytest.mark.parametrize(
    ("name", "learned"),
    [
        ("sinusoidal", False),
        ("nope", False),
        ("learned_absolute", True),
        ("axial", True),
        ("sinusoidal_2d", False),
        ("sinusoidal_3d", False),
    ],
)
def test_registration(name: str, learned: bool) -> None:
    spec = get_method(name)
    assert spec.kind is Kind.ABSOLUTE
    assert spec.family == "absolute"
    assert spec.learned is learned
    assert spec.conventions, "every absolute method records the conventions it follows"
    if learned:
        assert "seed" in spec.params_model.model_fields


# --------------------------------------------------------------------------------------------- sinusoidal
# fmt: off
T7_PAPER = {
    1: [0.8414709848, 0.5403023059, 0.0998334166, 0.9950041653,
        0.0099998333, 0.9999500004, 0.0009999998, 0.9999995000],
    5: [-0.9589242747, 0.2836621855, 0.4794255386, 0.8775825619,
        0.0499791693, 0.9987502604, 0.0049999792, 0.9999875000],
}
T7_T2T_POS1 = [0.8414709848, 0.0463992235, 0.0021544330, 0.0000999999998,
               0.5403023059, 0.9989229760, 0.9999976792, 0.9999999950]
T17_TOKEN5 = [0.9092974268, 0.0199986667, -0.4161468365, 0.9998000067,
              0.8414709848, 0.0099998333, 0.5403023059, 0.9999500004]
T17_TOKEN6 = [0, 0, 1, 1, 0.9092974268, 0.0199986667, -0.4161468365, 0.9998000067]
# fmt: on


def test_sinusoidal_paper_golden_t7() -> None:
    table = encode("sinusoidal", (6,), 8)
    for position, golden in T7_PAPER.items():
        torch.testing.assert_close(table[position], torch.tensor(golden, dtype=torch.float64), atol=1e-9, rtol=0)


def test_sinusoidal_t2t_golden_t7() -> None:
    table = encode("sinusoidal", (2,), 8, variant="tensor2tensor")
    torch.testing.assert_close(table[1], torch.tensor(T7_T2T_POS1, dtype=torch.float64), atol=1e-9, rtol=0)


@pytest.mark.parametrize("variant", ["paper", "tensor2tensor"])
@pytest.mark.parametrize(("dim", "base"), [(16, 10000.0), (64, 10000.0), (32, 500.0)])
def test_sinusoidal_matches_float64_reference(variant: str, dim: int, base: float) -> None:
    reference = ref_sinusoidal_paper if variant == "paper" else ref_sinusoidal_t2t
    expected = torch.tensor([reference(p, dim, base) for p in range(50)], dtype=torch.float64)
    torch.testing.assert_close(encode("sinusoidal", (50,), dim, variant=variant, base=base), expected)


def test_sinusoidal_variants_differ() -> None:
    paper = encode("sinusoidal", (10,), 16)
    t2t = encode("sinusoidal", (10,), 16, variant="tensor2tensor")
    assert not torch.allclose(paper, t2t)


def test_sinusoidal_float32_is_close_to_float64() -> None:
    float32 = encode("sinusoidal", (512,), 64, dtype=torch.float32)
    assert float32.dtype == torch.float32
    torch.testing.assert_close(float32.double(), encode("sinusoidal", (512,), 64), atol=1e-4, rtol=0)


def test_sinusoidal_bfloat16_is_the_cast_of_the_float32_table() -> None:
    bf16 = encode("sinusoidal", (300,), 32, dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
    assert torch.equal(bf16, encode("sinusoidal", (300,), 32, dtype=torch.float32).to(torch.bfloat16))


@pytest.mark.parametrize("variant", ["paper", "tensor2tensor"])
def test_sinusoidal_odd_dim_pads_one_zero_column(variant: str) -> None:
    odd = encode("sinusoidal", (20,), 9, variant=variant)
    assert odd.shape == (20, 9)
    assert torch.equal(odd[:, -1], torch.zeros(20, dtype=torch.float64))
    torch.testing.assert_close(odd[:, :8], encode("sinusoidal", (20,), 8, variant=variant))


@pytest.mark.parametrize("variant", ["paper", "tensor2tensor"])
def test_sinusoidal_rows_are_bounded_and_pairs_have_unit_norm(variant: str) -> None:
    table = encode("sinusoidal", (2000,), 32, variant=variant)
    assert bool((table.abs() <= 1.0).all())
    # every (sin, cos) pair of one frequency lies on the unit circle, so each row has norm sqrt(D/2)
    torch.testing.assert_close(table.norm(dim=-1), torch.full((2000,), math.sqrt(16), dtype=torch.float64))


def test_sinusoidal_paper_dot_product_depends_only_on_offset() -> None:
    # PE[p]·PE[p+k] = Σ_j cos(k ω_j): the same for every p
    dim = 32
    table = encode("sinusoidal", (300,), dim)
    for offset in (0, 1, 7, 100):
        dots = (table[: 300 - offset] * table[offset:]).sum(-1)  # (300 − k,)
        expected = sum(math.cos(offset / 10000 ** (2 * j / dim)) for j in range(dim // 2))
        torch.testing.assert_close(dots, torch.full_like(dots, expected))


def test_sinusoidal_rejects_a_grid() -> None:
    with pytest.raises(InvalidInput) as err:
        encode("sinusoidal", (4, 4), 8)
    assert err.value.loc == ("grid",)


# ------------------------------------------------------------------------------------------------- NoPE
@pytest.mark.parametrize("grid", [(7,), (3, 4), (2, 3, 4)])
def test_nope_is_zeros_of_the_requested_shape(grid: tuple[int, ...]) -> None:
    out = encode("nope", grid, 6, dtype=torch.float32)
    assert out.shape == (*grid, 6)
    assert out.dtype == torch.float32
    assert not bool(out.any())


# ---------------------------------------------------------------------------------------- learned absolute
def test_learned_seed_is_reproducible_and_seeds_differ() -> None:
    first = encode("learned_absolute", (64,), 16, seed=3)
    assert torch.equal(first, encode("learned_absolute", (64,), 16, seed=3))
    assert not torch.equal(first, encode("learned_absolute", (64,), 16, seed=4))


def test_learned_rows_do_not_depend_on_length_or_dtype() -> None:
    long = encode("learned_absolute", (100,), 16, seed=1)
    short = encode("learned_absolute", (10,), 16, seed=1)
    assert torch.equal(short, long[:10])
    float32 = encode("learned_absolute", (10,), 16, dtype=torch.float32, seed=1)
    assert torch.equal(float32.double(), short)  # drawn in float32 whatever the requested dtype


def test_learned_gpt2_init_statistics() -> None:
    table = encode("learned_absolute", (1024,), 64, seed=0)  # 65536 draws of N(0, 0.01)
    assert abs(table.mean().item()) < 2e-4
    assert table.std().item() == pytest.approx(0.01, rel=0.02)
    assert table.abs().max().item() > 0.03  # untruncated: 3-sigma values occur among 65536 draws


def test_learned_bert_init_is_truncated_at_two_std() -> None:
    table = encode("learned_absolute", (512,), 128, init="bert", max_positions=512, seed=0)
    assert table.abs().max().item() <= 0.04
    assert table.abs().max().item() > 0.039
    # std of N(0, σ²) truncated at ±2σ: σ·sqrt(1 − 2·2·φ(2)/(Φ(2) − Φ(−2)))
    phi = math.exp(-2.0) / math.sqrt(2 * math.pi)
    mass = math.erf(2 / math.sqrt(2))
    expected_std = 0.02 * math.sqrt(1 - 4 * phi / mass)
    assert table.std().item() == pytest.approx(expected_std, rel=0.02)


def test_learned_supplied_table_round_trips() -> None:
    seeded = encode("learned_absolute", (12,), 4, max_positions=12, seed=7)
    supplied = encode("learned_absolute", (12,), 4, max_positions=12, table=as_wire(seeded))
    assert torch.equal(supplied, seeded)
    prefix = encode("learned_absolute", (5,), 4, max_positions=12, table=as_wire(seeded))
    assert torch.equal(prefix, seeded[:5])


def test_learned_supplied_table_shape_mismatch() -> None:
    table = torch.zeros(10, 4, dtype=torch.float64)
    with pytest.raises(InvalidInput) as err:
        encode("learned_absolute", (5,), 4, max_positions=12, table=as_wire(table))
    assert err.value.loc == ("params", "table", "shape")
    with pytest.raises(InvalidInput) as err:
        encode("learned_absolute", (5,), 6, max_positions=10, table=as_wire(table))
    assert err.value.loc == ("params", "table", "shape")


def test_learned_positions_past_the_table_are_an_error() -> None:
    assert encode("learned_absolute", (16,), 4, max_positions=16).shape == (16, 4)
    with pytest.raises(InvalidInput) as err:
        encode("learned_absolute", (17,), 4, max_positions=16)
    assert err.value.loc == ("length",)
    assert "16" in err.value.msg


def test_learned_default_max_positions_is_gpt2_n_ctx() -> None:
    assert encode("learned_absolute", (1024,), 2).shape == (1024, 2)
    with pytest.raises(InvalidInput):
        encode("learned_absolute", (1025,), 2)


def test_learned_rejects_a_grid() -> None:
    with pytest.raises(InvalidInput) as err:
        encode("learned_absolute", (4, 4), 8)
    assert err.value.loc == ("grid",)


# ------------------------------------------------------------------------------------------------- axial
def test_axial_rows_follow_the_mixed_radix_rule() -> None:
    first = torch.arange(3 * 2, dtype=torch.float64).reshape(3, 2)  # E1 (n1=3, d1=2)
    second = 100 + torch.arange(4 * 3, dtype=torch.float64).reshape(4, 3)  # E2 (n2=4, d2=3)
    out = encode("axial", (12,), 5, shape=[3, 4], dims=[2, 3], tables=[as_wire(first), as_wire(second)])
    for p in range(12):
        expected = torch.cat((first[p // 4], second[p % 4]))  # row-major, first factor slow
        assert torch.equal(out[p], expected), p


def test_axial_three_factors() -> None:
    generator = torch.Generator().manual_seed(0)
    tables = [torch.randn(n, d, dtype=torch.float64, generator=generator) for n, d in ((2, 1), (3, 2), (4, 3))]
    out = encode("axial", (24,), 6, shape=[2, 3, 4], dims=[1, 2, 3], tables=[as_wire(t) for t in tables])
    for p in range(24):
        digits = (p // 12, (p // 4) % 3, p % 4)
        expected = torch.cat([t[digit] for t, digit in zip(tables, digits, strict=True)])
        assert torch.equal(out[p], expected), p


def test_axial_seeded_tables_are_reproducible_and_factored() -> None:
    out = encode("axial", (64,), 8, shape=[8, 8], seed=5)
    assert torch.equal(out, encode("axial", (64,), 8, shape=[8, 8], seed=5))
    assert not torch.equal(out, encode("axial", (64,), 8, shape=[8, 8], seed=6))
    grid = out.reshape(8, 8, 8)  # (n1, n2, D): position p = r·8 + c
    # default dims split D evenly: the first 4 features depend on r only, the last 4 on c only
    assert torch.equal(grid[:, :, :4], grid[:, :1, :4].expand(8, 8, 4))
    assert torch.equal(grid[:, :, 4:], grid[:1, :, 4:].expand(8, 8, 4))
    assert grid[:, 0, :4].std().item() > 0.3  # N(0, 1): unit scale, not the 0.02 of other tables


def test_axial_default_shape_is_hf() -> None:
    assert encode("axial", (4096,), 16, dtype=torch.float32).shape == (4096, 16)
    with pytest.raises(InvalidInput) as err:
        encode("axial", (4097,), 16)
    assert err.value.loc == ("length",)


def test_axial_errors() -> None:
    with pytest.raises(InvalidInput) as err:
        encode("axial", (10,), 8, shape=[4, 4], dims=[2, 3])
    assert err.value.loc == ("params", "dims")
    tables = [
        as_wire(torch.zeros(4, 4, dtype=torch.float64)),
        as_wire(torch.zeros(3, 4, dtype=torch.float64)),
    ]
    with pytest.raises(InvalidInput) as err:
        encode("axial", (10,), 8, shape=[4, 4], tables=tables)
    assert err.value.loc == ("params", "tables", 1, "shape")
    with pytest.raises(ValidationError):
        encode("axial", (10,), 8, shape=[4, 4], dims=[2, 3, 3])
    with pytest.raises(InvalidInput) as err:
        encode("axial", (4, 4), 8)
    assert err.value.loc == ("grid",)


# ---------------------------------------------------------------------------------------------------- 2D
def test_sinusoidal_2d_golden_t17() -> None:
    tokens = encode("sinusoidal_2d", (3, 3), 8).reshape(9, 8)  # (H·W, D): token t = r·W + c
    # token 5 = (r=1, c=2): the first half encodes the column; token 6 = (r=2, c=0)
    torch.testing.assert_close(tokens[5], torch.tensor(T17_TOKEN5, dtype=torch.float64), atol=1e-9, rtol=0)
    torch.testing.assert_close(tokens[6], torch.tensor(T17_TOKEN6, dtype=torch.float64), atol=1e-9, rtol=0)


@pytest.mark.parametrize(("height", "width", "dim"), [(3, 5, 16), (4, 4, 64), (1, 7, 12)])
def test_sinusoidal_2d_matches_float64_reference(height: int, width: int, dim: int) -> None:
    out = encode("sinusoidal_2d", (height, width), dim)
    assert out.shape == (height, width, dim)
    torch.testing.assert_close(out.reshape(height * width, dim), ref_mae(height, width, dim))


def test_sinusoidal_2d_factor_structure_and_row_first_option() -> None:
    out = encode("sinusoidal_2d", (4, 6), 16)  # (H, W, D)
    # the first half depends on the column only, the second half on the row only
    assert torch.equal(out[:, :, :8], out[:1, :, :8].expand(4, 6, 8))
    assert torch.equal(out[:, :, 8:], out[:, :1, 8:].expand(4, 6, 8))
    row_first = encode("sinusoidal_2d", (4, 6), 16, first_half="row")
    assert torch.equal(row_first, torch.cat((out[..., 8:], out[..., :8]), dim=-1))


@pytest.mark.parametrize("dim", [6, 10, 3])
def test_sinusoidal_2d_needs_dim_divisible_by_four(dim: int) -> None:
    with pytest.raises(InvalidInput) as err:
        encode("sinusoidal_2d", (3, 3), dim)
    assert err.value.loc == ("dim",)


@pytest.mark.parametrize("grid", [(9,), (2, 3, 3)])
def test_sinusoidal_2d_needs_a_two_axis_grid(grid: tuple[int, ...]) -> None:
    with pytest.raises(InvalidInput) as err:
        encode("sinusoidal_2d", grid, 8)
    assert err.value.loc == ("grid",)
    assert "[H, W]" in err.value.msg


# ---------------------------------------------------------------------------------------------------- 3D
def test_sinusoidal_3d_concat_matches_float64_reference() -> None:
    frames, height, width, dims = 3, 4, 5, (4, 6, 8)
    out = encode("sinusoidal_3d", (frames, height, width), 18, dims=list(dims))
    assert out.shape == (frames, height, width, 18)
    for t in range(frames):
        for r in range(height):
            for c in range(width):
                expected = ref_emb1d(t, dims[0]) + ref_emb1d(r, dims[1]) + ref_emb1d(c, dims[2])
                torch.testing.assert_close(out[t, r, c], torch.tensor(expected, dtype=torch.float64))


def test_sinusoidal_3d_default_dims_split_pairs_evenly() -> None:
    out = encode("sinusoidal_3d", (2, 3, 4), 8)  # 4 pairs -> widths (4, 2, 2)
    expected = torch.tensor(ref_emb1d(1, 4) + ref_emb1d(2, 2) + ref_emb1d(3, 2), dtype=torch.float64)
    torch.testing.assert_close(out[1, 2, 3], expected)
    even = encode("sinusoidal_3d", (2, 2, 2), 96)  # ViViT: D/3 per axis
    torch.testing.assert_close(
        even[1, 0, 1],
        torch.tensor(ref_emb1d(1, 32) + ref_emb1d(0, 32) + ref_emb1d(1, 32), dtype=torch.float64),
    )


def test_sinusoidal_3d_sum_is_the_sum_of_three_full_width_factors() -> None:
    out = encode("sinusoidal_3d", (2, 3, 4), 12, combine="sum")
    for t, r, c in ((0, 0, 0), (1, 2, 3), (1, 0, 2)):
        expected = [a + b + d for a, b, d in zip(ref_emb1d(t, 12), ref_emb1d(r, 12), ref_emb1d(c, 12), strict=True)]
        torch.testing.assert_close(out[t, r, c], torch.tensor(expected, dtype=torch.float64))


def test_sinusoidal_3d_factor_structure() -> None:
    out = encode("sinusoidal_3d", (3, 4, 5), 12, dims=[4, 4, 4])  # (T, H, W, D)
    assert torch.equal(out[..., :4], out[:, :1, :1, :4].expand(3, 4, 5, 4))  # time block: t only
    assert torch.equal(out[..., 4:8], out[:1, :, :1, 4:8].expand(3, 4, 5, 4))  # row block: r only
    assert torch.equal(out[..., 8:], out[:1, :1, :, 8:].expand(3, 4, 5, 4))  # column block: c only


def test_sinusoidal_3d_errors() -> None:
    with pytest.raises(InvalidInput) as err:
        encode("sinusoidal_3d", (2, 2, 2), 7)
    assert err.value.loc == ("dim",)
    with pytest.raises(InvalidInput) as err:
        encode("sinusoidal_3d", (2, 2, 2), 12, dims=[4, 4, 2])
    assert err.value.loc == ("params", "dims")
    with pytest.raises(InvalidInput) as err:
        encode("sinusoidal_3d", (2, 2, 2), 4)  # two pairs cannot cover three axes
    assert err.value.loc == ("dim",)
    with pytest.raises(InvalidInput) as err:
        encode("sinusoidal_3d", (4, 4), 12)
    assert err.value.loc == ("grid",)
    with pytest.raises(ValidationError):
        encode("sinusoidal_3d", (2, 2, 2), 12, dims=[3, 4, 5])  # odd widths cannot hold sin-cos pairs
    with pytest.raises(ValidationError):
        encode("sinusoidal_3d", (2, 2, 2), 12, combine="sum", dims=[4, 4, 4])


# ------------------------------------------------------------------------------- learned_init (training hook)
def test_learned_absolute_init_is_the_seeded_table_and_trains() -> None:
    spec = get_method("learned_absolute")
    params = spec.parse_params({"max_positions": 8, "seed": 2})
    ctx = AbsoluteContext(grid=(6,), dim=4, dtype=torch.float32)
    assert spec.learned_init is not None
    initial = spec.learned_init(params, ctx)
    assert set(initial) == {"table"}
    assert initial["table"].shape == (8, 4)
    assert torch.equal(encoding(spec, params, ctx), initial["table"][:6])
    weight = torch.nn.Parameter(initial["table"])
    out = encoding(spec, params.model_copy(update={"table": weight}), ctx)
    (grad,) = torch.autograd.grad(out.sum(), [weight])
    expected_grad = torch.zeros(8, 4)
    expected_grad[:6] = 1.0  # rows past N get no gradient
    assert torch.equal(grad, expected_grad)


def test_axial_init_is_the_seeded_tables_and_trains() -> None:
    spec = get_method("axial")
    params = spec.parse_params({"shape": [3, 4], "dims": [2, 3], "seed": 9})
    ctx = AbsoluteContext(grid=(10,), dim=5, dtype=torch.float32)
    assert spec.learned_init is not None
    initial = spec.learned_init(params, ctx)
    assert [tuple(t.shape) for t in initial["tables"]] == [(3, 2), (4, 3)]
    weights = [torch.nn.Parameter(t) for t in initial["tables"]]
    out = encoding(spec, params.model_copy(update={"tables": weights}), ctx)
    assert torch.equal(out, encoding(spec, params, ctx))
    first_grad, second_grad = torch.autograd.grad(out.sum(), weights)
    # E1 row r serves the p with p // 4 == r (4, 4, 2 of them for N = 10); E2 row c the p with p % 4 == c
    torch.testing.assert_close(first_grad, torch.tensor([4.0, 4.0, 2.0])[:, None].expand(3, 2))
    torch.testing.assert_close(second_grad, torch.tensor([3.0, 3.0, 2.0, 2.0])[:, None].expand(4, 3))
