"""CAPE (Zheng et al., NeurIPS 2024): a zero MLP leaves S + B exactly, a float64 loop reference of
S + B + W2·LeakyReLU(W1·[S; B] + b1) + b2 with an independent ALiBi, the MLP acting point-wise, other base
methods, the seeded init, gradients and the error locations."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

import posenc.pe.cape
from posenc.errors import InvalidInput
from posenc.pe.appliers import Layer, build_applier, future_mask
from posenc.pe.cape import CapeParams, cape_learned_init
from posenc.pe.kinds import bias_dense
from posenc.pe.registry import get_method
from posenc.pe.types import BiasContext, LayerInputs, ScoreContext
from posenc.schemas.methods import Kind

SPEC = get_method("cape")
HEADS, HEAD_DIM, WIDTH = 2, 3, 5


def context(q_len: int, k_len: int, causal: bool, dtype: torch.dtype = torch.float64) -> ScoreContext:
    return ScoreContext(
        num_heads=HEADS,
        query_length=q_len,
        key_length=k_len,
        head_dim=HEAD_DIM,
        causal=causal,
        model_dim=HEADS * HEAD_DIM,
        dtype=dtype,
        query_offset=k_len - q_len,
    )


def layer_inputs(q: torch.Tensor, k: torch.Tensor, causal: bool) -> LayerInputs:
    q_len, k_len = q.shape[2], k.shape[2]
    q_pos, k_pos = torch.arange(q_len) + k_len - q_len, torch.arange(k_len)
    mask = future_mask(q_pos, k_pos) if causal else torch.zeros(1, 1, q_len, k_len, dtype=torch.bool)
    return LayerInputs(q=q, k=k, q_pos=q_pos, k_pos=k_pos, mask=mask)


def run(q: torch.Tensor, k: torch.Tensor, causal: bool, **params: Any) -> torch.Tensor:
    tensors = {name: value for name, value in params.items() if isinstance(value, torch.Tensor)}
    model = CapeParams(**{name: value for name, value in params.items() if name not in tensors})
    model = model.model_copy(update=tensors)
    ctx = context(q.shape[2], k.shape[2], causal, q.dtype)
    logits: torch.Tensor = SPEC.fn(model, layer_inputs(q, k, causal), ctx).logits
    return logits


def random_mlp(seed: int, width: int = WIDTH) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "w1": torch.randn(width, 2 * HEADS, generator=generator, dtype=torch.float64),
        "b1": torch.randn(width, generator=generator, dtype=torch.float64),
        "w2": torch.randn(HEADS, width, generator=generator, dtype=torch.float64),
        "b2": torch.randn(HEADS, generator=generator, dtype=torch.float64),
    }


def qk(seed: int, q_len: int, k_len: int, batch: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, HEADS, q_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(batch, HEADS, k_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    return q, k


def alibi_reference(h: int, i: int, j: int, causal: bool) -> float:
    """ALiBi for H = 2: m_h = 2^(−8(h+1)/2); −m(i − j) causal (0 in the future: the reference's tril), −m|i − j|."""
    slope = float(2.0 ** (-8.0 * (h + 1) / HEADS))
    if causal:
        return -slope * (i - j) if j <= i else 0.0
    return -slope * abs(i - j)


def reference_logits(q: torch.Tensor, k: torch.Tensor, mlp: dict[str, torch.Tensor], causal: bool) -> torch.Tensor:
    """Loops over b, i, j: z = [S_0.., S_H−1, B_0.., B_H−1], f = W2·LeakyReLU(W1 z + b1) + b2, A = S + B + f."""
    batch, _, q_len, _ = q.shape
    k_len = k.shape[2]
    w1, b1, w2, b2 = (mlp[name].tolist() for name in ("w1", "b1", "w2", "b2"))
    width = len(b1)
    out = torch.zeros(batch, HEADS, q_len, k_len, dtype=torch.float64)
    for b in range(batch):
        for i in range(q_len):
            position = i + k_len - q_len
            for j in range(k_len):
                s = [
                    sum(q[b, h, i, c].item() * k[b, h, j, c].item() for c in range(HEAD_DIM)) / math.sqrt(HEAD_DIM)
                    for h in range(HEADS)
                ]
                bias = [alibi_reference(h, position, j, causal) for h in range(HEADS)]
                z = s + bias
                hidden = [sum(w1[u][c] * z[c] for c in range(2 * HEADS)) + b1[u] for u in range(width)]
                hidden = [value if value > 0 else 0.01 * value for value in hidden]
                for h in range(HEADS):
                    f = sum(w2[h][u] * hidden[u] for u in range(width)) + b2[h]
                    out[b, h, i, j] = s[h] + bias[h] + f
    return out


def test_registry_entry() -> None:
    assert SPEC.kind is Kind.SCORE_MOD
    assert SPEC.learned
    assert SPEC.per_layer
    assert not SPEC.causal_only
    assert SPEC.learned_init is cape_learned_init
    assert "chuanyang-Zheng/DAPE" in (posenc.pe.cape.__doc__ or "")
    params = CapeParams()
    assert (params.base, params.base_params, params.mlp_width) == ("alibi", {}, 32)


@pytest.mark.parametrize(("q_len", "k_len", "causal"), [(4, 4, True), (4, 4, False), (2, 5, True), (3, 5, False)])
def test_zero_mlp_is_scores_plus_base_bias(q_len: int, k_len: int, causal: bool) -> None:
    """w2 = 0, b2 = 0 (w1, b1 seeded): A = S + B exactly, B the alibi method's own bias."""
    q, k = qk(1, q_len, k_len)
    got = run(q, k, causal, w2=torch.zeros(HEADS, 32, dtype=torch.float64), b2=torch.zeros(HEADS, dtype=torch.float64))
    ctx = BiasContext(
        num_heads=HEADS,
        query_length=q_len,
        key_length=k_len,
        causal=causal,
        dtype=torch.float64,
        query_offset=k_len - q_len,
    )
    bias = bias_dense(get_method("alibi"), get_method("alibi").parse_params({}), ctx)  # (H, Nq, Nk)
    expected = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(HEAD_DIM)) + bias
    keep = ~layer_inputs(q, k, causal).mask.expand_as(expected)
    assert torch.equal(got[keep], expected[keep])
    loops = reference_logits(
        q,
        k,
        {"w1": torch.zeros(1, 2 * HEADS), "b1": torch.zeros(1), "w2": torch.zeros(HEADS, 1), "b2": torch.zeros(HEADS)},
        causal,
    )
    torch.testing.assert_close(got[keep], loops[keep], rtol=0, atol=1e-12)


@pytest.mark.parametrize(("q_len", "k_len", "causal"), [(4, 4, True), (4, 4, False), (2, 5, True)])
def test_matches_the_loop_reference(q_len: int, k_len: int, causal: bool) -> None:
    """Every entry, the causal future included (its base feature is 0, the reference's tril)."""
    q, k = qk(q_len * 10 + k_len, q_len, k_len)
    mlp = random_mlp(seed=q_len + k_len)
    got = run(q, k, causal, mlp_width=WIDTH, **mlp)
    torch.testing.assert_close(got, reference_logits(q, k, mlp, causal), rtol=0, atol=1e-10)


def test_mlp_acts_point_wise() -> None:
    """Changing key j' (so S[:, i, j'] for every i) leaves A[:, i, j] unchanged for j != j', bit for bit."""
    q, k = qk(7, 4, 6)
    mlp = random_mlp(seed=9)
    before = run(q, k, True, mlp_width=WIDTH, **mlp)
    for column in range(6):
        changed = k.clone()
        changed[:, :, column] += 1.5
        after = run(q, changed, True, mlp_width=WIDTH, **mlp)
        others = [j for j in range(6) if j != column]
        assert torch.equal(after[..., others], before[..., others])
        assert not torch.equal(after[..., column], before[..., column])


def test_other_base_methods() -> None:
    """A zero MLP exposes the base: T5 keeps its causal buckets in a causal layer; KERPLE (log) too."""
    q, k = qk(3, 5, 5, batch=1)
    zero = {"w2": torch.zeros(HEADS, 32, dtype=torch.float64), "b2": torch.zeros(HEADS, dtype=torch.float64)}
    scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(HEAD_DIM))
    keep = ~future_mask(torch.arange(5), torch.arange(5)).expand_as(scores)
    for base, base_params in (("t5", {"num_buckets": 8, "max_distance": 6, "seed": 2}), ("kerple_log", {})):
        got = run(q, k, True, base=base, base_params=base_params, **zero)
        ctx = BiasContext(num_heads=HEADS, query_length=5, key_length=5, causal=True, dtype=torch.float64)
        spec = get_method(base)
        expected = scores + bias_dense(spec, spec.parse_params(base_params), ctx)
        assert torch.equal(got[keep], expected[keep]), base
        assert bool(torch.isfinite(got).all())


def test_seeded_init() -> None:
    ctx = context(4, 4, True)
    init = cape_learned_init(CapeParams(seed=5), ctx)
    assert {name: tuple(t.shape) for name, t in init.items()} == {
        "w1": (32, 2 * HEADS),
        "b1": (32,),
        "w2": (HEADS, 32),
        "b2": (HEADS,),
    }
    for name, fan_in in (("w1", 2 * HEADS), ("b1", 2 * HEADS), ("w2", 32), ("b2", 32)):
        bound = 1.0 / math.sqrt(fan_in)
        assert float(init[name].abs().max()) <= bound
        if init[name].numel() >= 32:  # spread over the interval, not a narrow draw
            assert float(init[name].abs().max()) > 0.8 * bound
    again = cape_learned_init(CapeParams(seed=5), ctx)
    assert all(torch.equal(init[name], again[name]) for name in init)
    assert not torch.equal(init["w1"], cape_learned_init(CapeParams(seed=6), ctx)["w1"])
    # no tensors supplied: the seeded MLP; a partial set is completed from the same draw
    q, k = qk(2, 4, 4)
    seeded = run(q, k, True, seed=5)
    as_given = run(q, k, True, **{name: t.to(torch.float64) for name, t in init.items()})
    partial = run(q, k, True, seed=5, w2=init["w2"].to(torch.float64))
    assert torch.equal(seeded, as_given)
    assert torch.equal(seeded, partial)


def test_gradients_reach_the_mlp() -> None:
    init = cape_learned_init(CapeParams(), context(4, 4, True, torch.float32))
    weights = {name: torch.nn.Parameter(t.clone()) for name, t in init.items()}
    q, k = qk(4, 4, 4)
    params = CapeParams().model_copy(update=weights)
    inputs = layer_inputs(q.float(), k.float(), True)
    logits = SPEC.fn(params, inputs, context(4, 4, True, torch.float32)).logits
    assert logits.dtype == torch.float32
    logits.masked_fill(inputs.mask, 0.0).sum().backward()
    for name, weight in weights.items():
        assert weight.grad is not None, name
        assert bool(weight.grad.abs().sum() > 0), name


def test_applier_attends() -> None:
    layer = Layer(num_heads=HEADS, head_dim=HEAD_DIM, causal=True, dtype=torch.float64)
    applier = build_applier(SPEC, CapeParams(), layer)
    applier.check(has_x=False)
    q, _ = qk(5, 5, 5, batch=1)
    pos = torch.arange(5)
    out = applier.attend(q, q, q, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos))
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(1, HEADS, 5, dtype=torch.float64))
    assert bool((out.weights[..., future_mask(pos, pos)[0, 0]] == 0).all())


def test_errors() -> None:
    q, k = qk(0, 3, 3, batch=1)
    cases: list[tuple[dict[str, Any], tuple[Any, ...]]] = [
        ({"base": "rope"}, ("params", "base")),
        ({"base": "no_such_method"}, ("params", "base")),
        ({"base": "cape"}, ("params", "base")),
        ({"base_params": {"max_bias": -1.0}}, ("params", "base_params", "max_bias")),
        ({"base_params": {"nope": 1}}, ("params", "base_params", "nope")),
        (
            {
                "base": "fire",
                "base_params": {
                    "mlp_width": 2,
                    "mlp_w1": {"shape": [3, 1], "data": [0.0, 0.0, 0.0]},
                    "mlp_b1": {"shape": [2], "data": [0.0, 0.0]},
                    "mlp_w2": {"shape": [2, 2], "data": [0.0] * 4},
                    "mlp_b2": {"shape": [2], "data": [0.0, 0.0]},
                },
            },
            ("params", "base_params", "mlp_w1", "shape"),
        ),
    ]
    for params, loc in cases:
        with pytest.raises(InvalidInput) as excinfo:
            run(q, k, True, **params)
        assert excinfo.value.loc == loc, params
    with pytest.raises(InvalidInput) as excinfo:
        run(q, k, True, w1=torch.zeros(32, HEADS, dtype=torch.float64))
    assert excinfo.value.loc == ("params", "w1", "shape")
    with pytest.raises(InvalidInput) as excinfo:
        run(q, k[:, :1], True)
    assert excinfo.value.loc == ("k", "shape")
    for bad in ({"mlp_width": 0}, {"base_params": [1]}, {"w3": 1}):
        with pytest.raises(pydantic.ValidationError):
            SPEC.parse_params(bad)
