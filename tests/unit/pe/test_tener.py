"""TENER (Yan et al., 2019): float64 loop references of the paper's equation and of the fastnlp/TENER code
(written here from the formula, not from the code), the direction-aware sinusoid (R_s != R_−s, T7 t2t golden),
the Toeplitz position term, scaling, the seeded xavier init and the shape errors."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import posenc.pe.tener
from posenc.errors import InvalidInput
from posenc.pe.appliers import Layer, build_applier, future_mask
from posenc.pe.registry import get_method
from posenc.pe.tener import TenerParams, tener_frequencies, tener_sinusoid
from posenc.pe.types import LayerInputs, ScoreContext, ScoreTerms
from posenc.schemas.methods import Kind

SPEC = get_method("tener")
HEADS = 2


def context(
    q_len: int, k_len: int, offset: int, head_dim: int, dtype: torch.dtype = torch.float64, causal: bool = False
) -> ScoreContext:
    return ScoreContext(
        num_heads=HEADS,
        query_length=q_len,
        key_length=k_len,
        head_dim=head_dim,
        causal=causal,
        model_dim=HEADS * head_dim,
        dtype=dtype,
        query_offset=offset,
    )


def layer_inputs(q: torch.Tensor, k: torch.Tensor, offset: int) -> LayerInputs:
    q_len, k_len = q.shape[2], k.shape[2]
    mask = torch.zeros(1, 1, q_len, k_len, dtype=torch.bool)
    return LayerInputs(q=q, k=k, q_pos=torch.arange(q_len) + offset, k_pos=torch.arange(k_len), mask=mask)


def run(biases: dict[str, torch.Tensor], q: torch.Tensor, k: torch.Tensor, offset: int, **extra: Any) -> torch.Tensor:
    params = TenerParams(**extra).model_copy(update=biases)
    ctx = context(q.shape[2], k.shape[2], offset, q.shape[-1], q.dtype)
    terms: ScoreTerms = SPEC.fn(params, layer_inputs(q, k, offset), ctx)
    return terms.logits


def random_biases(head_dim: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(HEADS, head_dim, generator=generator, dtype=torch.float64) for name in ("u", "v")}


def r_reference(s: int, d: int, variant: str) -> list[float]:
    """[sin(s c_0..), cos(s c_0..)] (+ a zero for odd d); paper c_i = 10000^(−2i/d), code exp(−i ln 10000/(d/2−1))."""
    half = d // 2
    if variant == "paper":
        c = [10000.0 ** (-2.0 * i / d) for i in range(half)]
    else:
        c = [math.exp(-i * math.log(10000.0) / (half - 1)) for i in range(half)]
    return [math.sin(s * x) for x in c] + [math.cos(s * x) for x in c] + [0.0] * (d % 2)


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def reference_scores(
    biases: dict[str, torch.Tensor], q: torch.Tensor, k: torch.Tensor, offset: int, variant: str
) -> torch.Tensor:
    """paper: Q_t·K_j + Q_t·R_{t−j} + u·K_j + v·R_{t−j};
    code:  Q_t·K_j + u·K_j + Q_t·R_{j−t} + v·R_{j−t} + K_j·R_{t−j}. Loops over b, h, t, j."""
    batch, heads, q_len, d = q.shape
    k_len = k.shape[2]
    u, v = biases["u"].tolist(), biases["v"].tolist()
    out = torch.empty(batch, heads, q_len, k_len, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for t in range(q_len):
                for j in range(k_len):
                    s = t + offset - j
                    qt, kj = q[b, h, t].tolist(), k[b, h, j].tolist()
                    if variant == "paper":
                        r = r_reference(s, d, "paper")
                        value = dot(qt, kj) + dot(qt, r) + dot(u[h], kj) + dot(v[h], r)
                    else:
                        backward, forward = r_reference(-s, d, "code"), r_reference(s, d, "code")
                        value = dot(qt, kj) + dot(u[h], kj) + dot(qt, backward) + dot(v[h], backward) + dot(kj, forward)
                    out[b, h, t, j] = value
    return out


def test_registry_entry() -> None:
    assert SPEC.kind is Kind.SCORE_MOD
    assert SPEC.learned
    assert SPEC.per_layer
    assert not SPEC.causal_only
    assert SPEC.learned_init is not None
    assert posenc.pe.tener.__doc__
    assert "fastnlp/TENER" in posenc.pe.tener.__doc__
    assert TenerParams().variant == "paper"
    assert TenerParams().scaled is False


def test_code_frequencies_golden_t7() -> None:
    """Golden T7 t2t row at position 1, D = 8: the code variant's R_1 (concatenated, d/2 − 1 denominator)."""
    r = tener_sinusoid(torch.tensor([1]), tener_frequencies(8, 10000.0, "code"), 8, torch.float64)[0]
    expected = [
        0.8414709848,
        0.0463992235,
        0.0021544330,
        0.0000999999998,
        0.5403023059,
        0.9989229760,
        0.9999976792,
        0.9999999950,
    ]
    assert r.tolist() == pytest.approx(expected, abs=1e-10)
    paper = tener_sinusoid(torch.tensor([1]), tener_frequencies(8, 10000.0, "paper"), 8, torch.float64)[0]
    expected_paper = [
        0.8414709848,
        0.0998334166,
        0.0099998333,
        0.0009999998,
        0.5403023059,
        0.9950041653,
        0.9999500004,
        0.9999995000,
    ]
    assert paper.tolist() == pytest.approx(expected_paper, abs=1e-10)


@pytest.mark.parametrize("variant", ["paper", "code"])
def test_sinusoid_is_direction_aware(variant: str) -> None:
    d = 8
    s = torch.tensor([3, -3])
    forward, backward = tener_sinusoid(s, tener_frequencies(d, 10000.0, variant), d, torch.float64)  # type: ignore[arg-type]
    assert not torch.allclose(forward, backward)
    torch.testing.assert_close(forward[: d // 2], -backward[: d // 2])  # sin is odd
    torch.testing.assert_close(forward[d // 2 :], backward[d // 2 :])  # cos is even
    assert forward.tolist() == pytest.approx(r_reference(3, d, variant), abs=1e-14)


@pytest.mark.parametrize("variant", ["paper", "code"])
@pytest.mark.parametrize(
    ("q_len", "k_len", "offset", "head_dim"),
    [
        (4, 4, 0, 4),  # bidirectional self-attention
        (3, 6, 3, 6),  # queries at the end of the keys
        (3, 5, 0, 5),  # queries at the start; odd d (zero last column)
        (4, 2, 1, 4),  # more queries than keys
    ],
)
def test_matches_the_loop_reference(variant: str, q_len: int, k_len: int, offset: int, head_dim: int) -> None:
    generator = torch.Generator().manual_seed(q_len * 100 + k_len * 10 + offset)
    q = torch.randn(2, HEADS, q_len, head_dim, generator=generator, dtype=torch.float64)
    k = torch.randn(2, HEADS, k_len, head_dim, generator=generator, dtype=torch.float64)
    biases = random_biases(head_dim, seed=head_dim)
    got = run(biases, q, k, offset, variant=variant)
    assert got.shape == (2, HEADS, q_len, k_len)
    torch.testing.assert_close(got, reference_scores(biases, q, k, offset, variant), rtol=0, atol=1e-10)


def test_variants_differ() -> None:
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, HEADS, 4, 8, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 4, 8, generator=generator, dtype=torch.float64)
    biases = random_biases(8, seed=2)
    assert not torch.allclose(run(biases, q, k, 0, variant="paper"), run(biases, q, k, 0, variant="code"))


@pytest.mark.parametrize("variant", ["paper", "code"])
def test_position_term_depends_only_on_the_signed_distance(variant: str) -> None:
    """Same q at every query, k = 0: the logits are Q·R + v·R, a function of t − j alone, and not of |t − j|."""
    q_len, k_len, offset, d = 5, 7, 1, 6
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(1, HEADS, 1, d, generator=generator, dtype=torch.float64).expand(1, HEADS, q_len, d).contiguous()
    k = torch.zeros(1, HEADS, k_len, d, dtype=torch.float64)
    got = run(random_biases(d, seed=4), q, k, offset, variant=variant)[0]  # (H, Nq, Nk)
    for t in range(q_len - 1):
        for j in range(k_len - 1):
            torch.testing.assert_close(got[:, t + 1, j + 1], got[:, t, j], rtol=0, atol=1e-12)
    # t − j = +2 and −2 give different logits: the encoding sees the direction
    assert not torch.allclose(got[:, 3, 0], got[:, 0, 3 + 1])
    assert not torch.allclose(got[:, 3, 0], got[:, 3, 1])


def test_scaled_divides_by_sqrt_d() -> None:
    generator = torch.Generator().manual_seed(5)
    q = torch.randn(1, HEADS, 3, 8, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 4, 8, generator=generator, dtype=torch.float64)
    biases = random_biases(8, seed=6)
    for variant in ("paper", "code"):
        plain = run(biases, q, k, 1, variant=variant)
        scaled = run(biases, q, k, 1, variant=variant, scaled=True)
        torch.testing.assert_close(scaled, plain / math.sqrt(8), rtol=0, atol=1e-12)


def test_code_variant_needs_head_dim_4() -> None:
    q = torch.zeros(1, HEADS, 2, 3, dtype=torch.float64)
    with pytest.raises(InvalidInput) as error:
        run(random_biases(3, seed=0), q, q, 0, variant="code")
    assert error.value.loc == ("params", "variant")
    assert bool(torch.isfinite(run(random_biases(3, seed=0), q, q, 0, variant="paper")).all())


def test_seeded_xavier_init() -> None:
    assert SPEC.learned_init is not None
    ctx = context(3, 3, 0, 4)
    init = SPEC.learned_init(SPEC.parse_params({"seed": 7}), ctx)
    assert {name: tuple(t.shape) for name, t in init.items()} == {"u": (2, 4), "v": (2, 4)}
    assert all(t.dtype == torch.float32 for t in init.values())
    assert not torch.equal(init["u"], init["v"])
    wide = SPEC.learned_init(SPEC.parse_params({"seed": 1}), context(1, 1, 0, 4096))
    assert wide["u"].std().item() == pytest.approx(math.sqrt(2.0 / (HEADS + 4096)), rel=0.05)

    generator = torch.Generator().manual_seed(8)
    q = torch.randn(1, HEADS, 3, 4, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 3, 4, generator=generator, dtype=torch.float64)
    default = SPEC.fn(SPEC.parse_params({"seed": 7}), layer_inputs(q, k, 0), ctx).logits
    explicit = run({name: t.double() for name, t in init.items()}, q, k, 0)
    torch.testing.assert_close(default, explicit, rtol=0, atol=1e-12)
    partial = TenerParams(seed=7).model_copy(update={"u": init["u"].double()})
    torch.testing.assert_close(SPEC.fn(partial, layer_inputs(q, k, 0), ctx).logits, default, rtol=0, atol=1e-12)


def test_gradients_reach_u_and_v() -> None:
    assert SPEC.learned_init is not None
    ctx = context(3, 4, 0, 4, torch.float32)
    biases = {n: torch.nn.Parameter(t) for n, t in SPEC.learned_init(SPEC.parse_params({}), ctx).items()}
    params = SPEC.parse_params({"variant": "code"}).model_copy(update=biases)
    logits = SPEC.fn(params, layer_inputs(torch.randn(1, HEADS, 3, 4), torch.randn(1, HEADS, 4, 4), 0), ctx).logits
    logits.square().sum().backward()
    for name, bias in biases.items():
        assert bias.grad is not None, name
        assert bool(bias.grad.abs().sum() > 0), name


def test_float32_matches_float64() -> None:
    generator = torch.Generator().manual_seed(9)
    q = torch.randn(1, HEADS, 6, 8, generator=generator, dtype=torch.float64)
    k = torch.randn(1, HEADS, 9, 8, generator=generator, dtype=torch.float64)
    biases = random_biases(8, seed=10)
    for variant in ("paper", "code"):
        narrow = run(biases, q.float(), k.float(), 3, variant=variant)
        assert narrow.dtype == torch.float32
        torch.testing.assert_close(narrow.double(), run(biases, q, k, 3, variant=variant), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("field", "shape"), [("u", (HEADS, 5)), ("v", (HEADS + 1, 4))])
def test_wrong_supplied_shapes(field: str, shape: tuple[int, ...]) -> None:
    biases = random_biases(4, seed=0)
    biases[field] = torch.zeros(shape, dtype=torch.float64)
    q = torch.zeros(1, HEADS, 2, 4, dtype=torch.float64)
    with pytest.raises(InvalidInput) as error:
        run(biases, q, q, 0)
    assert error.value.loc == ("params", field, "shape")


def test_wrong_inputs() -> None:
    params = SPEC.parse_params({})
    ctx = context(2, 2, 0, 4)
    q = torch.zeros(1, HEADS, 2, 4)
    with pytest.raises(InvalidInput) as error:
        SPEC.fn(params, layer_inputs(q, torch.zeros(1, HEADS, 2, 5), 0), ctx)
    assert error.value.loc == ("k", "shape")
    with pytest.raises(InvalidInput) as error:
        SPEC.fn(params, layer_inputs(q, q, 1), ctx)  # q_pos starts at 1, the context says 0
    assert error.value.loc == ("q_pos",)


@pytest.mark.parametrize("causal", [False, True])
def test_through_the_applier(causal: bool) -> None:
    layer = Layer(num_heads=HEADS, head_dim=4, causal=causal, dtype=torch.float64)
    applier = build_applier(SPEC, SPEC.parse_params({"variant": "code"}), layer)
    applier.check(has_x=False, has_v=True)
    generator = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, HEADS, 4, 4, generator=generator, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(4)
    mask = future_mask(pos, pos) if causal else torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    attended = applier.attend(q, k, v, q_pos=pos, k_pos=pos, mask=mask)
    assert bool(torch.isfinite(attended.weights).all())
    torch.testing.assert_close(attended.weights.sum(-1), torch.ones(2, HEADS, 4, dtype=torch.float64))
    assert bool((attended.weights[mask.expand(2, HEADS, 4, 4)] == 0).all())
