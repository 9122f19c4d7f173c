"""posenc.attention against a float64 reference attention written here, and statistics by hand."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.attention import attention_maps, attention_statistics
from posenc.errors import InvalidInput
from posenc.pe import AbsoluteContext, BiasContext, bias_dense, encoding, get_method

GEN = torch.Generator().manual_seed(0)


def randn(*shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=GEN, dtype=dtype)


def reference(
    q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """softmax(q·kᵀ·scale + bias) row by row, in float64, with plain loops (slow and obvious)."""
    batch, heads, q_len, dim = q.shape
    k_len = k.shape[2]
    scale = 1 / math.sqrt(dim) if scale is None else scale
    out = torch.zeros(batch, heads, q_len, k_len, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                keys = [j for j in range(k_len) if not (causal and j > i)]
                logits = [
                    float(q[b, h, i].double() @ k[b, h, j].double()) * scale
                    + (float(bias[h, i, j]) if bias is not None else 0.0)
                    for j in keys
                ]
                top = max(logits)
                exps = [math.exp(x - top) for x in logits]
                for j, e in zip(keys, exps, strict=True):
                    out[b, h, i, j] = e / sum(exps)
    return out


def rope_by_hand(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(x.shape[2], dtype=torch.float64)[:, None] * theta[None, :]
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat((a * torch.cos(angle) - b * torch.sin(angle), a * torch.sin(angle) + b * torch.cos(angle)), -1)


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_attention_matches_the_reference(causal: bool) -> None:
    q, k = randn(2, 4, 6, 8), randn(2, 4, 6, 8)
    spec = get_method("alibi")
    params = spec.parse_params({})
    maps = attention_maps(q, k, spec=spec, params=params, causal=causal)
    bias = bias_dense(spec, params, BiasContext(num_heads=4, query_length=6, key_length=6, causal=causal))
    torch.testing.assert_close(maps.weights, reference(q, k, bias.double(), causal), rtol=1e-12, atol=1e-12)
    assert maps.weights.dtype == torch.float64


def test_bias_is_added_after_the_scale() -> None:
    q, k = randn(1, 2, 4, 8), randn(1, 2, 4, 8)
    spec = get_method("alibi")
    params = spec.parse_params({})
    maps = attention_maps(q, k, spec=spec, params=params, causal=False, scale=0.25)
    bias = bias_dense(spec, params, BiasContext(num_heads=2, query_length=4, key_length=4, causal=False))
    torch.testing.assert_close(maps.weights, reference(q, k, bias.double(), False, 0.25), rtol=1e-12, atol=1e-12)


def test_rope_attention_rotates_q_and_k() -> None:
    q, k = randn(1, 2, 5, 8), randn(1, 2, 5, 8)
    spec = get_method("rope")
    maps = attention_maps(q, k, spec=spec, params=spec.parse_params({}), causal=True)
    expected = reference(rope_by_hand(q), rope_by_hand(k), None, True)
    torch.testing.assert_close(maps.weights, expected, rtol=1e-10, atol=1e-12)


def test_absolute_encoding_is_added_to_q_and_k_of_every_head() -> None:
    q, k = randn(1, 3, 4, 6), randn(1, 3, 5, 6)
    spec = get_method("sinusoidal")
    params = spec.parse_params({})
    table = encoding(spec, params, AbsoluteContext(grid=(5,), dim=6, dtype=torch.float64))
    maps = attention_maps(q, k, spec=spec, params=params, causal=False)
    torch.testing.assert_close(maps.weights, reference(q + table[:4], k + table, None, False), rtol=1e-12, atol=1e-12)


def test_nope_changes_nothing() -> None:
    q, k = randn(2, 2, 5, 4), randn(2, 2, 5, 4)
    spec = get_method("nope")
    maps = attention_maps(q, k, spec=spec, params=spec.parse_params({}), causal=True)
    torch.testing.assert_close(maps.weights, reference(q, k, None, True), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["alibi", "rope", "sinusoidal", "nope"])
def test_causal_rows_ignore_the_future(method: str) -> None:
    q, k = randn(1, 2, 6, 8), randn(1, 2, 6, 8)
    spec = get_method(method)
    params = spec.parse_params({})
    before = attention_maps(q, k, spec=spec, params=params, causal=True).weights
    changed = k.clone()
    changed[:, :, 4:] = randn(1, 2, 2, 8) * 100  # rewrite keys 4 and 5
    after = attention_maps(q, changed, spec=spec, params=params, causal=True).weights
    torch.testing.assert_close(after[:, :, :4], before[:, :, :4], rtol=0, atol=0)  # queries 0..3 never see them
    assert bool((torch.triu(before, diagonal=1) == 0).all())
    torch.testing.assert_close(before.sum(-1), torch.ones(1, 2, 6, dtype=torch.float64))


def test_float32_inputs_compute_in_float32_and_rows_sum_to_one() -> None:
    q, k = randn(2, 2, 7, 8, dtype=torch.float32), randn(2, 2, 9, 8, dtype=torch.float32)
    spec = get_method("alibi")
    maps = attention_maps(q, k, spec=spec, params=spec.parse_params({}), causal=False)
    assert maps.weights.dtype == torch.float32
    torch.testing.assert_close(maps.weights.sum(-1), torch.ones(2, 2, 7))


def test_bfloat16_inputs_compute_in_float32() -> None:
    q = randn(1, 1, 3, 4, dtype=torch.float32).to(torch.bfloat16)
    spec = get_method("nope")
    maps = attention_maps(q, q, spec=spec, params=spec.parse_params({}), causal=True)
    assert maps.weights.dtype == torch.float32


def test_fully_masked_rows_are_zero_not_nan() -> None:
    q, k = randn(2, 1, 3, 4), randn(2, 1, 3, 4)
    padding = torch.tensor([[True, False, False], [False, False, False]])
    spec = get_method("nope")
    maps = attention_maps(q, k, spec=spec, params=spec.parse_params({}), causal=True, key_padding_mask=padding)
    assert not bool(maps.weights.isnan().any())
    assert maps.fully_masked.tolist() == [[[True, False, False]], [[False, False, False]]]
    torch.testing.assert_close(maps.weights[0, 0, 0], torch.zeros(3, dtype=torch.float64))
    assert float(maps.weights[0, 0, 1, 0]) == 0.0
    assert float(maps.weights[0, 0, 1, 1]) == 1.0


def test_odd_head_dim_under_a_rotary_method_names_q_shape() -> None:
    spec = get_method("rope")
    with pytest.raises(InvalidInput) as caught:
        attention_maps(randn(1, 1, 2, 3), randn(1, 1, 2, 3), spec=spec, params=spec.parse_params({}), causal=True)
    assert caught.value.loc == ("q", "shape")


# ------------------------------------------------------------------------------------------- statistics
def test_statistics_by_hand() -> None:
    """Two queries: row 0 puts all mass on key 0; row 1 splits it evenly between keys 0 and 1."""
    weights = torch.tensor([[[[1.0, 0.0], [0.5, 0.5]]]], dtype=torch.float64)  # (1, 1, 2, 2)
    stats = attention_statistics(weights)
    torch.testing.assert_close(stats.entropy, torch.tensor([math.log(2) / 2], dtype=torch.float64))
    torch.testing.assert_close(stats.mean_distance, torch.tensor([0.25], dtype=torch.float64))
    # Δ = 0: row 0 gives 1, row 1 gives 0.5; Δ = 1: row 1 gives 0.5 (key 0); mean over the two rows
    torch.testing.assert_close(stats.mass_by_distance, torch.tensor([[0.75, 0.25]], dtype=torch.float64))


def test_statistics_per_head_over_batch_and_rectangles() -> None:
    """Nq = 1, Nk = 3: distances |0 - j| = 0, 1, 2; mass_by_distance has max(Nq, Nk) = 3 columns."""
    weights = torch.tensor(
        [
            [[[0.2, 0.3, 0.5]], [[1.0, 0.0, 0.0]]],
            [[[0.0, 0.0, 1.0]], [[1.0, 0.0, 0.0]]],
        ],
        dtype=torch.float64,
    )  # (B=2, H=2, 1, 3)
    stats = attention_statistics(weights)
    row_entropy = -(0.2 * math.log(0.2) + 0.3 * math.log(0.3) + 0.5 * math.log(0.5))
    torch.testing.assert_close(stats.entropy, torch.tensor([row_entropy / 2, 0.0], dtype=torch.float64))
    torch.testing.assert_close(stats.mean_distance, torch.tensor([(1.3 + 2.0) / 2, 0.0], dtype=torch.float64))
    torch.testing.assert_close(
        stats.mass_by_distance, torch.tensor([[0.1, 0.15, 0.75], [1.0, 0.0, 0.0]], dtype=torch.float64)
    )


def test_statistics_leave_out_fully_masked_rows() -> None:
    weights = torch.tensor([[[[0.0, 0.0], [0.5, 0.5]]]], dtype=torch.float64)
    fully_masked = torch.tensor([[[True, False]]])
    stats = attention_statistics(weights, fully_masked)
    torch.testing.assert_close(stats.entropy, torch.tensor([math.log(2)], dtype=torch.float64))
    torch.testing.assert_close(stats.mass_by_distance, torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    torch.testing.assert_close(stats.mass_by_distance.sum(-1), torch.ones(1, dtype=torch.float64))
