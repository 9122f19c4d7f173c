"""CoPE (Golovneva et al., 2024): the T20 golden positions, p_ij = i − j + 1 when every gate is 1, the clamp,
a float64 loop reference of (q·k + interpolated q·e[p])/√d with causal and padding masks, the gradient through
the gates, the zeros init and the errors."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

import posenc.pe.cope
from posenc.errors import InvalidInput
from posenc.pe.appliers import Layer, build_applier, future_mask
from posenc.pe.cope import CopeParams, cope_learned_init, cope_positions
from posenc.pe.registry import get_method
from posenc.pe.types import LayerInputs, ScoreContext
from posenc.schemas.methods import Kind

SPEC = get_method("cope")
HEADS, HEAD_DIM = 2, 3


def context(q_len: int, k_len: int, dtype: torch.dtype = torch.float64) -> ScoreContext:
    return ScoreContext(
        num_heads=HEADS,
        query_length=q_len,
        key_length=k_len,
        head_dim=HEAD_DIM,
        causal=True,
        model_dim=HEADS * HEAD_DIM,
        dtype=dtype,
        query_offset=k_len - q_len,
    )


def causal_mask(q_len: int, k_len: int) -> torch.Tensor:
    """(1, 1, Nq, Nk), queries at the last Nq key positions."""
    return future_mask(torch.arange(q_len) + k_len - q_len, torch.arange(k_len))


def run(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None, **params: Any) -> torch.Tensor:
    q_len, k_len = q.shape[2], k.shape[2]
    tensors = {name: value for name, value in params.items() if isinstance(value, torch.Tensor)}
    model = CopeParams(**{name: value for name, value in params.items() if name not in tensors})
    model = model.model_copy(update=tensors)
    q_pos, k_pos = torch.arange(q_len) + k_len - q_len, torch.arange(k_len)
    inputs = LayerInputs(q=q, k=k, q_pos=q_pos, k_pos=k_pos, mask=causal_mask(q_len, k_len) if mask is None else mask)
    logits: torch.Tensor = SPEC.fn(model, inputs, context(q_len, k_len, q.dtype)).logits
    return logits


def test_registry_entry() -> None:
    assert SPEC.kind is Kind.SCORE_MOD
    assert SPEC.learned
    assert SPEC.per_layer
    assert SPEC.causal_only
    assert SPEC.learned_init is cope_learned_init
    assert "facebookresearch/RAM" in (posenc.pe.cope.__doc__ or "")
    assert CopeParams().npos == 64


def test_golden_t20_positions() -> None:
    """Golden T20: the gates of query 3 over keys 0..3 = [1, 0.5, 0.25, 1] -> p_3j = [2.75, 1.75, 1.25, 1]."""
    gates = torch.tensor([[1.0, 0.5, 0.25, 1.0]], dtype=torch.float64)
    assert cope_positions(gates).tolist() == [[2.75, 1.75, 1.25, 1.0]]
    # masked gates are zeroed before the sum: row 1 of a causal 4 x 4 counts keys 0 and 1 only
    square = torch.full((4, 4), 0.5, dtype=torch.float64)
    square[1, :2] = torch.tensor([0.25, 0.75], dtype=torch.float64)
    positions = cope_positions(square, causal_mask(4, 4)[0, 0])
    assert positions[1].tolist() == [1.0, 0.75, 0.0, 0.0]
    assert positions[3].tolist() == [2.0, 1.5, 1.0, 0.5]


def linear_table(npos: int) -> torch.Tensor:
    """e[p] = (0, 0, p): with q = (., ., 1) the position logit is the interpolated position itself."""
    table = torch.zeros(HEAD_DIM, npos, dtype=torch.float64)
    table[2] = torch.arange(npos, dtype=torch.float64)
    return table


@pytest.mark.parametrize(("npos", "q_len", "k_len"), [(64, 6, 6), (3, 6, 6), (64, 2, 5)])
def test_all_gates_one_count_the_keys(npos: int, q_len: int, k_len: int) -> None:
    """q·k/√d huge, so σ = 1 exactly: p_ij = i − j + 1 (query i at position i + Nk − Nq), clamped at npos − 1."""
    a = 40.0
    q = torch.zeros(1, HEADS, q_len, HEAD_DIM, dtype=torch.float64)
    q[..., 0], q[..., 2] = a, 1.0
    k = torch.zeros(1, HEADS, k_len, HEAD_DIM, dtype=torch.float64)
    k[..., 0] = a
    got = run(q, k, npos=npos, table=linear_table(npos))
    positions = got * math.sqrt(HEAD_DIM) - a * a  # (B, H, Nq, Nk): (q·k + p)·√d/√d − q·k
    offset = k_len - q_len
    for i in range(q_len):
        for j in range(i + offset + 1):
            expected = min(i + offset - j + 1, npos - 1)
            assert positions[0, :, i, j].tolist() == pytest.approx([expected] * HEADS, abs=1e-9)


def reference_logits(
    q: torch.Tensor, k: torch.Tensor, table: torch.Tensor, mask: torch.Tensor, divide: bool = True
) -> torch.Tensor:
    """Loops over b, h, i, j from the paper: gates on unmasked keys, p_ij = Σ_{t>=j, unmasked} g_it, clamp,
    z[p] = q·e[p] at floor and ceil, linear interpolation; (q·k + pos)/√d. Masked entries stay NaN."""
    batch, heads, q_len, dim = q.shape
    k_len, npos = k.shape[2], table.shape[1]
    scale = 1.0 / math.sqrt(dim)
    out = torch.full((batch, heads, q_len, k_len), float("nan"), dtype=torch.float64)
    for b in range(batch):
        blocked = mask[min(b, mask.shape[0] - 1), 0]
        for h in range(heads):
            for i in range(q_len):
                qi = q[b, h, i].tolist()
                dots = [sum(qi[c] * k[b, h, j, c].item() for c in range(dim)) for j in range(k_len)]
                gates = [0.0 if blocked[i, t] else 1.0 / (1.0 + math.exp(-dots[t] * scale)) for t in range(k_len)]
                z = [sum(qi[c] * table[c, p].item() for c in range(dim)) for p in range(npos)]
                for j in range(k_len):
                    if blocked[i, j]:
                        continue
                    p = min(sum(gates[j:]), npos - 1)
                    low, high = math.floor(p), math.ceil(p)
                    w = p - low
                    pos_logit = (1 - w) * z[low] + w * z[high]
                    if divide:
                        out[b, h, i, j] = (dots[j] + pos_logit) * scale
                    else:
                        out[b, h, i, j] = dots[j] * scale + pos_logit
    return out


@pytest.mark.parametrize(
    ("q_len", "k_len", "npos", "padded"),
    [(5, 5, 64, False), (5, 5, 3, False), (2, 6, 4, False), (4, 4, 8, True)],
)
def test_matches_the_loop_reference(q_len: int, k_len: int, npos: int, padded: bool) -> None:
    generator = torch.Generator().manual_seed(q_len * 100 + k_len * 10 + npos)
    q = torch.randn(2, HEADS, q_len, HEAD_DIM, generator=generator, dtype=torch.float64) * 2
    k = torch.randn(2, HEADS, k_len, HEAD_DIM, generator=generator, dtype=torch.float64) * 2
    table = torch.randn(HEAD_DIM, npos, generator=generator, dtype=torch.float64)
    mask = causal_mask(q_len, k_len).expand(2, 1, q_len, k_len).clone()
    if padded:
        mask[1, :, :, 0] = True  # left padding of the second sequence: key 0 never attended, never counted
    for divide in (True, False):
        got = run(q, k, mask, npos=npos, table=table, divide_position_logit=divide)
        expected = reference_logits(q, k, table, mask, divide)
        keep = ~mask.expand(2, HEADS, q_len, k_len)
        assert bool(torch.isfinite(got).all())  # masked entries are finite: the applier masks them
        torch.testing.assert_close(got[keep], expected[keep], rtol=0, atol=1e-10)


def test_zero_table_is_the_scaled_dot_product() -> None:
    """The paper's init (E = 0): no position logit at all."""
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(1, HEADS, 4, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 4, HEAD_DIM, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(run(q, k), q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM), rtol=0, atol=1e-14)
    init = cope_learned_init(CopeParams(npos=7), context(4, 4))
    assert set(init) == {"table"}
    assert init["table"].shape == (HEAD_DIM, 7)
    assert bool((init["table"] == 0).all())
    drawn = cope_learned_init(CopeParams(npos=7, init_std=0.5, seed=1), context(4, 4))["table"]
    assert torch.equal(drawn, cope_learned_init(CopeParams(npos=7, init_std=0.5, seed=1), context(4, 4))["table"])
    assert 0.2 < float(drawn.std()) < 1.0
    seeded = run(q, k, npos=7, init_std=0.5, seed=1)
    torch.testing.assert_close(seeded, run(q, k, npos=7, table=drawn.to(torch.float64)), rtol=0, atol=0)


def test_gradient_flows_through_the_gates() -> None:
    """Logit (i, j) reads k_t (j < t <= i) only through the gates: nonzero gradient with a varying table, zero
    with a constant one; the whole map passes gradcheck (floor and ceil are locally constant)."""
    generator = torch.Generator().manual_seed(6)
    q = torch.randn(1, HEADS, 4, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 4, HEAD_DIM, generator=generator, dtype=torch.float64)
    varying = torch.randn(HEAD_DIM, 6, generator=generator, dtype=torch.float64)
    constant = varying[:, :1].expand(HEAD_DIM, 6).contiguous()  # z_i[p] the same for every p
    for table, moves in ((varying, True), (constant, False)):
        keys = k.clone().requires_grad_(True)
        torch.autograd.backward(run(q, keys, npos=6, table=table)[0, :, 3, 0].sum())
        assert keys.grad is not None
        assert bool(keys.grad[0, :, 2].abs().max() > 1e-8) is moves  # key 2 sits between key 0 and query 3
        assert bool(keys.grad[0, :, 1].abs().max() > 1e-8) is moves
    for wrt in ("q", "k"):
        inputs = (q.clone().requires_grad_(True), k.clone())
        if wrt == "k":
            inputs = (q.clone(), k.clone().requires_grad_(True))

        def logits(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
            return run(query, key, npos=6, table=varying)

        assert torch.autograd.gradcheck(logits, inputs, eps=1e-6, atol=1e-6)
    # and to the table, which training substitutes with a parameter
    table = varying.clone().requires_grad_(True)
    torch.autograd.backward(run(q, k, npos=6, table=table).masked_fill(causal_mask(4, 4), 0.0).sum())
    assert table.grad is not None
    assert bool(table.grad.abs().sum() > 0)


def test_fully_masked_rows_and_float32() -> None:
    """A row with every key masked has finite logits (all gates 0, p = 0); a float32 layer stays float32."""
    q = torch.randn(1, HEADS, 3, HEAD_DIM, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    got = run(q, q, mask, table=torch.randn(HEAD_DIM, 64, generator=torch.Generator().manual_seed(2)))
    assert got.dtype == torch.float32
    assert bool(torch.isfinite(got).all())


def test_applier_attends() -> None:
    layer = Layer(num_heads=HEADS, head_dim=HEAD_DIM, causal=True, dtype=torch.float64)
    params = CopeParams().model_copy(update={"table": torch.randn(HEAD_DIM, 64, dtype=torch.float64)})
    applier = build_applier(SPEC, params, layer)
    applier.check(has_x=False)
    q = torch.randn(1, HEADS, 5, HEAD_DIM, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    pos = torch.arange(5)
    out = applier.attend(q, q, q, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos))
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(1, HEADS, 5, dtype=torch.float64))
    assert bool((out.weights[..., future_mask(pos, pos)[0, 0]] == 0).all())


def test_errors() -> None:
    q = torch.zeros(1, HEADS, 4, HEAD_DIM, dtype=torch.float64)
    with pytest.raises(InvalidInput) as excinfo:
        run(q, q, npos=5, table=torch.zeros(HEAD_DIM, 4, dtype=torch.float64))
    assert excinfo.value.loc == ("params", "table", "shape")
    with pytest.raises(InvalidInput) as excinfo:
        run(q, q, torch.zeros(1, 1, 4, 3, dtype=torch.bool))
    assert excinfo.value.loc == ("mask", "shape")
    with pytest.raises(InvalidInput) as excinfo:
        run(torch.zeros(1, HEADS, 4, HEAD_DIM + 1, dtype=torch.float64), q)
    assert excinfo.value.loc == ("q", "shape")
    for bad in ({"npos": 0}, {"npos": 2.5}, {"divide": True}, {"init_std": -1.0}):
        with pytest.raises(pydantic.ValidationError):
            SPEC.parse_params(bad)
