"""Shaw RPR (NAACL 2018): a float64 loop reference of e_ij = q_i·(k_j + a^K_ij)/√d and of the output
Σ_j α_ij (v_j + a^V_ij), written here from the paper; the Toeplitz table term; clipping beyond k; the index
convention (key minus query); the seeded init; gradients; errors; the applier path."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

import posenc.pe.shaw
from posenc.errors import InvalidInput
from posenc.pe.appliers import Layer, build_applier, future_mask
from posenc.pe.registry import get_method
from posenc.pe.shaw import ShawParams, shaw_relative_index
from posenc.pe.types import LayerInputs, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind

SPEC = get_method("shaw")
HEADS, HEAD_DIM = 2, 3


def context(q_len: int, k_len: int, offset: int, causal: bool, dtype: torch.dtype = torch.float64) -> ScoreContext:
    return ScoreContext(
        num_heads=HEADS,
        query_length=q_len,
        key_length=k_len,
        head_dim=HEAD_DIM,
        causal=causal,
        model_dim=HEADS * HEAD_DIM,
        dtype=dtype,
        query_offset=offset,
    )


def make_mask(q_len: int, k_len: int, offset: int, causal: bool) -> torch.Tensor:
    q_pos, k_pos = torch.arange(q_len) + offset, torch.arange(k_len)
    if causal:
        return future_mask(q_pos, k_pos)
    return torch.zeros(1, 1, q_len, k_len, dtype=torch.bool)


def layer_inputs(q: torch.Tensor, k: torch.Tensor, offset: int, causal: bool) -> LayerInputs:
    q_len, k_len = q.shape[2], k.shape[2]
    q_pos, k_pos = torch.arange(q_len) + offset, torch.arange(k_len)
    return LayerInputs(q=q, k=k, q_pos=q_pos, k_pos=k_pos, mask=make_mask(q_len, k_len, offset, causal))


def random_tables(clip: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "key_table": torch.randn(2 * clip + 1, HEAD_DIM, generator=generator, dtype=torch.float64),
        "value_table": torch.randn(2 * clip + 1, HEAD_DIM, generator=generator, dtype=torch.float64),
    }


def run(
    tables: dict[str, torch.Tensor], q: torch.Tensor, k: torch.Tensor, offset: int, causal: bool, clip: int
) -> ScoreTerms:
    params = ShawParams(clip=clip).model_copy(update=tables)
    ctx = context(q.shape[2], k.shape[2], offset, causal, q.dtype)
    terms: ScoreTerms = SPEC.fn(params, layer_inputs(q, k, offset, causal), ctx)
    return terms


def row(i_pos: int, j_pos: int, clip: int) -> int:
    """The paper's index: clip(j − i, −k, k) + k."""
    return max(-clip, min(clip, j_pos - i_pos)) + clip


def reference(
    tables: dict[str, torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    offset: int,
    causal: bool,
    clip: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Loops over b, h, i, j: e_ij = Σ_c q_ic (k_jc + a^K_ij,c)/√d; α = softmax over allowed j;
    z_i = Σ_j α_ij (v_j + a^V_ij). Returns (e with NaN at masked entries, z)."""
    batch, _, q_len, _ = q.shape
    k_len, v_dim = k.shape[2], v.shape[3]
    a_k, a_v = tables["key_table"].tolist(), tables["value_table"].tolist()
    scores = torch.full((batch, HEADS, q_len, k_len), float("nan"), dtype=torch.float64)
    out = torch.zeros(batch, HEADS, q_len, v_dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(HEADS):
            for i in range(q_len):
                i_pos = i + offset
                allowed = [j for j in range(k_len) if not causal or j <= i_pos]
                if not allowed:
                    continue
                qi = q[b, h, i].tolist()
                logits = {}
                for j in allowed:
                    kj = k[b, h, j].tolist()
                    r = row(i_pos, j, clip)
                    logits[j] = sum(qi[c] * (kj[c] + a_k[r][c]) for c in range(HEAD_DIM)) / math.sqrt(HEAD_DIM)
                    scores[b, h, i, j] = logits[j]
                top = max(logits.values())
                total = sum(math.exp(e - top) for e in logits.values())
                for j in allowed:
                    alpha = math.exp(logits[j] - top) / total
                    r = row(i_pos, j, clip)
                    for c in range(v_dim):
                        out[b, h, i, c] += alpha * (v[b, h, j, c].item() + a_v[r][c])
    return scores, out


def attend_with_terms(terms: ScoreTerms, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(masked logits) @ v + Σ_j α_ij value_table[i, j], written out here (not the applier)."""
    weights = torch.softmax(terms.logits.masked_fill(mask, float("-inf")), dim=-1)
    assert terms.value_table is not None
    return torch.matmul(weights, v) + torch.einsum("bhij,ijd->bhid", weights, terms.value_table)


def test_registry_entry() -> None:
    assert SPEC.kind is Kind.SCORE_MOD
    assert SPEC.learned
    assert SPEC.per_layer
    assert not SPEC.causal_only
    assert SPEC.learned_init is not None
    assert posenc.pe.shaw.__doc__
    assert "tensorflow/tensor2tensor" in posenc.pe.shaw.__doc__
    assert "20" in SPEC.conventions["clip"]
    assert SPEC.parse_params({}).clip == 16  # type: ignore[attr-defined]


def test_relative_index_is_key_minus_query_clipped() -> None:
    index = shaw_relative_index(torch.arange(3) + 1, torch.arange(6), clip=2)
    expected = [[row(i + 1, j, 2) for j in range(6)] for i in range(3)]
    assert index.tolist() == expected
    # query 1, key 0 is one step back: row k − 1 = 1; query 1, key 5 is 4 ahead: clipped to row 2k = 4
    assert index[0, 0].item() == 1
    assert index[0, 5].item() == 4


@pytest.mark.parametrize(
    ("q_len", "k_len", "offset", "causal", "clip"),
    [
        (4, 4, 0, False, 2),  # bidirectional, distances up to 3 > k: both clipped edges used
        (4, 4, 0, True, 2),  # causal self-attention
        (3, 6, 3, True, 1),  # cached decode: queries at the end of the keys
        (3, 5, 1, False, 8),  # k larger than any distance: no clipping
        (3, 4, -1, True, 2),  # a fully masked first row
    ],
)
def test_matches_the_loop_reference(q_len: int, k_len: int, offset: int, causal: bool, clip: int) -> None:
    generator = torch.Generator().manual_seed(q_len * 100 + k_len * 10 + clip)
    q = torch.randn(2, HEADS, q_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(2, HEADS, k_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    v = torch.randn(2, HEADS, k_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    tables = random_tables(clip, seed=q_len + k_len)
    terms = run(tables, q, k, offset, causal, clip)
    expected_scores, expected_out = reference(tables, q, k, v, offset, causal, clip)
    mask = make_mask(q_len, k_len, offset, causal)
    keep = ~mask[0, 0]
    assert terms.logits.shape == (2, HEADS, q_len, k_len)
    assert terms.value_table is not None
    assert terms.value_table.shape == (q_len, k_len, HEAD_DIM)
    assert bool(torch.isfinite(terms.logits).all())
    torch.testing.assert_close(terms.logits[..., keep], expected_scores[..., keep], rtol=0, atol=1e-10)
    full_rows = keep.any(dim=-1)  # rows with at least one key (the reference leaves the others at 0)
    got_out = attend_with_terms(terms, v, mask)
    torch.testing.assert_close(got_out[:, :, full_rows], expected_out[:, :, full_rows], rtol=0, atol=1e-10)

    # the applier's attend computes the same output (value_table included)
    layer = Layer(num_heads=HEADS, head_dim=HEAD_DIM, causal=causal, dtype=torch.float64)
    params = ShawParams(clip=clip).model_copy(update=tables)
    q_pos, k_pos = torch.arange(q_len) + offset, torch.arange(k_len)
    attended = build_applier(SPEC, params, layer).attend(q, k, v, q_pos=q_pos, k_pos=k_pos, mask=mask)
    assert attended.output is not None
    torch.testing.assert_close(attended.output[:, :, full_rows], expected_out[:, :, full_rows], rtol=0, atol=1e-10)


def test_value_table_changes_the_output() -> None:
    """Without the value term the output differs: the reference's a^V part is not a no-op (the test can fail)."""
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, HEADS, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    v = torch.randn(1, HEADS, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    tables = random_tables(2, seed=2)
    terms = run(tables, q, k, 0, False, 2)
    weights = torch.softmax(terms.logits, dim=-1)
    _, expected = reference(tables, q, k, v, 0, False, 2)
    assert not torch.allclose(torch.matmul(weights, v), expected)
    # the gathered value table is w^V at clip(j − i) + k
    assert terms.value_table is not None
    for i in range(3):
        for j in range(3):
            assert torch.equal(terms.value_table[i, j], tables["value_table"][row(i, j, 2)])


def test_table_term_depends_only_on_the_distance() -> None:
    """With the same q at every query and k = 0, q_i·a^K_ij is a function of i − j alone (Toeplitz)."""
    q_len, k_len, clip = 5, 7, 2
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(1, HEADS, 1, HEAD_DIM, generator=generator, dtype=torch.float64).expand(1, HEADS, q_len, HEAD_DIM)
    k = torch.zeros(1, HEADS, k_len, HEAD_DIM, dtype=torch.float64)
    got = run(random_tables(clip, seed=4), q.contiguous(), k, 0, False, clip).logits[0]  # (H, Nq, Nk)
    for i in range(q_len - 1):
        for j in range(k_len - 1):
            torch.testing.assert_close(got[:, i + 1, j + 1], got[:, i, j], rtol=0, atol=1e-12)
    # it does depend on the distance within ±k (the test can fail)
    assert not torch.allclose(got[:, 2, 1], got[:, 2, 2])


def test_clipping_beyond_k() -> None:
    """Every distance j − i >= k gives the same table term, every j − i <= −k too; within ±k they differ."""
    q_len, k_len, clip = 1, 9, 2
    generator = torch.Generator().manual_seed(5)
    q = torch.randn(1, HEADS, q_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.zeros(1, HEADS, k_len, HEAD_DIM, dtype=torch.float64)
    tables = random_tables(clip, seed=6)
    # the query at position 4: keys 0..8 are j − i = −4..4
    terms = run(tables, q, k, 4, False, clip)
    got = terms.logits[0, :, 0]  # (H, Nk)
    for j in (0, 1):  # j − i = −4, −3 equal j − i = −2
        torch.testing.assert_close(got[:, j], got[:, 2], rtol=0, atol=0)
    for j in (7, 8):  # j − i = 3, 4 equal j − i = 2
        torch.testing.assert_close(got[:, j], got[:, 6], rtol=0, atol=0)
    expected_edge = torch.einsum("hd,d->h", q[0, :, 0], tables["key_table"][2 * clip]) / math.sqrt(HEAD_DIM)
    torch.testing.assert_close(got[:, 8], expected_edge, rtol=0, atol=1e-12)
    assert terms.value_table is not None
    assert torch.equal(terms.value_table[0, 0], terms.value_table[0, 2])
    assert torch.equal(terms.value_table[0, 8], terms.value_table[0, 6])
    assert len({tuple(got[:, j].tolist()) for j in range(2, 7)}) == 5


def test_seeded_init_is_the_default_and_fills_missing_tables() -> None:
    ctx = context(3, 3, 0, False)
    assert SPEC.learned_init is not None
    init = SPEC.learned_init(ShawParams(clip=3, seed=5), ctx)
    assert {name: tuple(t.shape) for name, t in init.items()} == {"key_table": (7, 3), "value_table": (7, 3)}
    assert all(t.dtype == torch.float32 for t in init.values())
    again = SPEC.learned_init(ShawParams(clip=3, seed=5), ctx)
    assert all(torch.equal(init[name], again[name]) for name in init)
    assert not torch.equal(init["key_table"], init["value_table"])
    bound = math.sqrt(6.0 / (7 + HEAD_DIM))
    assert all(bool((t.abs() <= bound).all()) for t in init.values())
    big = SPEC.learned_init(ShawParams(clip=200, seed=1), context(3, 3, 0, False))["key_table"]
    assert big.abs().max().item() == pytest.approx(math.sqrt(6.0 / (401 + HEAD_DIM)), rel=0.02)

    generator = torch.Generator().manual_seed(6)
    q = torch.randn(1, HEADS, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    inputs = layer_inputs(q, k, 0, False)
    default = SPEC.fn(ShawParams(clip=3, seed=5), inputs, ctx)
    explicit = run({n: t.to(torch.float64) for n, t in init.items()}, q, k, 0, False, 3)
    torch.testing.assert_close(default.logits, explicit.logits, rtol=0, atol=1e-12)
    torch.testing.assert_close(default.value_table, explicit.value_table, rtol=0, atol=1e-12)
    partial = ShawParams(clip=3, seed=5).model_copy(update={"value_table": init["value_table"].to(torch.float64)})
    torch.testing.assert_close(SPEC.fn(partial, inputs, ctx).logits, default.logits, rtol=0, atol=1e-12)
    assert not torch.allclose(SPEC.fn(ShawParams(clip=3, seed=6), inputs, ctx).logits, default.logits)


def test_gradients_reach_both_tables() -> None:
    ctx = context(3, 5, 2, True, torch.float32)
    assert SPEC.learned_init is not None
    params0 = ShawParams(clip=2)
    tables = {n: torch.nn.Parameter(t) for n, t in SPEC.learned_init(params0, ctx).items()}
    params = params0.model_copy(update=tables)
    generator = torch.Generator().manual_seed(7)
    q = torch.randn(1, HEADS, 3, HEAD_DIM, generator=generator)
    k = torch.randn(1, HEADS, 5, HEAD_DIM, generator=generator)
    v = torch.randn(1, HEADS, 5, HEAD_DIM, generator=generator)
    terms = SPEC.fn(params, layer_inputs(q, k, 2, True), ctx)
    torch.autograd.backward(attend_with_terms(terms, v, make_mask(3, 5, 2, True)).square().sum())
    for name, table in tables.items():
        assert table.grad is not None, name
        assert bool(table.grad.abs().sum() > 0), name


def test_float32_matches_float64() -> None:
    generator = torch.Generator().manual_seed(12)
    q = torch.randn(1, HEADS, 6, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 9, HEAD_DIM, generator=generator, dtype=torch.float64)
    tables = random_tables(3, seed=13)
    wide = run(tables, q, k, 3, False, 3)
    narrow = run(tables, q.float(), k.float(), 3, False, 3)
    assert narrow.logits.dtype == torch.float32
    assert narrow.value_table is not None
    assert narrow.value_table.dtype == torch.float32
    torch.testing.assert_close(narrow.logits.double(), wide.logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("field", "shape"), [("key_table", (5, HEAD_DIM)), ("value_table", (7, HEAD_DIM + 1))])
def test_wrong_table_shapes(field: str, shape: tuple[int, ...]) -> None:
    tables = random_tables(3, seed=1)
    tables[field] = torch.zeros(shape, dtype=torch.float64)
    q = torch.zeros(1, HEADS, 2, HEAD_DIM, dtype=torch.float64)
    with pytest.raises(InvalidInput) as error:
        run(tables, q, q, 0, False, 3)
    assert error.value.loc == ("params", field, "shape")


@pytest.mark.parametrize("raw", [{"clip": 0}, {"clip": 1 << 20}, {"seed": -1}, {"max_position": 4}])
def test_invalid_params(raw: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        SPEC.parse_params(raw)


def test_wrong_inputs() -> None:
    params = ShawParams()
    ctx = context(2, 2, 0, False)
    bad = torch.zeros(1, HEADS + 1, 2, HEAD_DIM)
    with pytest.raises(InvalidInput) as error:
        SPEC.fn(params, layer_inputs(bad, bad, 0, False), ctx)
    assert error.value.loc == ("q", "shape")
    good = torch.zeros(1, HEADS, 2, HEAD_DIM)
    with pytest.raises(InvalidInput) as error:
        SPEC.fn(params, layer_inputs(good, torch.zeros(1, HEADS, 2, HEAD_DIM + 1), 0, False), ctx)
    assert error.value.loc == ("k", "shape")
