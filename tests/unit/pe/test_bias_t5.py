"""T5 relative position buckets (Raffel et al., JMLR 2020): hand-computed golden tables T6, a bucket
reference written here from the formula, and the bias B[h, i, j] = E[bucket(j − i), h]."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import BiasContext, bias_dense, bias_toeplitz, get_method
from posenc.pe.t5 import relative_position_bucket

# golden T6, num_buckets = 32, max_distance = 128, n = j − i: (lo, hi, bucket) runs over −130 … 130
T6_BIDIRECTIONAL = [
    (-130, -91, 15), (-90, -64, 14), (-63, -46, 13), (-45, -32, 12), (-31, -23, 11), (-22, -16, 10),
    (-15, -12, 9), (-11, -8, 8), (-7, -7, 7), (-6, -6, 6), (-5, -5, 5), (-4, -4, 4), (-3, -3, 3),
    (-2, -2, 2), (-1, -1, 1), (0, 0, 0), (1, 1, 17), (2, 2, 18), (3, 3, 19), (4, 4, 20), (5, 5, 21),
    (6, 6, 22), (7, 7, 23), (8, 11, 24), (12, 15, 25), (16, 22, 26), (23, 31, 27), (32, 45, 28),
    (46, 63, 29), (64, 90, 30), (91, 130, 31),
]  # fmt: skip
T6_CAUSAL = [
    (-130, -113, 31), (-112, -99, 30), (-98, -87, 29), (-86, -77, 28), (-76, -67, 27), (-66, -59, 26),
    (-58, -52, 25), (-51, -46, 24), (-45, -40, 23), (-39, -35, 22), (-34, -31, 21), (-30, -27, 20),
    (-26, -24, 19), (-23, -21, 18), (-20, -19, 17), (-18, -16, 16),
    *[(-r, -r, r) for r in range(15, 0, -1)],
    (0, 130, 0),
]  # fmt: skip


def _expand(runs: list[tuple[int, int, int]]) -> list[int]:
    return [bucket for lo, hi, bucket in runs for _ in range(lo, hi + 1)]


def reference_bucket(n: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> int:
    """The bucket of n = j − i from the paper's rule, in Python integers and a float64 log."""
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    offset = per_direction if bidirectional and n > 0 else 0
    r = abs(n) if bidirectional else max(-n, 0)
    max_exact = per_direction // 2
    if r < max_exact:
        return offset + r
    logarithmic = max_exact + int(
        math.log(r / max_exact) / math.log(max_distance / max_exact) * (per_direction - max_exact)
    )
    return offset + min(logarithmic, per_direction - 1)


@pytest.mark.parametrize(("bidirectional", "runs"), [(True, T6_BIDIRECTIONAL), (False, T6_CAUSAL)])
def test_t6_golden_buckets(bidirectional: bool, runs: list[tuple[int, int, int]]) -> None:
    relative = torch.arange(-130, 131)
    expected = _expand(runs)
    assert len(expected) == 261
    assert relative_position_bucket(relative, bidirectional, 32, 128).tolist() == expected


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (64, 256), (16, 50), (8, 20)])
def test_buckets_match_the_reference_rule(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    relative = torch.arange(-1000, 1001)
    got = relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    assert got.dtype == torch.int64
    expected = [reference_bucket(n, bidirectional, num_buckets, max_distance) for n in relative.tolist()]
    assert got.tolist() == expected


def test_buckets_keep_the_shape_of_the_input() -> None:
    relative = torch.arange(-6, 6).reshape(3, 4)  # (3, 4)
    assert relative_position_bucket(relative, True).shape == (3, 4)


def _table(heads: int, num_buckets: int = 32) -> list[float]:
    """A table whose every entry is distinct, so a wrong bucket or head shows: E[b, h] = b + h / 100."""
    return [b + h / 100 for b in range(num_buckets) for h in range(heads)]


def _bias(heads: int, nq: int, nk: int, causal: bool, **params: Any) -> torch.Tensor:
    spec = get_method("t5")
    ctx = BiasContext(num_heads=heads, query_length=nq, key_length=nk, causal=causal, dtype=torch.float64)
    return bias_dense(spec, spec.parse_params(params), ctx)


def _supplied(heads: int, num_buckets: int = 32) -> dict[str, Any]:
    return {"table": {"dtype": "float64", "shape": [num_buckets, heads], "data": _table(heads, num_buckets)}}


def t5_reference(heads: int, nq: int, nk: int, bidirectional: bool) -> torch.Tensor:
    """B[h, i, j] = E[bucket(j − i), h] with the distinct-entry table above, float64."""
    rows = [
        [[reference_bucket(j - i, bidirectional) + h / 100 for j in range(nk)] for i in range(nq)] for h in range(heads)
    ]
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize(("nq", "nk"), [(40, 40), (20, 150), (150, 20)])
def test_bidirectional_bias_gathers_the_table(nq: int, nk: int) -> None:
    bias = _bias(3, nq, nk, causal=False, **_supplied(3))
    assert torch.equal(bias, t5_reference(3, nq, nk, bidirectional=True))


def test_causal_bias_uses_the_unidirectional_buckets() -> None:
    bias = _bias(3, 150, 150, causal=True, **_supplied(3))
    visible = torch.arange(150)[None, :] <= torch.arange(150)[:, None]  # (N, N)
    expected = t5_reference(3, 150, 150, bidirectional=False)
    assert torch.equal(bias[:, visible], expected[:, visible])
    assert bool(torch.isneginf(bias[:, ~visible]).all())


def test_explicit_direction_overrides_the_mask() -> None:
    # an encoder-style table under a causal mask: bidirectional buckets, future masked
    bias = _bias(2, 30, 30, causal=True, bidirectional=True, **_supplied(2))
    visible = torch.arange(30)[None, :] <= torch.arange(30)[:, None]  # (N, N)
    assert torch.equal(bias[:, visible], t5_reference(2, 30, 30, bidirectional=True)[:, visible])
    unmasked = _bias(2, 30, 30, causal=False, bidirectional=False, **_supplied(2))
    assert torch.equal(unmasked, t5_reference(2, 30, 30, bidirectional=False))


def test_toeplitz_table_holds_one_bucket_per_offset() -> None:
    spec = get_method("t5")
    ctx = BiasContext(num_heads=2, query_length=5, key_length=200, causal=False, dtype=torch.float64)
    table = bias_toeplitz(spec, spec.parse_params(_supplied(2)), ctx)
    # column t is i − j = t − (Nk − 1), so n = j − i = Nk − 1 − t
    expected = [[reference_bucket(199 - t, True) + h / 100 for t in range(204)] for h in range(2)]
    assert torch.equal(table, torch.tensor(expected, dtype=torch.float64))


def test_far_distances_share_the_last_bucket() -> None:
    bias = _bias(1, 1, 1000, causal=False, **_supplied(1))
    # query 0, keys 128 … 999 are all after it: the last bidirectional bucket, 31
    assert bool((bias[0, 0, 128:] == 31.0).all())


def test_seeded_table_scales_with_init_std() -> None:
    unit = _bias(4, 9, 9, causal=False, seed=3)
    scaled = _bias(4, 9, 9, causal=False, seed=3, init_std=0.02)
    torch.testing.assert_close(scaled, unit * 0.02, rtol=1e-6, atol=0)


def test_seeded_table_is_standard_normal_by_default() -> None:
    spec = get_method("t5")
    ctx = BiasContext(num_heads=64, query_length=1, key_length=1, causal=False)
    assert spec.learned_init is not None
    table = spec.learned_init(spec.parse_params({"num_buckets": 1024, "max_distance": 4096}), ctx)["table"]
    assert table.shape == (1024, 64)
    assert abs(table.mean().item()) < 0.01
    assert table.std().item() == pytest.approx(1.0, abs=0.01)


def test_table_of_the_wrong_shape_names_the_field() -> None:
    with pytest.raises(InvalidInput) as info:
        _bias(3, 4, 4, causal=False, **_supplied(2))
    assert info.value.loc == ("params", "table", "shape")


@pytest.mark.parametrize(
    "params",
    [
        {"num_buckets": 2},
        {"max_distance": 8},
        {"max_distance": 16, "bidirectional": False},
        {"num_buckets": 64, "max_distance": 16},
    ],
)
def test_parameters_without_a_log_range_are_rejected(params: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        get_method("t5").parse_params(params)


def test_an_unset_direction_is_checked_against_the_requests_direction() -> None:
    # max_distance 10 has a log range for bidirectional buckets (max_exact 8) but not causal ones (16)
    not_causal = _bias(2, 6, 6, causal=False, max_distance=10)
    explicit = _bias(2, 6, 6, causal=False, max_distance=10, bidirectional=True)
    torch.testing.assert_close(not_causal, explicit, rtol=0, atol=0)
    with pytest.raises(InvalidInput) as info:
        _bias(2, 6, 6, causal=True, max_distance=10)
    assert info.value.loc == ("params", "max_distance")
    assert "16" in info.value.msg


def test_bidirectional_tables_allow_a_shorter_max_distance() -> None:
    # bidirectional: max_exact = 32 // 4 = 8 < 16, so max_distance 16 has a log range
    params = get_method("t5").parse_params({"max_distance": 16, "bidirectional": True})
    assert params.max_distance == 16  # type: ignore[attr-defined]
