"""FIRE (Li et al., ICLR 2024): the hand-computed T15 normalised inputs, a float64 reference of the whole
bias written here from the paper-appendix formula, and the Toeplitz-within-L / not-beyond-L structure."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import BiasContext, bias_dense, get_method
from posenc.pe.fire import fire_normalized_distance


def test_t15_normalised_inputs() -> None:
    near = fire_normalized_distance(torch.tensor([10]), torch.arange(4), c=0.1, threshold=512.0, eps=1e-6)
    assert near[0].tolist() == pytest.approx([0.1752547529, 0.1622857993, 0.1486154883, 0.1341636028], rel=1e-9)
    far = fire_normalized_distance(torch.tensor([1000]), torch.tensor([0, 999]), c=0.1, threshold=512.0, eps=1e-6)
    assert far[0].tolist() == pytest.approx([0.9999997833, 0.0206517162], rel=1e-9)


def normalised_reference(i: int, j: int, c: float, threshold: float, eps: float) -> float:
    """log(|c(i − j)| + 1) / (log(|c·max(i, thr)| + 1) + eps), in Python floats."""
    return math.log(abs(c * (i - j)) + 1.0) / (math.log(abs(c * max(i, threshold)) + 1.0) + eps)


def test_normalised_inputs_match_the_reference_and_stay_in_the_unit_interval() -> None:
    q_pos, k_pos = torch.arange(0, 3000, 37), torch.arange(0, 3000, 41)
    got = fire_normalized_distance(q_pos, k_pos, c=0.3, threshold=100.0, eps=1e-6)
    expected = [[normalised_reference(i, j, 0.3, 100.0, 1e-6) for j in k_pos.tolist()] for i in q_pos.tolist()]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-13, atol=1e-15)
    causal_part = got[k_pos[None, :] <= q_pos[:, None]]
    assert bool((causal_part >= 0).all())
    assert bool((causal_part <= 1).all())


WIDTH, HEADS = 4, 2
WEIGHTS: dict[str, Any] = {
    "mlp_w1": [[0.5], [-1.0], [2.0], [0.25]],
    "mlp_b1": [0.1, 0.2, -0.3, 0.0],
    "mlp_w2": [[1.0, -0.5, 0.25, 2.0], [-1.5, 0.75, 0.5, -0.25]],
    "mlp_b2": [0.05, -0.1],
}


def _wire(values: list[Any], shape: list[int]) -> dict[str, Any]:
    flat = [v for row in values for v in row] if isinstance(values[0], list) else values
    return {"dtype": "float64", "shape": shape, "data": flat}


SUPPLIED: dict[str, Any] = {
    "mlp_width": WIDTH,
    "mlp_w1": _wire(WEIGHTS["mlp_w1"], [WIDTH, 1]),
    "mlp_b1": _wire(WEIGHTS["mlp_b1"], [WIDTH]),
    "mlp_w2": _wire(WEIGHTS["mlp_w2"], [HEADS, WIDTH]),
    "mlp_b2": _wire(WEIGHTS["mlp_b2"], [HEADS]),
}


def fire_reference(nq: int, nk: int, c: float, threshold: float, eps: float = 1e-6) -> torch.Tensor:
    """MLP(x) = W2·relu(W1·x + b1) + b2 on the normalised input of every (i, j), float64 in Python."""

    def mlp(x: float) -> list[float]:
        hidden = [max(w[0] * x + b, 0.0) for w, b in zip(WEIGHTS["mlp_w1"], WEIGHTS["mlp_b1"], strict=True)]
        return [
            math.fsum(w * a for w, a in zip(row, hidden, strict=True)) + b
            for row, b in zip(WEIGHTS["mlp_w2"], WEIGHTS["mlp_b2"], strict=True)
        ]

    per_pair = [[mlp(normalised_reference(i, j, c, threshold, eps)) for j in range(nk)] for i in range(nq)]
    return torch.tensor(per_pair, dtype=torch.float64).permute(2, 0, 1)  # (Nq, Nk, H) -> (H, Nq, Nk)


def _bias(nq: int, nk: int, causal: bool = False, heads: int = HEADS, **params: Any) -> torch.Tensor:
    spec = get_method("fire")
    ctx = BiasContext(num_heads=heads, query_length=nq, key_length=nk, causal=causal, dtype=torch.float64)
    return bias_dense(spec, spec.parse_params(params), ctx)


@pytest.mark.parametrize(("nq", "nk"), [(12, 12), (5, 20), (20, 5)])
def test_bias_matches_the_float64_reference(nq: int, nk: int) -> None:
    bias = _bias(nq, nk, **SUPPLIED, L_init=8, c=0.5)
    torch.testing.assert_close(bias, fire_reference(nq, nk, c=0.5, threshold=8.0), rtol=1e-13, atol=1e-14)


def test_defaults_are_the_paper_values() -> None:
    bias = _bias(30, 30, **SUPPLIED)
    torch.testing.assert_close(bias, fire_reference(30, 30, c=0.1, threshold=512.0), rtol=1e-13, atol=1e-14)


def test_threshold_is_the_absolute_product_of_multiplier_and_length() -> None:
    flipped = _bias(12, 12, **SUPPLIED, L_init=4, L_mult=-1.5)
    torch.testing.assert_close(flipped, fire_reference(12, 12, c=0.1, threshold=6.0), rtol=1e-13, atol=1e-14)


def test_causal_form_is_the_same_formula_under_the_mask() -> None:
    causal = _bias(10, 10, causal=True, **SUPPLIED, L_init=4)
    visible = torch.arange(10)[None, :] <= torch.arange(10)[:, None]  # (N, N)
    expected = fire_reference(10, 10, c=0.1, threshold=4.0)
    torch.testing.assert_close(causal[:, visible], expected[:, visible], rtol=1e-13, atol=1e-14)
    assert bool(torch.isneginf(causal[:, ~visible]).all())


def _shift_invariant(bias: torch.Tensor, i: int, j: int) -> bool:
    return torch.equal(bias[:, i, j], bias[:, i + 1, j + 1])


def test_toeplitz_while_the_query_is_within_l() -> None:
    # thr = 16 and every query i <= 15: the normaliser is constant, B depends on i − j only
    bias = _bias(16, 16, heads=3, L_init=16)
    assert all(_shift_invariant(bias, i, j) for i in range(15) for j in range(15))


def test_not_toeplitz_beyond_l() -> None:
    # thr = 4: past it the normaliser log(c·i + 1) grows with i, so the same i − j gives other inputs
    bias = _bias(16, 16, heads=3, L_init=4)
    assert all(_shift_invariant(bias, i, j) for i in range(4) for j in range(4))
    assert not any(_shift_invariant(bias, i, i - 2) for i in range(6, 15))
    assert not get_method("fire").toeplitz


def test_seeded_mlp_follows_the_linear_default_init() -> None:
    spec = get_method("fire")
    assert spec.learned_init is not None
    width = 256
    initial = spec.learned_init(spec.parse_params({"mlp_width": width, "seed": 2}), BiasContext(64, 1, 1, False))
    shapes = {"mlp_w1": (width, 1), "mlp_b1": (width,), "mlp_w2": (64, width), "mlp_b2": (64,)}
    bounds = {"mlp_w1": 1.0, "mlp_b1": 1.0, "mlp_w2": 1 / math.sqrt(width), "mlp_b2": 1 / math.sqrt(width)}
    for name, tensor in initial.items():
        assert tensor.shape == shapes[name]
        assert tensor.abs().max().item() <= bounds[name]
        assert tensor.abs().max().item() > 0.8 * bounds[name]  # U(−bound, bound), not a narrower law


def test_weights_are_all_or_none() -> None:
    with pytest.raises(pydantic.ValidationError):
        get_method("fire").parse_params({"mlp_w1": SUPPLIED["mlp_w1"]})


WIDER_W2 = _wire([[0.0] * WIDTH] * (HEADS + 1), [HEADS + 1, WIDTH])


@pytest.mark.parametrize(
    ("field", "heads", "override"),
    [
        ("mlp_w1", HEADS, {"mlp_w1": _wire([0.0] * WIDTH, [WIDTH])}),
        ("mlp_b1", HEADS, {"mlp_b1": _wire([0.0] * (WIDTH + 1), [WIDTH + 1])}),
        ("mlp_w2", HEADS + 1, {}),  # w2 is (H, width): one more head than it has rows
        ("mlp_b2", HEADS + 1, {"mlp_w2": WIDER_W2}),  # w2 fits H + 1 heads, b2 still has H entries
    ],
)
def test_weights_of_the_wrong_shape_name_the_field(field: str, heads: int, override: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as info:
        _bias(4, 4, heads=heads, **{**SUPPLIED, **override})
    assert info.value.loc == ("params", field, "shape")


@pytest.mark.parametrize("params", [{"c": 0.0}, {"eps": 0.0}, {"L_init": -1}, {"mlp_width": 0}])
def test_invalid_parameters_are_rejected(params: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        get_method("fire").parse_params(params)
