"""DA-Transformer (Wu, Wu, Huang, NAACL 2021): a float64 reference written here from the paper's formula
(explicit loops, R̂ = (1 + e^v) / (1 + e^(v − w|i − j|))), row normalisation, empty ReLU rows, and the
large-v numerics."""

from __future__ import annotations

import math

import pytest
import torch

import posenc.pe.da_transformer  # noqa: F401  (registers the method)
from posenc.errors import InvalidInput
from posenc.pe.appliers import future_mask
from posenc.pe.da_transformer import log_rescale
from posenc.pe.registry import get_method
from posenc.pe.types import AttentionWeights, LayerInputs, ScoreContext
from posenc.schemas.methods import Kind

SPEC = get_method("da_transformer")


def per_head(values: list[float]) -> dict[str, object]:
    """A (H,) float64 tensor as the params take it."""
    return {"dtype": "float64", "shape": [len(values)], "data": values}


def context(heads: int, q_len: int, k_len: int, head_dim: int, dtype: torch.dtype, causal: bool) -> ScoreContext:
    return ScoreContext(
        num_heads=heads,
        query_length=q_len,
        key_length=k_len,
        head_dim=head_dim,
        causal=causal,
        model_dim=heads * head_dim,
        dtype=dtype,
    )


def run(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    offset: int = 0,
    causal: bool = False,
    **params: object,
) -> torch.Tensor:
    """The weights (B, H, Nq, Nk) for q (B, H, Nq, D), k (B, H, Nk, D), queries at arange(Nq) + offset."""
    _, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    if mask is None:
        mask = torch.zeros(1, 1, q_len, k_len, dtype=torch.bool)
    inputs = LayerInputs(q=q, k=k, q_pos=torch.arange(q_len) + offset, k_pos=torch.arange(k_len), mask=mask)
    result: AttentionWeights = SPEC.fn(
        SPEC.parse_params(dict(params)), inputs, context(heads, q_len, k_len, head_dim, q.dtype, causal)
    )
    assert result.leftover is None
    return result.weights


def loop_reference(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, offset: int, w: list[float], v: list[float], eps: float
) -> list[list[list[list[float]]]]:
    """A_ij = Â_ij / (Σ_j Â_ij + eps), Â_ij = max(q·k, 0)(1 + e^v)/(1 + e^(v − w|i − j|))/sqrt(d), loops."""
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    out = [[[[0.0] * k_len for _ in range(q_len)] for _ in range(heads)] for _ in range(batch)]
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                hats = []
                for j in range(k_len):
                    if bool(mask[min(b, mask.shape[0] - 1), 0, i, j]):
                        hats.append(0.0)
                        continue
                    distance = abs(i + offset - j)
                    rescale = (1.0 + math.exp(v[h])) / (1.0 + math.exp(v[h] - w[h] * distance))
                    hats.append(max(float(q[b, h, i] @ k[b, h, j]), 0.0) * rescale / math.sqrt(head_dim))
                total = sum(hats)
                out[b][h][i] = [hat / (total + eps) if total + eps > 0 else 0.0 for hat in hats]
    return out


def test_registered_as_a_learned_per_layer_attention_method() -> None:
    assert SPEC.kind is Kind.ATTENTION
    assert SPEC.learned
    assert SPEC.per_layer
    assert not SPEC.causal_only
    assert SPEC.learned_init is not None
    ctx = context(3, 4, 4, 2, torch.float32, causal=False)
    initial = SPEC.learned_init(SPEC.parse_params({"w_init": -0.5, "v_init": 2.0}), ctx)
    assert set(initial) == {"w", "v"}
    assert initial["w"].tolist() == [-0.5] * 3
    assert initial["v"].tolist() == [2.0] * 3


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("eps", [1e-6, 0.0, 0.5])
def test_matches_the_loop_reference_in_float64(causal: bool, eps: float) -> None:
    generator = torch.Generator().manual_seed(11)
    batch, heads, q_len, k_len, dim, offset = 2, 3, 4, 6, 4, 2
    q = torch.randn(batch, heads, q_len, dim, generator=generator, dtype=torch.float64)
    k = torch.randn(batch, heads, k_len, dim, generator=generator, dtype=torch.float64)
    w, v = [0.7, -1.3, 0.0], [0.5, -2.0, 3.0]
    q_pos, k_pos = torch.arange(q_len) + offset, torch.arange(k_len)
    mask = torch.zeros(batch, 1, q_len, k_len, dtype=torch.bool)
    if causal:
        mask = mask | future_mask(q_pos, k_pos)
    mask[1, :, :, 0] = True  # padding
    got = run(q, k, mask, offset=offset, causal=causal, w=per_head(w), v=per_head(v), eps=eps)
    expected = torch.tensor(loop_reference(q, k, mask, offset, w, v, eps), dtype=torch.float64)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    assert bool((got[mask.expand_as(got)] == 0).all())


def test_default_weights_are_the_init_values() -> None:
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, 5, 4, generator=generator, dtype=torch.float64)
    k = torch.randn(1, 2, 5, 4, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(run(q, k), run(q, k, w=per_head([1.0, 1.0]), v=per_head([0.0, 0.0])), rtol=0, atol=0)
    no_mask = torch.zeros(1, 1, 5, 5, dtype=torch.bool)
    expected = torch.tensor(loop_reference(q, k, no_mask, 0, [1.0] * 2, [0.0] * 2, 0.0), dtype=torch.float64)
    torch.testing.assert_close(run(q, k), expected, rtol=1e-10, atol=1e-12)


def test_rows_with_a_positive_score_sum_to_one() -> None:
    generator = torch.Generator().manual_seed(8)
    q = torch.randn(2, 4, 16, 8, generator=generator, dtype=torch.float64) * 3
    k = torch.randn(2, 4, 16, 8, generator=generator, dtype=torch.float64) * 3
    w = [0.5, -0.5, 2.0, -3.0]
    scores = q @ k.transpose(-1, -2)  # (B, H, N, N)
    assert bool((scores > 0).any(dim=-1).all())
    exact = run(q, k, w=per_head(w), v=per_head([1.0, 0.0, -1.0, 4.0])).sum(dim=-1)  # default eps = 0
    torch.testing.assert_close(exact, torch.ones_like(exact), rtol=0, atol=1e-12)
    with_eps = run(q, k, w=per_head(w), v=per_head([1.0, 0.0, -1.0, 4.0]), eps=1e-6).sum(dim=-1)
    assert bool((with_eps < 1).all())  # the eps is in the denominator
    assert bool((with_eps > 0.99).all())


@pytest.mark.parametrize("eps", [1e-6, 0.0])
def test_a_row_with_no_positive_score_is_zero_not_nan(eps: float) -> None:
    k = torch.tensor([[[[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]]])  # (1, 1, 3, 2)
    q = torch.tensor([[[[-1.0, -1.0], [1.0, 0.0], [0.0, 0.0]]]])  # rows: all negative, some positive, all zero
    weights = run(q, k, eps=eps)
    assert not bool(torch.isnan(weights).any())
    assert bool((weights[0, 0, 0] == 0).all())
    assert bool((weights[0, 0, 2] == 0).all())
    assert float(weights[0, 0, 1].sum()) == pytest.approx(1.0, abs=1e-5)
    assert float(weights[0, 0, 1, 2]) == 0.0  # q·k = 0: clipped by the ReLU
    masked = run(q, k, torch.ones(1, 1, 3, 3, dtype=torch.bool), eps=eps)
    assert bool((masked == 0).all())


def test_the_rescale_is_one_at_distance_zero_and_follows_the_formula() -> None:
    w = torch.tensor([3.0, -2.0, 0.5, 1.0, -1.0], dtype=torch.float64)
    v = torch.tensor([0.0, 5.0, -7.0, 800.0, -800.0], dtype=torch.float64)
    distance = torch.tensor([[0.0, 1.0, 4.0]], dtype=torch.float64)  # (1, 3)
    rescale = log_rescale(distance, w, v).exp()  # (H, 1, 3)
    torch.testing.assert_close(rescale[:, 0, 0], torch.ones(5, dtype=torch.float64), rtol=0, atol=1e-14)
    for h in range(3):  # moderate v: the formula as written
        for col, r in enumerate((0.0, 1.0, 4.0)):
            direct = (1 + math.exp(v[h])) / (1 + math.exp(v[h] - w[h] * r))
            assert float(rescale[h, 0, col]) == pytest.approx(direct, rel=1e-13)
    # v = ±800 (e^v overflows float64): R̂ -> e^(wR) for large v, -> σ(wR + v)·(1 + e^v) -> 1 for very negative v
    assert float(rescale[3, 0, 2]) == pytest.approx(math.exp(4.0), rel=1e-13)
    assert float(rescale[4, 0, 2]) == pytest.approx(1.0, rel=1e-13)


def test_large_v_and_w_do_not_overflow_in_float32() -> None:
    generator = torch.Generator().manual_seed(9)
    n = 64
    q = torch.randn(1, 2, n, 8, generator=generator)
    k = torch.randn(1, 2, n, 8, generator=generator)
    weights = run(
        q, k, w=per_head([1.0, 3.0]), v=per_head([1000.0, 1000.0])
    )  # e^v and e^(w·R) overflow if formed directly
    assert bool(torch.isfinite(weights).all())
    # R̂ = e^(wR) exactly in float64 terms here, so A ∝ ReLU(q·k)·e^(w|i − j|)
    log_hat = torch.where(q.double() @ k.double().transpose(-1, -2) > 0, 0.0, float("-inf"))
    log_hat = log_hat + (q.double() @ k.double().transpose(-1, -2)).clamp_min(1e-300).log()
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs().double()  # (N, N)
    log_hat = log_hat + torch.tensor([1.0, 3.0], dtype=torch.float64)[None, :, None, None] * distance
    expected = torch.softmax(log_hat, dim=-1)  # normalised Â (eps is negligible against e^(wR))
    torch.testing.assert_close(weights.double(), expected, rtol=0, atol=1e-5)
    tiny = run(
        q * 1e-20, k * 1e-20, w=per_head([-50.0, -50.0]), v=per_head([-1000.0, 1000.0]), eps=1e-6
    )  # Â far below eps: ≈ 0, not NaN
    assert bool(torch.isfinite(tiny).all())


def test_gradients_reach_w_and_v() -> None:
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 4, 3, generator=generator, dtype=torch.float64)
    k = torch.randn(1, 2, 5, 3, generator=generator, dtype=torch.float64)
    mask = torch.zeros(1, 1, 4, 5, dtype=torch.bool)
    mask[..., 4] = True
    inputs = LayerInputs(q=q, k=k, q_pos=torch.arange(4) + 1, k_pos=torch.arange(5), mask=mask)
    ctx = context(2, 4, 5, 3, torch.float64, causal=False)

    def weights_of(w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        params = SPEC.parse_params({}).model_copy(update={"w": w, "v": v})
        result: AttentionWeights = SPEC.fn(params, inputs, ctx)
        return result.weights

    w = torch.tensor([0.3, -0.8], dtype=torch.float64, requires_grad=True)
    v = torch.tensor([0.2, 1.5], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(weights_of, (w, v))


def test_invalid_weights_name_their_field() -> None:
    q = torch.zeros(1, 2, 3, 2)
    with pytest.raises(InvalidInput) as caught:
        run(q, q, w=per_head([1.0, 2.0, 3.0]))
    assert caught.value.loc == ("params", "w", "shape")
    with pytest.raises(InvalidInput) as caught:
        run(q, torch.zeros(1, 2, 3, 4))
    assert caught.value.loc == ("k", "shape")
