"""Stick-breaking attention (Tan et al., 2024): the hand-computed T20 golden, a float64 reference written
here from the product formula A_ij = β_ij Π_{j<k<i} (1 − β_ik), and the numerics of long rows."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch

import posenc.pe.stick_breaking  # noqa: F401  (registers the method)
from posenc.errors import InvalidInput
from posenc.pe.appliers import Layer, build_applier, future_mask
from posenc.pe.registry import get_method
from posenc.pe.types import AttentionWeights, LayerInputs, ScoreContext
from posenc.schemas.methods import Kind

SPEC = get_method("stick_breaking")


def context(heads: int, q_len: int, k_len: int, head_dim: int, dtype: torch.dtype, offset: int = 0) -> ScoreContext:
    return ScoreContext(
        num_heads=heads,
        query_length=q_len,
        key_length=k_len,
        head_dim=head_dim,
        causal=True,
        model_dim=heads * head_dim,
        dtype=dtype,
        query_offset=offset,
    )


def run(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None, offset: int = 0, **params: object
) -> AttentionWeights:
    """The method on q (B, H, Nq, D), k (B, H, Nk, D), queries at arange(Nq) + offset, keys at arange(Nk)."""
    _, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    q_pos = torch.arange(q_len) + offset
    k_pos = torch.arange(k_len)
    if mask is None:
        mask = torch.zeros(1, 1, q_len, k_len, dtype=torch.bool)
    inputs = LayerInputs(q=q, k=k, q_pos=q_pos, k_pos=k_pos, mask=mask)
    ctx = context(heads, q_len, k_len, head_dim, q.dtype, offset)
    result: AttentionWeights = SPEC.fn(SPEC.parse_params(dict(params)), inputs, ctx)
    return result


def logits_as_qk(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k with q_i·k_j / sqrt(D) = z_ij: k = the identity (D = Nk), q = z·sqrt(D); z (Nq, Nk) -> (1, 1, ., .)."""
    dim = z.shape[1]
    q = (z * math.sqrt(dim))[None, None]  # (1, 1, Nq, D)
    k = torch.eye(dim, dtype=z.dtype)[None, None]  # (1, 1, Nk, D)
    return q, k


def test_registered_as_a_causal_attention_method_without_parameters() -> None:
    assert SPEC.kind is Kind.ATTENTION
    assert SPEC.causal_only
    assert not SPEC.learned
    params = SPEC.parse_params({})
    assert params.model_dump() == {"attend_current": False, "leftover": "current"}
    with pytest.raises(pydantic.ValidationError):
        SPEC.parse_params({"leftover": "keep"})


def test_t20_golden_weights_and_remainders() -> None:
    z = torch.tensor(
        [[0.0, 0, 0, 0], [1.0, 0, 0, 0], [0.5, -1.0, 0, 0], [2.0, 0.0, 1.0, 0]], dtype=torch.float64
    )  # (Nq, Nk): row i, keys j < i (the rest is ignored)
    q, k = logits_as_qk(z)
    result = run(q, k)
    expected = torch.tensor(
        [
            [0, 0, 0, 0],
            [0.7310585786, 0, 0, 0],
            [0.4550542339, 0.2689414214, 0, 0],
            [0.1184414090, 0.1344707107, 0.7310585786, 0],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(result.weights[0, 0], expected, rtol=0, atol=1e-9)
    assert result.leftover is not None
    remainders = torch.tensor([1, 0.2689414214, 0.2760043447, 0.0160293016], dtype=torch.float64)
    torch.testing.assert_close(result.leftover[0, 0], remainders, rtol=0, atol=1e-9)
    assert result.leftover_to_current


def product_reference(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, offset: int, attend_current: bool
) -> tuple[list[list[list[list[float]]]], list[list[list[float]]]]:
    """A_ij = β_ij Π_{k: j < k < i, unmasked} (1 − β_ik) and 1 − Σ_j A_ij, Python floats, loops over i, j, k."""
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    weights = [[[[0.0] * k_len for _ in range(q_len)] for _ in range(heads)] for _ in range(batch)]
    leftovers = [[[0.0] * q_len for _ in range(heads)] for _ in range(batch)]
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                pos = i + offset
                allowed = [
                    j
                    for j in range(k_len)
                    if (j < pos or (attend_current and j == pos)) and not bool(mask[min(b, mask.shape[0] - 1), 0, i, j])
                ]
                beta = {
                    j: 1.0 / (1.0 + math.exp(-float(q[b, h, i] @ k[b, h, j]) / math.sqrt(head_dim))) for j in allowed
                }
                for j in allowed:
                    value = beta[j]
                    for later in allowed:
                        if later > j:
                            value *= 1.0 - beta[later]
                    weights[b][h][i][j] = value
                leftovers[b][h][i] = 1.0 - sum(weights[b][h][i])
    return weights, leftovers


@pytest.mark.parametrize("attend_current", [False, True])
def test_matches_the_product_formula_in_float64(attend_current: bool) -> None:
    generator = torch.Generator().manual_seed(3)
    batch, heads, q_len, k_len, dim, offset = 2, 3, 5, 7, 4, 2
    q = torch.randn(batch, heads, q_len, dim, generator=generator, dtype=torch.float64) * 2
    k = torch.randn(batch, heads, k_len, dim, generator=generator, dtype=torch.float64) * 2
    q_pos, k_pos = torch.arange(q_len) + offset, torch.arange(k_len)
    mask = future_mask(q_pos, k_pos).repeat(batch, 1, 1, 1)  # (B, 1, Nq, Nk)
    mask[0, :, :, 1] = True  # a padded key in the middle: weight 0, and it leaves the stick whole
    mask[1, :, :, 0] = True
    result = run(q, k, mask, offset, attend_current=attend_current)
    weights, leftovers = product_reference(q, k, mask, offset, attend_current)
    torch.testing.assert_close(result.weights, torch.tensor(weights, dtype=torch.float64), rtol=0, atol=1e-10)
    assert result.leftover is not None
    torch.testing.assert_close(result.leftover, torch.tensor(leftovers, dtype=torch.float64), rtol=0, atol=1e-10)
    assert bool((result.weights[mask.expand_as(result.weights)] == 0).all())


def test_long_rows_with_large_logits_stay_finite_and_sum_to_one_in_float32() -> None:
    n = 512
    generator = torch.Generator().manual_seed(0)
    signs = torch.randint(0, 2, (n, n), generator=generator).to(torch.float64) * 2 - 1
    z = signs * (50 + torch.rand(n, n, generator=generator, dtype=torch.float64))  # (N, N): ±50..51
    z[:, ::7] = torch.randn(n, (n + 6) // 7, generator=generator, dtype=torch.float64)  # some moderate keys
    q, k = logits_as_qk(z)
    mask = future_mask(torch.arange(n), torch.arange(n))
    single = run(q.float(), k.float(), mask)
    double = run(q, k, mask)
    assert single.weights.dtype == torch.float32
    assert bool(torch.isfinite(single.weights).all())
    assert single.leftover is not None
    assert double.leftover is not None
    assert bool(torch.isfinite(single.leftover).all())
    totals = single.weights.double().sum(dim=-1) + single.leftover.double()  # (1, 1, N)
    torch.testing.assert_close(totals, torch.ones_like(totals), rtol=0, atol=1e-5)
    torch.testing.assert_close(single.weights.double(), double.weights, rtol=0, atol=1e-5)
    torch.testing.assert_close(single.leftover.double(), double.leftover, rtol=0, atol=1e-5)


@pytest.mark.parametrize("attend_current", [False, True])
def test_rows_ignore_keys_at_and_after_the_query_without_a_mask(attend_current: bool) -> None:
    generator = torch.Generator().manual_seed(5)
    n, dim = 6, 4
    q = torch.randn(1, 2, n, dim, generator=generator, dtype=torch.float64)
    k = torch.randn(1, 2, n, dim, generator=generator, dtype=torch.float64)
    before = run(q, k, attend_current=attend_current)  # no mask: the method excludes the future itself
    for i in range(n):
        first_ignored = i + 1 if attend_current else i
        changed = k.clone()
        changed[:, :, first_ignored:] = torch.randn(1, 2, n - first_ignored, dim, generator=generator) * 10
        after = run(q, changed, attend_current=attend_current)
        torch.testing.assert_close(after.weights[:, :, i], before.weights[:, :, i], rtol=0, atol=0)
        assert before.leftover is not None
        assert after.leftover is not None
        torch.testing.assert_close(after.leftover[:, :, i], before.leftover[:, :, i], rtol=0, atol=0)
        assert bool((before.weights[:, :, i, first_ignored:] == 0).all())
    changed = k.clone()
    changed[:, :, 2] += 1.0  # a past key does change the later rows
    assert not torch.equal(run(q, changed, attend_current=attend_current).weights[:, :, 4], before.weights[:, :, 4])


def test_a_fully_masked_row_gives_zeros_and_leftover_one() -> None:
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, 1, 4, 2, generator=generator, dtype=torch.float32) * 30
    k = torch.randn(1, 1, 4, 2, generator=generator, dtype=torch.float32) * 30
    mask = future_mask(torch.arange(4), torch.arange(4)).clone()
    mask[:, :, 3] = True  # every key of query 3
    result = run(q, k, mask, attend_current=True)
    assert result.leftover is not None
    assert bool((result.weights[0, 0, 3] == 0).all())
    assert float(result.leftover[0, 0, 3]) == 1.0
    assert not bool(torch.isnan(result.weights).any())
    # the first query has no key before it when it may not attend itself
    first = run(q, k, future_mask(torch.arange(4), torch.arange(4)))
    assert first.leftover is not None
    assert bool((first.weights[0, 0, 0] == 0).all())
    assert float(first.leftover[0, 0, 0]) == 1.0


def test_the_leftover_goes_to_the_own_value_or_is_dropped() -> None:
    generator = torch.Generator().manual_seed(7)
    heads, n, dim = 2, 5, 4
    q = torch.randn(1, heads, n, dim, generator=generator, dtype=torch.float64)
    k = torch.randn(1, heads, n, dim, generator=generator, dtype=torch.float64)
    v = torch.randn(1, heads, n, 3, generator=generator, dtype=torch.float64)
    pos = torch.arange(n)
    mask = future_mask(pos, pos)
    layer = Layer(num_heads=heads, head_dim=dim, causal=True, dtype=torch.float64)
    for choice, own in (("current", True), ("drop", False)):
        params = SPEC.parse_params({"leftover": choice})
        attended = build_applier(SPEC, params, layer).attend(q, k, v, q_pos=pos, k_pos=pos, mask=mask)
        reference = run(q, k, mask, leftover=choice)
        assert reference.leftover_to_current is own
        assert reference.leftover is not None
        expected = reference.weights @ v  # (1, H, N, 3)
        if own:
            expected = expected + reference.leftover[..., None] * v
        assert attended.output is not None
        torch.testing.assert_close(attended.output, expected, rtol=0, atol=1e-12)
        assert attended.leftover is not None
        torch.testing.assert_close(attended.leftover, reference.leftover, rtol=0, atol=0)


def test_low_precision_contexts_get_weights_in_their_dtype() -> None:
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(1, 1, 8, 4, generator=generator).bfloat16()
    k = torch.randn(1, 1, 8, 4, generator=generator).bfloat16()
    result = run(q, k)
    reference = run(q.double(), k.double())
    assert result.weights.dtype == torch.bfloat16
    torch.testing.assert_close(result.weights.double(), reference.weights, rtol=0, atol=1e-2)


def test_invalid_inputs_name_their_field() -> None:
    q = torch.zeros(1, 1, 3, 2)
    k = torch.zeros(1, 1, 3, 2)
    mask = torch.zeros(1, 1, 3, 3, dtype=torch.bool)
    ctx = context(1, 3, 3, 2, torch.float32)
    params = SPEC.parse_params({})
    unsorted = LayerInputs(q=q, k=k, q_pos=torch.arange(3), k_pos=torch.tensor([0, 2, 1]), mask=mask)
    with pytest.raises(InvalidInput) as caught:
        SPEC.fn(params, unsorted, ctx)
    assert caught.value.loc == ("k_pos",)
    wrong_heads = LayerInputs(q=q, k=k, q_pos=torch.arange(3), k_pos=torch.arange(3), mask=mask)
    with pytest.raises(InvalidInput) as caught:
        SPEC.fn(params, wrong_heads, context(2, 3, 3, 2, torch.float32))
    assert caught.value.loc == ("q", "shape")
    bad_mask = LayerInputs(q=q, k=k, q_pos=torch.arange(3), k_pos=torch.arange(3), mask=mask[..., :2])
    with pytest.raises(InvalidInput) as caught:
        SPEC.fn(params, bad_mask, ctx)
    assert caught.value.loc == ("mask", "shape")
