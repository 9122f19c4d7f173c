"""ALiBi (Press et al., ICLR 2022), its slope interpolation (Al-Khateeb et al., 2023) and CROMA's 2D ALiBi,
against float64 references written here from the papers' rules and hand-computed golden values."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import BiasContext, bias_dense, get_method
from posenc.pe.alibi import alibi_slopes

INF = math.inf


def paper_slopes(num_heads: int) -> list[float]:
    """The rule of the paper's get_slopes, written out without recursion.

    Power of two: m_h = 2^(−8(h+1)/H). Otherwise, with c the largest power of two below H: the c slopes
    2^(−8(h+1)/c), then 2^(−8(2k+1)/(2c)) for k = 0 … H − c − 1 (the odd members of the 2c sequence).
    """
    if num_heads & (num_heads - 1) == 0:
        return [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]
    c = 1 << (num_heads.bit_length() - 1)
    return [2.0 ** (-8.0 * (h + 1) / c) for h in range(c)] + [
        2.0 ** (-8.0 * (2 * k + 1) / (2 * c)) for k in range(num_heads - c)
    ]


def alibi_reference(slopes: list[float], nq: int, nk: int, symmetric: bool) -> torch.Tensor:
    """−m_h·(i − j) (or −m_h·|i − j|), float64, unmasked, from plain Python."""
    rows = [[[-m * (abs(i - j) if symmetric else (i - j)) for j in range(nk)] for i in range(nq)] for m in slopes]
    return torch.tensor(rows, dtype=torch.float64)


def _bias(name: str, heads: int, nq: int, nk: int, causal: bool, **params: Any) -> torch.Tensor:
    spec = get_method(name)
    ctx = BiasContext(num_heads=heads, query_length=nq, key_length=nk, causal=causal, dtype=torch.float64)
    return bias_dense(spec, spec.parse_params(params), ctx)


# ------------------------------------------------------------------------------------------- slopes
@pytest.mark.parametrize(
    ("heads", "golden"),
    [
        (8, [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]),
        (
            12,
            [
                *(0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625),
                *(0.7071067812, 0.3535533906, 0.1767766953, 0.08838834765),
            ],
        ),
        (6, [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]),
    ],
)
def test_t1_golden_slopes(heads: int, golden: list[float]) -> None:
    assert alibi_slopes(heads) == pytest.approx(golden, rel=1e-9)


def test_t2_the_closed_form_is_wrong_for_twelve_heads() -> None:
    closed_form = [2.0 ** (-8.0 * (h + 1) / 12) for h in range(12)]
    t2 = [0.629961, 0.39685, 0.25, 0.15749, 0.099213, 0.0625, 0.039373, 0.024803, 0.015625, 0.009843]
    t2 += [0.006201, 0.003906]
    assert closed_form == pytest.approx(t2, rel=1e-4)
    assert alibi_slopes(12) != pytest.approx(closed_form, rel=1e-3)


@pytest.mark.parametrize("heads", range(1, 65))
def test_slopes_follow_the_paper_rule_for_every_head_count(heads: int) -> None:
    assert alibi_slopes(heads) == pytest.approx(paper_slopes(heads), rel=1e-15)


def test_max_bias_generalises_the_eight() -> None:
    # MPT / llama.cpp: max_bias replaces the constant 8, so max_bias = 4 gives the square roots
    assert alibi_slopes(12, max_bias=4.0) == pytest.approx([math.sqrt(m) for m in paper_slopes(12)], rel=1e-14)


# --------------------------------------------------------------------------------------------- bias
def test_t3_causal_and_symmetric_head0() -> None:
    causal = _bias("alibi", 8, 4, 4, causal=True)[0]
    symmetric = _bias("alibi", 8, 4, 4, causal=False)[0]
    t3_causal = [[0, -INF, -INF, -INF], [-0.5, 0, -INF, -INF], [-1, -0.5, 0, -INF], [-1.5, -1, -0.5, 0]]
    t3_symmetric = [[0, -0.5, -1, -1.5], [-0.5, 0, -0.5, -1], [-1, -0.5, 0, -0.5], [-1.5, -1, -0.5, 0]]
    assert torch.equal(causal, torch.tensor(t3_causal, dtype=torch.float64))
    assert torch.equal(symmetric, torch.tensor(t3_symmetric, dtype=torch.float64))


@pytest.mark.parametrize("heads", [1, 5, 12])
@pytest.mark.parametrize(("nq", "nk"), [(7, 7), (3, 9), (9, 3)])
def test_bias_matches_the_float64_reference(heads: int, nq: int, nk: int) -> None:
    slopes = paper_slopes(heads)
    symmetric = _bias("alibi", heads, nq, nk, causal=False)
    torch.testing.assert_close(symmetric, alibi_reference(slopes, nq, nk, symmetric=True), rtol=1e-15, atol=0)
    causal = _bias("alibi", heads, nq, nk, causal=True)
    visible = torch.arange(nk)[None, :] <= torch.arange(nq)[:, None]  # (Nq, Nk)
    expected = alibi_reference(slopes, nq, nk, symmetric=False)
    torch.testing.assert_close(causal[:, visible], expected[:, visible], rtol=1e-15, atol=0)


@pytest.mark.parametrize("causal", [True, False])
def test_bias_is_non_positive_and_decreases_with_distance(causal: bool) -> None:
    bias = _bias("alibi", 12, 20, 20, causal=causal)
    for i in range(20):
        # walk from the diagonal towards the past: every step costs more
        past = bias[:, i, : i + 1].flip(-1)  # (H, i + 1), distance 0, 1, ..., i
        assert bool((past <= 0).all())
        assert bool((past[:, 1:] < past[:, :-1]).all())
        if not causal:
            future = bias[:, i, i:]  # (H, 20 - i), distance 0, 1, ...
            assert bool((future[:, 1:] < future[:, :-1]).all())


def test_slope_interpolation_2048_to_8192() -> None:
    # only the slopes matter: two tokens, at distance 1, with an explicit target length
    bias = _bias("alibi", 8, 2, 2, causal=False, train_length=2048, eval_length=8192)
    assert bias[0, 1, 0].item() == -0.125
    assert bias[7, 1, 0].item() == pytest.approx(-0.00390625 / 4, rel=1e-15)


def test_slope_interpolation_defaults_to_the_current_length() -> None:
    # L = 4, N = 16: m'_h = m_h·4/16
    interpolated = _bias("alibi", 8, 16, 16, causal=False, train_length=4)
    plain = _bias("alibi", 8, 16, 16, causal=False)
    torch.testing.assert_close(interpolated, plain * 0.25, rtol=1e-15, atol=0)


def test_slope_interpolation_leaves_short_inputs_alone() -> None:
    assert torch.equal(
        _bias("alibi", 8, 16, 16, causal=False, train_length=32), _bias("alibi", 8, 16, 16, causal=False)
    )


def test_bf16_does_not_round_the_distances() -> None:
    # bf16(259) = 260: rounding the distance before the multiply gives 0.707·260 ≈ 183.8 -> 184, the true
    # 0.7071·259 = 183.14 rounds to 183 (head 8 of 12 has slope 2^-0.5).
    spec = get_method("alibi")
    ctx = BiasContext(num_heads=12, query_length=260, key_length=260, causal=True, dtype=torch.bfloat16)
    bias = bias_dense(spec, spec.parse_params({}), ctx)
    assert bias[8, 259, 0].item() == -183.0
    assert bias[8, 259, 0].item() == torch.tensor(-(2.0**-0.5) * 259, dtype=torch.bfloat16).item()


# ------------------------------------------------------------------------------------------ alibi_2d
def croma_reference(slopes: list[float], width: int, nq: int, nk: int) -> torch.Tensor:
    """−m_h·‖(r_p, c_p) − (r_q, c_q)‖₂ with p = (p // W, p mod W), float64 from plain Python."""

    def cell(p: int) -> tuple[int, int]:
        return divmod(p, width)

    rows = [[[-m * math.dist(cell(p), cell(q)) for q in range(nk)] for p in range(nq)] for m in slopes]
    return torch.tensor(rows, dtype=torch.float64)


def test_t5_croma_2x2_head0() -> None:
    bias = _bias("alibi_2d", 8, 4, 4, causal=False)[0]
    d = 0.7071067812
    golden = [[0, -0.5, -0.5, -d], [-0.5, 0, -d, -0.5], [-0.5, -d, 0, -0.5], [-d, -0.5, -0.5, 0]]
    torch.testing.assert_close(bias, torch.tensor(golden, dtype=torch.float64), rtol=0, atol=1e-10)


@pytest.mark.parametrize(("heads", "width", "nq", "nk"), [(6, 3, 9, 9), (4, 4, 8, 8), (12, 5, 7, 15)])
def test_2d_bias_matches_the_float64_reference(heads: int, width: int, nq: int, nk: int) -> None:
    bias = _bias("alibi_2d", heads, nq, nk, causal=False, grid_width=width)
    expected = croma_reference(paper_slopes(heads), width, nq, nk)
    torch.testing.assert_close(bias, expected, rtol=1e-15, atol=0)


def test_2d_default_grid_is_the_square_of_the_length() -> None:
    assert torch.equal(
        _bias("alibi_2d", 4, 16, 16, causal=False), _bias("alibi_2d", 4, 16, 16, causal=False, grid_width=4)
    )


def test_2d_is_bidirectional_and_only_masked_when_causal() -> None:
    bidirectional = _bias("alibi_2d", 4, 9, 9, causal=False)
    causal = _bias("alibi_2d", 4, 9, 9, causal=True)
    future = torch.arange(9)[None, :] > torch.arange(9)[:, None]  # (N, N)
    assert torch.equal(causal[:, ~future], bidirectional[:, ~future])
    assert bool(torch.isneginf(causal[:, future]).all())
    assert torch.equal(bidirectional, bidirectional.transpose(1, 2))


def test_2d_is_not_toeplitz_in_the_token_index() -> None:
    # tokens 2 -> 3 wrap to the next row of a 3-wide grid, tokens 0 -> 1 do not: same i - j, other bias
    bias = _bias("alibi_2d", 1, 9, 9, causal=False)
    assert bias[0, 1, 0].item() != bias[0, 3, 2].item()
    assert not get_method("alibi_2d").toeplitz


@pytest.mark.parametrize(("nq", "nk", "field"), [(10, 10, "query_length"), (16, 10, "key_length")])
def test_2d_rejects_a_length_that_is_not_a_square(nq: int, nk: int, field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        _bias("alibi_2d", 4, nq, nk, causal=False)
    assert info.value.loc == (field,)
    assert "grid_width" in info.value.msg
