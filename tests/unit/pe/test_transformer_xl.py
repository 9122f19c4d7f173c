"""Transformer-XL (Dai et al., ACL 2019): a float64 loop reference of the four-term score (a)+(b)+(c)+(d)
written here from the paper, the rel_shift placing every causal entry (memory included), the Toeplitz position
terms, clamp_len, the seeded init and the shape errors."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

import posenc.pe.transformer_xl
from posenc.errors import InvalidInput
from posenc.pe.appliers import Layer, build_applier, future_mask
from posenc.pe.ops import rel_shift
from posenc.pe.registry import get_method
from posenc.pe.transformer_xl import TransformerXLParams, sinusoid_concat
from posenc.pe.types import LayerInputs, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind

SPEC = get_method("transformer_xl")
HEADS, HEAD_DIM = 2, 3


def context(q_len: int, k_len: int, offset: int, model_dim: int, dtype: torch.dtype = torch.float64) -> ScoreContext:
    return ScoreContext(
        num_heads=HEADS,
        query_length=q_len,
        key_length=k_len,
        head_dim=HEAD_DIM,
        causal=True,
        model_dim=model_dim,
        dtype=dtype,
        query_offset=offset,
    )


def layer_inputs(q: torch.Tensor, k: torch.Tensor, offset: int) -> LayerInputs:
    q_len, k_len = q.shape[2], k.shape[2]
    q_pos, k_pos = torch.arange(q_len) + offset, torch.arange(k_len)
    return LayerInputs(q=q, k=k, q_pos=q_pos, k_pos=k_pos, mask=future_mask(q_pos, k_pos))


def random_weights(model_dim: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "u": torch.randn(HEADS, HEAD_DIM, generator=generator, dtype=torch.float64),
        "v": torch.randn(HEADS, HEAD_DIM, generator=generator, dtype=torch.float64),
        "w_r": torch.randn(HEADS * HEAD_DIM, model_dim, generator=generator, dtype=torch.float64),
    }


def run(
    weights: dict[str, torch.Tensor], q: torch.Tensor, k: torch.Tensor, offset: int, model_dim: int, **extra: Any
) -> torch.Tensor:
    params = TransformerXLParams().model_copy(update={**weights, **extra})
    ctx = context(q.shape[2], k.shape[2], offset, model_dim, q.dtype)
    terms: ScoreTerms = SPEC.fn(params, layer_inputs(q, k, offset), ctx)
    return terms.logits


def r_reference(s: int, model_dim: int, base: float = 10000.0) -> list[float]:
    """R_s = [sin(s ω_0..), cos(s ω_0..)] (+ a zero for odd D), ω_k = base^(−2k/D), in Python floats."""
    omegas = [base ** (-2.0 * i / model_dim) for i in range(model_dim // 2)]
    return [math.sin(s * w) for w in omegas] + [math.cos(s * w) for w in omegas] + [0.0] * (model_dim % 2)


def reference_scores(
    weights: dict[str, torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    offset: int,
    model_dim: int,
    clamp_len: int | None = None,
) -> torch.Tensor:
    """A_ij = [q·k + q·W_R R + u·k + v·W_R R] / √d_head with explicit loops over b, h, i, j (terms (a)–(d))."""
    batch, _, q_len, _ = q.shape
    k_len = k.shape[2]
    u, v, w_r = weights["u"].tolist(), weights["v"].tolist(), weights["w_r"].tolist()
    out = torch.full((batch, HEADS, q_len, k_len), float("nan"), dtype=torch.float64)
    for b in range(batch):
        for h in range(HEADS):
            for i in range(q_len):
                for j in range(k_len):
                    distance = i + offset - j
                    if distance < 0:
                        continue  # the causal future: not defined by the method
                    if clamp_len is not None:
                        distance = min(distance, clamp_len)
                    r = r_reference(distance, model_dim)
                    projected = [
                        sum(w_r[h * HEAD_DIM + c][m] * r[m] for m in range(model_dim)) for c in range(HEAD_DIM)
                    ]
                    qi, kj = q[b, h, i].tolist(), k[b, h, j].tolist()
                    term_a = sum(qi[c] * kj[c] for c in range(HEAD_DIM))
                    term_b = sum(qi[c] * projected[c] for c in range(HEAD_DIM))
                    term_c = sum(u[h][c] * kj[c] for c in range(HEAD_DIM))
                    term_d = sum(v[h][c] * projected[c] for c in range(HEAD_DIM))
                    out[b, h, i, j] = (term_a + term_b + term_c + term_d) / math.sqrt(HEAD_DIM)
    return out


def causal(q_len: int, k_len: int, offset: int) -> torch.Tensor:
    return ~future_mask(torch.arange(q_len) + offset, torch.arange(k_len))[0, 0]  # (Nq, Nk)


def test_registry_entry() -> None:
    assert SPEC.kind is Kind.SCORE_MOD
    assert SPEC.learned
    assert SPEC.per_layer
    assert SPEC.causal_only
    assert SPEC.learned_init is not None
    assert posenc.pe.transformer_xl.__doc__
    assert "kimiyoung/transformer-xl" in posenc.pe.transformer_xl.__doc__


def test_sinusoid_golden_t7() -> None:
    """Golden T7 paper values at position 1, D = 8, regrouped into the concatenated [sin.., cos..] layout."""
    table = sinusoid_concat(torch.tensor([1]), 8, 10000.0, torch.float64)[0]
    expected = [
        0.8414709848,
        0.0998334166,
        0.0099998333,
        0.0009999998,
        0.5403023059,
        0.9950041653,
        0.9999500004,
        0.9999995000,
    ]
    assert table.tolist() == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize(
    ("q_len", "k_len", "offset", "model_dim"),
    [
        (4, 4, 0, 6),  # plain causal self-attention
        (3, 7, 4, 6),  # memory: mlen = 4, the reference's form
        (3, 6, 1, 5),  # queries not at the end of the keys; odd D (zero last column)
        (4, 4, 2, 4),  # query_offset > Nk − Nq: queries past the keys' end
        (3, 4, -1, 4),  # a fully masked first row
        (2, 3, 6, 4),  # queries far past the keys: every key visible
    ],
)
def test_matches_the_four_term_loop_reference(q_len: int, k_len: int, offset: int, model_dim: int) -> None:
    generator = torch.Generator().manual_seed(q_len * 100 + k_len * 10 + offset + 5)
    q = torch.randn(2, HEADS, q_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(2, HEADS, k_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    weights = random_weights(model_dim, seed=q_len + k_len)
    got = run(weights, q, k, offset, model_dim)
    expected = reference_scores(weights, q, k, offset, model_dim)
    keep = causal(q_len, k_len, offset)
    assert got.shape == (2, HEADS, q_len, k_len)
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got[..., keep], expected[..., keep], rtol=0, atol=1e-10)


@pytest.mark.parametrize(("q_len", "k_len", "offset"), [(5, 5, 0), (3, 8, 5), (2, 6, 1), (4, 3, 3)])
def test_rel_shift_places_the_direct_content_position_term(q_len: int, k_len: int, offset: int) -> None:
    """With u = v = 0 and k = 0, A_ij = q_i·W_R R_{i+offset−j}/√d exactly at every causal entry."""
    model_dim = 4
    generator = torch.Generator().manual_seed(11)
    q = torch.randn(1, HEADS, q_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.zeros(1, HEADS, k_len, HEAD_DIM, dtype=torch.float64)
    weights = random_weights(model_dim, seed=3)
    weights["u"] = torch.zeros_like(weights["u"])
    weights["v"] = torch.zeros_like(weights["v"])
    got = run(weights, q, k, offset, model_dim)
    distance = torch.arange(q_len)[:, None] + offset - torch.arange(k_len)[None, :]  # (Nq, Nk)
    r = sinusoid_concat(distance.flatten(), model_dim, 10000.0, torch.float64).reshape(q_len, k_len, model_dim)
    projected = torch.einsum("ijm,cm->ijc", r, weights["w_r"]).reshape(q_len, k_len, HEADS, HEAD_DIM)
    direct = torch.einsum("hid,ijhd->hij", q[0], projected) / math.sqrt(HEAD_DIM)  # (H, Nq, Nk)
    keep = causal(q_len, k_len, offset)
    torch.testing.assert_close(got[0][:, keep], direct[:, keep], rtol=0, atol=1e-12)


def test_rel_shift_moves_columns_by_the_row() -> None:
    """out[i, j] = table[i, N − 1 + j − i] on a labelled table, within the exact region."""
    rows, width = 3, 5
    table = (100 * torch.arange(rows)[:, None] + torch.arange(width)[None, :]).to(torch.float64)
    shifted = rel_shift(table[None])[0]
    for i in range(rows):
        for j in range(width):
            if rows - 1 + j - i <= width - 1:
                assert shifted[i, j].item() == table[i, rows - 1 + j - i].item()


def test_position_terms_depend_only_on_the_distance() -> None:
    """(b)+(d) with the same q at every query and k = 0: A_ij is a function of i − j alone (Toeplitz)."""
    q_len, k_len, offset, model_dim = 5, 8, 3, 6
    generator = torch.Generator().manual_seed(2)
    row = torch.randn(1, HEADS, 1, HEAD_DIM, generator=generator, dtype=torch.float64)
    q = row.expand(1, HEADS, q_len, HEAD_DIM).contiguous()
    k = torch.zeros(1, HEADS, k_len, HEAD_DIM, dtype=torch.float64)
    got = run(random_weights(model_dim, seed=4), q, k, offset, model_dim)[0]  # (H, Nq, Nk)
    keep = causal(q_len, k_len, offset)
    for i in range(q_len - 1):
        for j in range(k_len - 1):
            if keep[i, j]:
                torch.testing.assert_close(got[:, i + 1, j + 1], got[:, i, j], rtol=0, atol=1e-12)
    # and it does depend on the distance (the test can fail)
    assert not torch.allclose(got[:, 4, 0], got[:, 4, 1])


def test_clamp_len() -> None:
    q_len, k_len, offset, model_dim, clamp = 3, 7, 4, 4, 2
    generator = torch.Generator().manual_seed(8)
    q = torch.randn(1, HEADS, q_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, k_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    weights = random_weights(model_dim, seed=9)
    keep = causal(q_len, k_len, offset)
    clamped = run(weights, q, k, offset, model_dim, clamp_len=clamp)
    expected = reference_scores(weights, q, k, offset, model_dim, clamp_len=clamp)
    torch.testing.assert_close(clamped[..., keep], expected[..., keep], rtol=0, atol=1e-10)
    # distances <= clamp_len are untouched, larger ones differ from the unclamped scores
    plain = run(weights, q, k, offset, model_dim)
    distance = torch.arange(q_len)[:, None] + offset - torch.arange(k_len)[None, :]
    near, far = keep & (distance <= clamp), distance > clamp
    torch.testing.assert_close(clamped[..., near], plain[..., near], rtol=0, atol=1e-12)
    assert not torch.allclose(clamped[..., far], plain[..., far])
    # a clamp at or past the largest distance changes nothing
    torch.testing.assert_close(run(weights, q, k, offset, model_dim, clamp_len=q_len + offset), plain)
    with pytest.raises(pydantic.ValidationError):
        SPEC.parse_params({"clamp_len": 0})


def test_seeded_init_is_the_default_and_fills_missing_tensors() -> None:
    ctx = context(3, 3, 0, 6)
    assert SPEC.learned_init is not None
    init = SPEC.learned_init(SPEC.parse_params({"seed": 5}), ctx)
    assert {name: tuple(t.shape) for name, t in init.items()} == {"u": (2, 3), "v": (2, 3), "w_r": (6, 6)}
    assert all(t.dtype == torch.float32 for t in init.values())
    again = SPEC.learned_init(SPEC.parse_params({"seed": 5}), ctx)
    assert all(torch.equal(init[name], again[name]) for name in init)
    big = SPEC.learned_init(SPEC.parse_params({"seed": 1}), context(4, 4, 0, 512))
    assert big["w_r"].std().item() == pytest.approx(0.02, rel=0.05)
    assert abs(big["w_r"].mean().item()) < 0.002

    generator = torch.Generator().manual_seed(6)
    q = torch.randn(1, HEADS, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    inputs = layer_inputs(q, k, 0)
    default = SPEC.fn(SPEC.parse_params({"seed": 5}), inputs, ctx).logits
    explicit = run({name: t.to(torch.float64) for name, t in init.items()}, q, k, 0, 6)
    torch.testing.assert_close(default, explicit, rtol=0, atol=1e-12)
    partial = TransformerXLParams(seed=5).model_copy(update={"v": init["v"].to(torch.float64)})
    torch.testing.assert_close(SPEC.fn(partial, inputs, ctx).logits, default, rtol=0, atol=1e-12)
    other_seed = SPEC.fn(SPEC.parse_params({"seed": 6}), inputs, ctx).logits
    assert not torch.allclose(other_seed, default)


def test_gradients_reach_every_learned_tensor() -> None:
    ctx = context(3, 5, 2, 4, torch.float32)
    assert SPEC.learned_init is not None
    weights = {n: torch.nn.Parameter(t) for n, t in SPEC.learned_init(SPEC.parse_params({}), ctx).items()}
    params = SPEC.parse_params({}).model_copy(update=weights)
    q, k = torch.randn(1, HEADS, 3, HEAD_DIM), torch.randn(1, HEADS, 5, HEAD_DIM)
    logits = SPEC.fn(params, layer_inputs(q, k, 2), ctx).logits
    logits.masked_fill(future_mask(torch.arange(3) + 2, torch.arange(5)), 0.0).square().sum().backward()
    for name, weight in weights.items():
        assert weight.grad is not None, name
        assert bool(weight.grad.abs().sum() > 0), name


def test_float32_matches_float64() -> None:
    generator = torch.Generator().manual_seed(12)
    q = torch.randn(1, HEADS, 6, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 9, HEAD_DIM, generator=generator, dtype=torch.float64)
    weights = random_weights(8, seed=13)
    wide = run(weights, q, k, 3, 8)
    narrow = run(weights, q.float(), k.float(), 3, 8)
    assert narrow.dtype == torch.float32
    keep = causal(6, 9, 3)
    torch.testing.assert_close(narrow[..., keep].double(), wide[..., keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("field", "shape"), [("u", (HEADS, HEAD_DIM + 1)), ("v", (HEADS + 1, HEAD_DIM)), ("w_r", (HEADS * HEAD_DIM, 5))]
)
def test_wrong_supplied_shapes(field: str, shape: tuple[int, ...]) -> None:
    weights = random_weights(6, seed=1)
    weights[field] = torch.zeros(shape, dtype=torch.float64)
    q, k = (
        torch.zeros(1, HEADS, 2, HEAD_DIM, dtype=torch.float64),
        torch.zeros(1, HEADS, 2, HEAD_DIM, dtype=torch.float64),
    )
    with pytest.raises(InvalidInput) as error:
        run(weights, q, k, 0, 6)
    assert error.value.loc == ("params", field, "shape")


def test_wrong_inputs() -> None:
    params = SPEC.parse_params({})
    ctx = context(2, 2, 0, 6)
    q = torch.zeros(1, HEADS + 1, 2, HEAD_DIM)
    with pytest.raises(InvalidInput) as error:
        SPEC.fn(params, layer_inputs(q, q, 0), ctx)
    assert error.value.loc == ("q", "shape")
    good = torch.zeros(1, HEADS, 2, HEAD_DIM)
    inputs = layer_inputs(good, good, 0)
    shuffled = LayerInputs(q=good, k=good, q_pos=inputs.q_pos, k_pos=torch.tensor([1, 0]), mask=inputs.mask)
    with pytest.raises(InvalidInput) as error:
        SPEC.fn(params, shuffled, ctx)
    assert error.value.loc == ("k_pos",)


def test_through_the_applier() -> None:
    layer = Layer(num_heads=HEADS, head_dim=HEAD_DIM, causal=True, model_dim=6, dtype=torch.float64)
    applier = build_applier(SPEC, SPEC.parse_params({"seed": 3}), layer)
    applier.check(has_x=False, has_v=True)
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(2, HEADS, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(2, HEADS, 5, HEAD_DIM, generator=generator, dtype=torch.float64)
    v = torch.randn(2, HEADS, 5, HEAD_DIM, generator=generator, dtype=torch.float64)
    q_pos, k_pos = torch.arange(3) + 2, torch.arange(5)
    attended = applier.attend(q, k, v, q_pos=q_pos, k_pos=k_pos, mask=future_mask(q_pos, k_pos))
    assert bool(torch.isfinite(attended.weights).all())
    torch.testing.assert_close(attended.weights.sum(-1), torch.ones(2, HEADS, 3, dtype=torch.float64))
    assert bool((attended.weights[future_mask(q_pos, k_pos).expand(2, HEADS, 3, 5)] == 0).all())
    with pytest.raises(InvalidInput) as error:
        build_applier(SPEC, SPEC.parse_params({}), Layer(num_heads=HEADS, head_dim=HEAD_DIM, causal=False)).check()
    assert error.value.loc == ("causal",)
