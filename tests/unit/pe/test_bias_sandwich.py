"""Sandwich (Chi et al., ACL 2023): hand-computed T15 goldens for both public forms, with the head
factor H/(8(h+1)), and a float64 reference of b(|i − j|)·H/(8(h+1)) written here from the formula."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

from posenc.pe import BiasContext, bias_dense, get_method

T15_NEMO = [0, -0.6234706492, -2.2799911793, -4.4229790011, -6.4119948996, -7.7796915000]
T15_ATTENTION_GYM = [32, 30.9168316616, 28.3038620041, 25.5870285473, 23.9343615595, 23.5039708104]


def _bias(heads: int, nq: int, nk: int, causal: bool = False, **params: Any) -> torch.Tensor:
    spec = get_method("sandwich")
    ctx = BiasContext(num_heads=heads, query_length=nq, key_length=nk, causal=causal, dtype=torch.float64)
    return bias_dense(spec, spec.parse_params(params), ctx)


@pytest.mark.parametrize(("k_start", "golden"), [(1, T15_NEMO), (0, T15_ATTENTION_GYM)])
@pytest.mark.parametrize(("head", "factor"), [(0, 1.0), (7, 1.0 / 8.0)])
def test_t15_goldens_with_head_factors(k_start: int, golden: list[float], head: int, factor: float) -> None:
    # H = 8: head 0 has factor 8/8 = 1, head 7 has 8/64 = 1/8. Six queries against one key: |i − j| = i.
    bias = _bias(8, 6, 1, d_bar=64, k_start=k_start)
    expected = [value * factor for value in golden]
    assert bias[head, :, 0].tolist() == pytest.approx(expected, rel=1e-9, abs=1e-9)


def sandwich_reference(heads: int, nq: int, nk: int, d_bar: int, k_start: int) -> torch.Tensor:
    """Σ_k cos(|i − j|·10000^(−2k/d̄)) over d̄/2 terms from k_start (NeMo: minus d̄/2), times H/(8(h+1))."""

    def profile(distance: int) -> float:
        terms = range(k_start, k_start + d_bar // 2)
        total = math.fsum(math.cos(distance * 10000.0 ** (-2.0 * k / d_bar)) for k in terms)
        return total - d_bar / 2 if k_start == 1 else total

    rows = [
        [[profile(abs(i - j)) * heads / (8.0 * (h + 1)) for j in range(nk)] for i in range(nq)] for h in range(heads)
    ]
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("k_start", [0, 1])
@pytest.mark.parametrize(("nq", "nk"), [(12, 12), (5, 30), (30, 5)])
def test_bias_matches_the_float64_reference(k_start: int, nq: int, nk: int) -> None:
    bias = _bias(6, nq, nk, k_start=k_start)  # default d̄ = 128
    torch.testing.assert_close(bias, sandwich_reference(6, nq, nk, 128, k_start), rtol=1e-12, atol=1e-12)


def test_defaults_are_the_attention_gym_form_with_d_bar_128() -> None:
    # b(0) = d̄/2 = 64 terms of cos(0); head 0 of H = 8 has factor 1
    assert _bias(8, 1, 1)[0, 0, 0].item() == 64.0
    assert torch.equal(_bias(8, 9, 9), _bias(8, 9, 9, d_bar=128, k_start=0, base=10000.0))


def test_the_two_forms_differ_by_more_than_a_constant() -> None:
    # only the −d̄/2 shift would be harmless under softmax; the index origin changes the shape too:
    # the forms differ by (cos(Δ) − cos(Δ·10000^−1) + d̄/2)·H/8, which swings with Δ (H = 8 here)
    difference = _bias(8, 20, 1, k_start=0)[0, :, 0] - _bias(8, 20, 1, k_start=1)[0, :, 0]
    expected = [math.cos(d) - math.cos(d * 1e-4) + 64 for d in range(20)]
    assert difference.tolist() == pytest.approx(expected, rel=1e-12)
    assert difference.max().item() - difference.min().item() > 1.0


def test_causal_form_agrees_on_the_visible_keys() -> None:
    causal = _bias(4, 10, 10, causal=True)
    visible = torch.arange(10)[None, :] <= torch.arange(10)[:, None]  # (N, N)
    expected = sandwich_reference(4, 10, 10, 128, 0)
    torch.testing.assert_close(causal[:, visible], expected[:, visible], rtol=1e-12, atol=1e-12)


def test_a_long_row_decays_with_distance_on_average() -> None:
    row = _bias(1, 1, 2000)[0, 0]  # b(0 … 1999), attention-gym form
    assert row[0].item() > row[:10].mean().item() > row[100:200].mean().item() > row[1000:].mean().item()


@pytest.mark.parametrize("params", [{"d_bar": 63}, {"d_bar": 0}, {"k_start": 2}, {"base": 1.0}])
def test_invalid_parameters_are_rejected(params: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        get_method("sandwich").parse_params(params)
