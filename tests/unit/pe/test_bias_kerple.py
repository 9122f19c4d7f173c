"""KERPLE (Chi et al., NeurIPS 2022): hand-computed T15 goldens and float64 references of
−r1·log(1 + r2·|i − j|) and −r1·|i − j|^r2 written here from the paper's formulas."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import BiasContext, bias_dense, get_method
from posenc.pe.alibi import alibi_slopes


def _bias(
    name: str,
    heads: int,
    nq: int,
    nk: int,
    causal: bool = False,
    dtype: torch.dtype = torch.float64,
    **params: Any,
) -> torch.Tensor:
    spec = get_method(name)
    ctx = BiasContext(num_heads=heads, query_length=nq, key_length=nk, causal=causal, dtype=dtype)
    return bias_dense(spec, spec.parse_params(params), ctx)


def _distances_0_to_5(name: str, **params: Any) -> list[float]:
    # six queries against one key: B[0, i, 0] is the bias at |i − j| = i
    return _bias(name, 1, 6, 1, **params)[0, :, 0].tolist()


@pytest.mark.parametrize(
    ("r1", "r2", "golden"),
    [
        (1.0, 1.0, [0, -0.6931471806, -1.0986122887, -1.3862943611, -1.6094379124, -1.7917594692]),
        (2.0, 0.5, [0, -0.8109302162, -1.3862943611, -1.8325814637, -2.1972245773, -2.5055259370]),
    ],
)
def test_t15_log_goldens(r1: float, r2: float, golden: list[float]) -> None:
    assert _distances_0_to_5("kerple_log", r1=[r1], r2=[r2]) == pytest.approx(golden, rel=1e-10, abs=1e-12)


def test_t15_power_golden() -> None:
    golden = [0, -1, -1.4142135624, -1.7320508076, -2, -2.2360679775]
    assert _distances_0_to_5("kerple_power", r1=[1.0], r2=[0.5]) == pytest.approx(golden, rel=1e-10, abs=1e-12)


R1 = [0.3, 1.7, 0.05]
R2 = [0.9, 0.2, 1.5]


def kernel_reference(kind: str, nq: int, nk: int) -> torch.Tensor:
    """The paper's kernels on |i − j| with the per-head R1, R2 above, float64 from plain Python."""

    def value(r1: float, r2: float, distance: int) -> float:
        if kind == "log":
            return -r1 * math.log(1.0 + r2 * distance)
        return -r1 * math.pow(distance, r2)

    rows = [[[value(a, p, abs(i - j)) for j in range(nk)] for i in range(nq)] for a, p in zip(R1, R2, strict=True)]
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize(("name", "kind"), [("kerple_log", "log"), ("kerple_power", "power")])
@pytest.mark.parametrize(("nq", "nk"), [(9, 9), (4, 11), (11, 4)])
def test_bias_matches_the_float64_reference(name: str, kind: str, nq: int, nk: int) -> None:
    bias = _bias(name, 3, nq, nk, r1=R1, r2=R2)
    torch.testing.assert_close(bias, kernel_reference(kind, nq, nk), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
def test_causal_form_agrees_on_the_visible_keys(name: str) -> None:
    causal = _bias(name, 3, 8, 8, causal=True, r1=R1, r2=R2)
    visible = torch.arange(8)[None, :] <= torch.arange(8)[:, None]  # (N, N)
    expected = kernel_reference("log" if name == "kerple_log" else "power", 8, 8)
    torch.testing.assert_close(causal[:, visible], expected[:, visible], rtol=1e-14, atol=1e-15)
    assert bool(torch.isneginf(causal[:, ~visible]).all())


def test_power_with_alibi_slopes_and_unit_power_is_alibi() -> None:
    # the reference's 'original' option: r1 = ALiBi slopes, r2 = 1
    slopes = alibi_slopes(12)
    kerple = _bias("kerple_power", 12, 10, 10, r1=slopes, r2=[1.0] * 12)
    alibi = _bias("alibi", 12, 10, 10)
    torch.testing.assert_close(kerple, alibi, rtol=1e-15, atol=0)


def test_log_kernel_is_accurate_for_tiny_rates() -> None:
    # log1p: with r2 = 1e-12, −r1·log(1 + r2·d) ≈ −r1·r2·d; the naive log(1 + x) would lose it
    bias = _bias("kerple_log", 1, 4, 1, r1=[1.0], r2=[1e-12])
    assert bias[0, 3, 0].item() == pytest.approx(-3e-12, rel=1e-9)


@pytest.mark.parametrize(
    ("name", "r1_range", "r2_range"),
    [("kerple_log", (0.01, 2.0), (0.01, 1.0)), ("kerple_power", (0.01, 1.0), (0.01, 2.0))],
)
def test_seeded_parameters_follow_the_reference_init(
    name: str, r1_range: tuple[float, float], r2_range: tuple[float, float]
) -> None:
    spec = get_method(name)
    assert spec.learned_init is not None
    # 1024 uniform draws: values below the 0.01 floor are all but certain, so the clamp shows
    initial = spec.learned_init(spec.parse_params({"seed": 5}), BiasContext(1024, 1, 1, causal=False))
    for field, (low, high) in (("r1", r1_range), ("r2", r2_range)):
        values = initial[field]
        assert values.shape == (1024,)
        assert values.min().item() == pytest.approx(low, rel=1e-6)  # the floor, reached
        assert values.max().item() <= high
        assert values.max().item() > 0.9 * high  # the whole range is used
        assert values.mean().item() == pytest.approx((low + high) / 2, abs=0.1 * high)


def test_a_supplied_parameter_leaves_the_other_seeded() -> None:
    seeded = _bias("kerple_log", 3, 6, 6, seed=4)
    spec = get_method("kerple_log")
    assert spec.learned_init is not None
    r2 = spec.learned_init(spec.parse_params({"seed": 4}), BiasContext(3, 6, 6, causal=False))["r2"]
    mixed = _bias("kerple_log", 3, 6, 6, seed=4, r1=R1)
    reference = [
        [[-a * math.log1p(b * abs(i - j)) for j in range(6)] for i in range(6)]
        for a, b in zip(R1, r2.tolist(), strict=True)
    ]
    torch.testing.assert_close(mixed, torch.tensor(reference, dtype=torch.float64), rtol=1e-14, atol=1e-15)
    assert not torch.equal(mixed, seeded)


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
@pytest.mark.parametrize("field", ["r1", "r2"])
def test_one_value_per_head(name: str, field: str) -> None:
    too_few: dict[str, Any] = {field: [0.5, 0.5]}  # 2 values for 3 heads
    with pytest.raises(InvalidInput) as info:
        _bias(name, 3, 4, 4, **too_few)
    assert info.value.loc == ("params", field)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("kerple_log", {"r1": [0.0]}),
        ("kerple_log", {"r2": [-1.0]}),
        ("kerple_power", {"r1": [-0.5]}),
        ("kerple_power", {"r2": [0.0]}),
        ("kerple_power", {"r2": [2.5]}),
    ],
)
def test_out_of_range_parameters_are_rejected(name: str, params: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        get_method(name).parse_params(params)


def test_power_two_is_allowed() -> None:
    bias = _bias("kerple_power", 1, 4, 1, r1=[1.0], r2=[2.0])
    assert bias[0, :, 0].tolist() == [0.0, -1.0, -4.0, -9.0]
