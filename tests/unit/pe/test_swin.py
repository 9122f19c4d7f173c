"""Swin / BEiT 2D relative position bias (Liu et al., ICCV 2021; Bao et al., ICLR 2022): golden index tables T16
and hand-computed resize rows T17, a float64 loop reference written here from the formula
B[h, a, b] = T[(y_a − y_b + Wh − 1)(2Ww − 1) + (x_a − x_b + Ww − 1), h], BEiT's CLS rows, resize and errors."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
import torch

import posenc.pe.swin  # noqa: F401  (registers "swin")
from posenc.errors import InvalidInput
from posenc.pe import BiasContext, bias_dense, get_method
from posenc.pe.registry import MethodSpec
from posenc.pe.swin import num_relative_distance, relative_position_index, resize_table
from posenc.schemas.methods import Kind


def _spec() -> MethodSpec:
    return get_method("swin")


def _ctx(heads: int, nq: int = 1, nk: int = 1, dtype: torch.dtype = torch.float64) -> BiasContext:
    return BiasContext(num_heads=heads, query_length=nq, key_length=nk, causal=False, dtype=dtype)


def _grid(height: int, width: int, row0: int = 0, col0: int = 0) -> torch.Tensor:
    """(height·width, 2) int64 (row, col) coordinates of a grid, row-major, starting at (row0, col0)."""
    return torch.tensor([[row0 + r, col0 + c] for r in range(height) for c in range(width)], dtype=torch.int64)


def _random_table(rows: int, heads: int, seed: int = 0) -> torch.Tensor:
    return torch.randn((rows, heads), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _bias(
    params: dict[str, Any], q_pos: torch.Tensor, k_pos: torch.Tensor, heads: int, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    spec = _spec()
    out: torch.Tensor = spec.fn(spec.parse_params(params), q_pos, k_pos, _ctx(heads, len(q_pos), len(k_pos), dtype))
    return out


def _with_table(params: dict[str, Any], table: torch.Tensor) -> dict[str, Any]:
    """Params with ``table`` in the JSON wire form (float64, flat row-major data)."""
    wire = {"dtype": "float64", "shape": list(table.shape), "data": table.reshape(-1).tolist()}
    return {**params, "table": wire}


def swin_reference(
    table: torch.Tensor, window: tuple[int, int], q_pos: torch.Tensor, k_pos: torch.Tensor
) -> torch.Tensor:
    """B[h, a, b] = T[idx(a, b), h] by plain loops over the paper's index formula, float64."""
    wh, ww = window
    heads = table.shape[1]
    rows = []
    for h in range(heads):
        rows.append(
            [
                [
                    float(
                        table[(int(qa[0]) - int(kb[0]) + wh - 1) * (2 * ww - 1) + (int(qa[1]) - int(kb[1]) + ww - 1), h]
                    )
                    for kb in k_pos
                ]
                for qa in q_pos
            ]
        )
    return torch.tensor(rows, dtype=torch.float64)


# ----------------------------------------------------------------------------------------- index tables
def test_t16_swin_index_2x2() -> None:
    expected = [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]]
    index = relative_position_index(2, 2, beit_cls=False)
    assert index.dtype == torch.int64
    assert index.tolist() == expected
    assert num_relative_distance(2, 2, False) == 9


def test_t16_swin_index_3x2_first_row() -> None:
    index = relative_position_index(3, 2, beit_cls=False)
    assert index.shape == (6, 6)
    assert index[0].tolist() == [7, 6, 4, 3, 1, 0]
    assert num_relative_distance(3, 2, False) == 15


def test_beit_index_puts_the_cls_entries_where_beit_does() -> None:
    # 2x2 window, R = 9 + 3 = 12: row 0 = R − 3 = 9 (cls→token), column 0 = R − 2 = 10 (token→cls),
    # [0, 0] = R − 1 = 11 (cls→cls, written last); the patches are Swin's 2x2 index shifted by one
    expected = [
        [11, 9, 9, 9, 9],
        [10, 4, 3, 1, 0],
        [10, 5, 4, 2, 1],
        [10, 7, 6, 4, 3],
        [10, 8, 7, 5, 4],
    ]
    assert relative_position_index(2, 2, beit_cls=True).tolist() == expected
    assert num_relative_distance(2, 2, True) == 12


@pytest.mark.parametrize(("wh", "ww"), [(2, 2), (3, 2), (2, 5), (4, 4), (1, 3)])
def test_bias_over_a_window_gathers_the_index_matrix(wh: int, ww: int) -> None:
    rows = num_relative_distance(wh, ww, False)
    table = torch.arange(rows, dtype=torch.float64)[:, None] * 10 + torch.arange(2, dtype=torch.float64)  # (R, 2)
    pos = _grid(wh, ww)
    bias = _bias(_with_table({"window": [wh, ww]}, table), pos, pos, heads=2)
    index = relative_position_index(wh, ww, beit_cls=False)
    assert torch.equal(bias[0], index.to(torch.float64) * 10)
    assert torch.equal(bias[1], index.to(torch.float64) * 10 + 1)


# ------------------------------------------------------------------------------------------ reference
@pytest.mark.parametrize(("wh", "ww", "heads"), [(2, 2, 1), (3, 5, 3), (7, 7, 4), (4, 1, 2)])
def test_bias_matches_the_loop_reference(wh: int, ww: int, heads: int) -> None:
    table = _random_table(num_relative_distance(wh, ww, False), heads, seed=wh * 10 + ww)
    q_pos = _grid(wh, ww)
    k_pos = _grid(wh, ww)[::2]  # Nq != Nk
    bias = _bias(_with_table({"window": [wh, ww]}, table), q_pos, k_pos, heads)
    assert bias.shape == (heads, len(q_pos), len(k_pos))
    assert bias.dtype == torch.float64
    assert torch.equal(bias, swin_reference(table, (wh, ww), q_pos, k_pos))


def test_beit_patch_entries_ignore_the_cls_rows() -> None:
    wh, ww, heads = 3, 4, 2
    table = _random_table(num_relative_distance(wh, ww, True), heads, seed=5)
    pos = _grid(wh, ww)
    bias = _bias(_with_table({"window": [wh, ww], "beit_cls": True}, table), pos, pos, heads)
    assert torch.equal(bias, swin_reference(table, (wh, ww), pos, pos))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_is_the_reference_rounded_once(dtype: torch.dtype) -> None:
    table = _random_table(num_relative_distance(3, 3, False), 2, seed=1)
    pos = _grid(3, 3)
    bias = _bias(_with_table({"window": [3, 3]}, table), pos, pos, heads=2, dtype=dtype)
    assert bias.dtype == dtype
    assert torch.equal(bias, swin_reference(table, (3, 3), pos, pos).to(torch.float32).to(dtype))


def test_bias_depends_only_on_the_2d_offset() -> None:
    wh, ww, heads = 4, 3, 3
    params = _with_table({"window": [wh, ww]}, _random_table(num_relative_distance(wh, ww, False), heads))
    pos = _grid(wh, ww)
    base = _bias(params, pos, pos, heads)
    for shift in ([5, 0], [0, 7], [100, 250], [3, 1]):
        moved = pos + torch.tensor(shift)
        assert torch.equal(_bias(params, moved, moved, heads), base)
    # two windows of a larger image: the bias of a window does not depend on where it sits
    other = _grid(wh, ww, row0=8, col0=12)
    assert torch.equal(_bias(params, other, other, heads), base)


def test_any_positions_within_the_window_are_accepted() -> None:
    # keys are not one window's tokens, but every offset fits a 3x3 window
    q_pos = torch.tensor([[10, 10], [11, 9]])
    k_pos = torch.tensor([[9, 11], [12, 10], [11, 8], [10, 10]])
    table = _random_table(num_relative_distance(3, 3, False), 2, seed=7)
    bias = _bias(_with_table({"window": [3, 3]}, table), q_pos, k_pos, heads=2)
    assert torch.equal(bias, swin_reference(table, (3, 3), q_pos, k_pos))


def test_offsets_are_query_minus_key() -> None:
    # window 2x2: idx = (dy + 1)·3 + (dx + 1); query one row below the key: dy = +1, dx = 0 -> 7
    table = torch.arange(9, dtype=torch.float64)[:, None]  # (9, 1): T[r] = r
    bias = _bias(_with_table({"window": [2, 2]}, table), torch.tensor([[1, 0]]), torch.tensor([[0, 0]]), heads=1)
    assert bias.tolist() == [[[7.0]]]
    bias = _bias(_with_table({"window": [2, 2]}, table), torch.tensor([[0, 0]]), torch.tensor([[0, 1]]), heads=1)
    assert bias.tolist() == [[[3.0]]]  # dy = 0, dx = −1


def test_through_bias_dense_with_explicit_positions() -> None:
    spec = _spec()
    table = _random_table(num_relative_distance(2, 3, False), 2)
    params = spec.parse_params(_with_table({"window": [2, 3]}, table))
    pos = _grid(2, 3)
    bias = bias_dense(spec, params, _ctx(2, 6, 6), pos, pos)
    assert torch.equal(bias, swin_reference(table, (2, 3), pos, pos))


def test_empty_positions_give_an_empty_bias() -> None:
    pos = _grid(2, 2)
    bias = _bias({"window": [2, 2]}, pos[:0], pos, heads=3)
    assert bias.shape == (3, 0, 4)


# --------------------------------------------------------------------------------------------- prefix
def test_prefix_bias_comes_from_the_last_three_rows() -> None:
    spec = _spec()
    heads = 3
    table = _random_table(num_relative_distance(2, 3, True), heads, seed=11)
    params = spec.parse_params(_with_table({"window": [2, 3], "beit_cls": True}, table))
    assert spec.prefix_bias is not None
    values = spec.prefix_bias(params, _ctx(heads))
    assert values.shape == (heads, 3)
    assert values.dtype == torch.float64
    rows = table.shape[0]
    for h in range(heads):
        # [prefix→token, token→prefix, prefix→prefix] = T[R − 3], T[R − 2], T[R − 1]
        assert values[h].tolist() == [table[rows - 3, h].item(), table[rows - 2, h].item(), table[rows - 1, h].item()]


def test_prefix_bias_matches_beits_index_matrix() -> None:
    spec = _spec()
    table = _random_table(num_relative_distance(2, 2, True), 2, seed=3)
    params = spec.parse_params(_with_table({"window": [2, 2], "beit_cls": True}, table))
    assert spec.prefix_bias is not None
    values = spec.prefix_bias(params, _ctx(2))  # (H, 3)
    full = table[relative_position_index(2, 2, beit_cls=True)]  # (5, 5, H): BEiT's gathered bias
    assert torch.equal(values[:, 0], full[0, 1])  # cls→token
    assert torch.equal(values[:, 1], full[1, 0])  # token→cls
    assert torch.equal(values[:, 2], full[0, 0])  # cls→cls


def test_prefix_bias_is_zero_without_beit_cls() -> None:
    spec = _spec()
    assert spec.prefix_bias is not None
    values = spec.prefix_bias(spec.parse_params({"window": [2, 2]}), _ctx(4, dtype=torch.float32))
    assert values.dtype == torch.float32
    assert torch.equal(values, torch.zeros(4, 3))


# --------------------------------------------------------------------------------------------- resize
@pytest.mark.parametrize("kernel", ["bicubic", "bilinear"])
@pytest.mark.parametrize("beit_cls", [False, True])
def test_resize_to_the_same_window_is_the_identity(kernel: str, beit_cls: bool) -> None:
    table = _random_table(num_relative_distance(3, 4, beit_cls), 2, seed=2)
    params = _with_table({"window": [3, 4], "beit_cls": beit_cls}, table)
    pos = _grid(3, 4)
    plain = _bias(params, pos, pos, heads=2)
    resized = _bias({**params, "target_window": [3, 4], "resize_kernel": kernel}, pos, pos, heads=2)
    assert torch.equal(resized, plain)


# golden T17: [[0,1,4],[1,2,5],[4,5,8]] from 3x3 to 5x5, row 0 (a 2x2 window's table to a 3x3 window's);
# printed from float32, so compared to 5e-6
T17_ROW0 = {
    "bilinear": [0.0, 0.4, 1.0, 2.8, 4.0],
    "bicubic": [-0.192, 0.0760009, 0.9040002, 2.8120005, 4.192001],
}


@pytest.mark.parametrize("kernel", ["bilinear", "bicubic"])
def test_t17_resize_rows(kernel: str) -> None:
    grid = torch.tensor([[0.0, 1, 4], [1, 2, 5], [4, 5, 8]], dtype=torch.float64)
    table = grid.reshape(9, 1)  # (9, 1): the (2Wh − 1, 2Ww − 1) = (3, 3) image of one head
    resized = resize_table(table, (2, 2), (3, 3), kernel, beit_cls=False)  # type: ignore[arg-type]
    assert resized.shape == (25, 1)
    torch.testing.assert_close(
        resized.reshape(5, 5)[0], torch.tensor(T17_ROW0[kernel], dtype=torch.float64), atol=5e-6, rtol=0
    )
    # and through the bias: query at the top-left, keys at dy = −2, dx = −2 … 2 in a 3x3 window
    params = _with_table({"window": [2, 2], "target_window": [3, 3], "resize_kernel": kernel}, table)
    q_pos = torch.tensor([[0, 0]])
    k_pos = torch.tensor([[2, c] for c in range(2, -3, -1)])
    bias = _bias(params, q_pos, k_pos, heads=1)
    torch.testing.assert_close(bias[0, 0], torch.tensor(T17_ROW0[kernel], dtype=torch.float64), atol=5e-6, rtol=0)


def test_resize_keeps_the_beit_rows() -> None:
    table = _random_table(num_relative_distance(2, 2, True), 3, seed=4)
    resized = resize_table(table, (2, 2), (4, 3), "bicubic", beit_cls=True)
    assert resized.shape == (num_relative_distance(4, 3, True), 3)
    assert torch.equal(resized[-3:], table[-3:])
    spec = _spec()
    params = spec.parse_params(_with_table({"window": [2, 2], "beit_cls": True, "target_window": [4, 3]}, table))
    assert spec.prefix_bias is not None
    assert torch.equal(spec.prefix_bias(params, _ctx(3)), table[-3:].T)


def test_resize_follows_torch_interpolate_per_head() -> None:
    heads = 2
    table = _random_table(num_relative_distance(3, 2, False), heads, seed=9)
    resized = resize_table(table, (3, 2), (5, 4), "bilinear", beit_cls=False)
    image = table.T.reshape(1, heads, 5, 3)  # (1, H, 2Wh − 1, 2Ww − 1)
    expected = torch.nn.functional.interpolate(image, size=(9, 7), mode="bilinear", align_corners=False)
    assert torch.equal(resized, expected.reshape(heads, 63).T)


# --------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("q_pos", "k_pos"),
    [
        ([[0, 0]], [[3, 0]]),  # dy = −3, window 3x4 allows |dy| <= 2
        ([[3, 0]], [[0, 0]]),  # dy = +3
        ([[0, 0]], [[0, 4]]),  # dx = −4, |dx| <= 3
        ([[0, 5]], [[0, 1]]),  # dx = +4
    ],
)
def test_offsets_outside_the_window_are_refused(q_pos: list[list[int]], k_pos: list[list[int]]) -> None:
    with pytest.raises(InvalidInput) as info:
        _bias({"window": [3, 4]}, torch.tensor(q_pos), torch.tensor(k_pos), heads=2)
    assert info.value.loc == ("positions",)
    assert "3x4" in info.value.msg


def test_target_window_widens_the_accepted_offsets() -> None:
    q_pos, k_pos = torch.tensor([[0, 0]]), torch.tensor([[3, 0]])
    bias = _bias({"window": [3, 3], "target_window": [4, 4]}, q_pos, k_pos, heads=2)
    assert bias.shape == (2, 1, 1)
    with pytest.raises(InvalidInput) as info:
        _bias({"window": [5, 5], "target_window": [2, 2]}, q_pos, k_pos, heads=2)
    assert "2x2" in info.value.msg


def test_out_of_window_is_refused_before_the_output_is_allocated() -> None:
    # 2^20 queries and keys: the (H, Nq, Nk) bias would be 4 TiB, so only a check made first can answer
    n = 1 << 20
    q_pos = torch.zeros((n, 2), dtype=torch.int64)
    k_pos = torch.zeros((n, 2), dtype=torch.int64)
    k_pos[-1, 1] = 2
    with pytest.raises(InvalidInput) as info:
        _bias({"window": [2, 2], "table": None}, q_pos, k_pos, heads=1, dtype=torch.float32)
    assert info.value.loc == ("positions",)


@pytest.mark.parametrize("shape", [[(3, 3)], [(1, 4, 2)], [(4,)]])
def test_positions_must_be_row_col_pairs(shape: list[tuple[int, ...]]) -> None:
    pos = torch.zeros(shape[0], dtype=torch.int64)
    with pytest.raises(InvalidInput) as info:
        _bias({"window": [2, 2]}, pos, pos, heads=1)
    assert info.value.loc == ("positions",)


@pytest.mark.parametrize(
    ("params", "rows", "heads"),
    [
        ({"window": [2, 2]}, 12, 2),  # a BEiT-size table without beit_cls
        ({"window": [2, 2], "beit_cls": True}, 9, 2),  # a Swin-size table with beit_cls
        ({"window": [2, 3]}, 15, 3),  # wrong number of heads (ctx has 2)
    ],
)
def test_tables_of_the_wrong_shape_name_the_field(params: dict[str, Any], rows: int, heads: int) -> None:
    pos = _grid(2, 2)
    with pytest.raises(InvalidInput) as info:
        _bias(_with_table(params, _random_table(rows, heads)), pos, pos, heads=2)
    assert info.value.loc[:2] == ("params", "table")


def test_a_flat_table_names_the_field() -> None:
    pos = _grid(2, 2)
    with pytest.raises(InvalidInput) as info:
        _bias(_with_table({"window": [2, 2]}, torch.zeros(18, dtype=torch.float64)), pos, pos, heads=2)
    assert info.value.loc[:2] == ("params", "table")


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"window": [2]},
        {"window": [2, 2, 2]},
        {"window": [0, 2]},
        {"window": [2, 2], "target_window": [3, 0]},
        {"window": [2, 2], "resize_kernel": "nearest"},
        {"window": [2, 2], "init": "normal"},
        {"window": [2, 2], "unknown": 1},
    ],
)
def test_invalid_params_are_rejected(params: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        _spec().parse_params(params)


def test_a_seeded_table_past_the_size_limit_is_refused() -> None:
    with pytest.raises(InvalidInput) as info:
        _bias({"window": [1024, 1024]}, _grid(1, 1), _grid(1, 1), heads=32)
    assert info.value.loc == ("params", "window")
    with pytest.raises(InvalidInput) as info:
        _bias({"window": [2, 2], "target_window": [1024, 1024]}, _grid(1, 1), _grid(1, 1), heads=32)
    assert info.value.loc == ("params", "target_window")


# ------------------------------------------------------------------------------------ learned / seeded
def test_registration() -> None:
    spec = _spec()
    assert spec.kind is Kind.BIAS
    assert spec.axes == 2
    assert spec.learned
    assert spec.per_layer
    assert not spec.toeplitz
    assert spec.learned_init is not None
    assert spec.prefix_bias is not None
    for key in ("offset", "init", "resize", "beit_cls"):
        assert key in spec.conventions


def test_swin_init_is_a_seeded_normal_of_std_002() -> None:
    spec = _spec()
    assert spec.learned_init is not None
    params = spec.parse_params({"window": [32, 32]})
    table = spec.learned_init(params, _ctx(64))["table"]
    assert table.shape == (63 * 63, 64)
    assert table.dtype == torch.float32
    assert table.std().item() == pytest.approx(0.02, rel=0.01)
    assert abs(table.mean().item()) < 1e-3
    assert torch.equal(spec.learned_init(params, _ctx(64))["table"], table)  # deterministic in the seed
    other = spec.learned_init(spec.parse_params({"window": [32, 32], "seed": 1}), _ctx(64))["table"]
    assert not torch.equal(other, table)


def test_beit_init_is_zeros_and_init_overrides_it() -> None:
    spec = _spec()
    assert spec.learned_init is not None
    beit = spec.learned_init(spec.parse_params({"window": [3, 3], "beit_cls": True}), _ctx(2))["table"]
    assert beit.shape == (28, 2)
    assert torch.equal(beit, torch.zeros(28, 2))
    swin_zeros = spec.learned_init(spec.parse_params({"window": [3, 3], "init": "zeros"}), _ctx(2))["table"]
    assert torch.equal(swin_zeros, torch.zeros(25, 2))
    beit_normal = spec.learned_init(
        spec.parse_params({"window": [3, 3], "beit_cls": True, "init": "trunc_normal"}), _ctx(2)
    )["table"]
    assert beit_normal.abs().sum() > 0


def test_seeded_bias_uses_the_learned_init_table() -> None:
    spec = _spec()
    assert spec.learned_init is not None
    params = spec.parse_params({"window": [3, 2], "seed": 5})
    table = spec.learned_init(params, _ctx(3))["table"].to(torch.float64)
    pos = _grid(3, 2)
    assert torch.equal(_bias({"window": [3, 2], "seed": 5}, pos, pos, heads=3), swin_reference(table, (3, 2), pos, pos))


def test_gradients_reach_the_table() -> None:
    spec = _spec()
    wh, ww, heads = 3, 2, 2
    table = _random_table(num_relative_distance(wh, ww, False), heads).requires_grad_(True)
    params = spec.parse_params({"window": [wh, ww]}).model_copy(update={"table": table})
    pos = _grid(wh, ww)
    bias = spec.fn(params, pos, pos, _ctx(heads, len(pos), len(pos)))
    bias.sum().backward()
    assert table.grad is not None
    # each row receives one unit per (query, key) pair that gathers it
    counts = torch.bincount(relative_position_index(wh, ww, False).reshape(-1), minlength=table.shape[0])
    assert torch.equal(table.grad, counts.to(torch.float64)[:, None].expand(-1, heads))


@pytest.mark.parametrize("kernel", ["bicubic", "bilinear"])
def test_gradients_reach_the_table_through_the_resize(kernel: str) -> None:
    spec = _spec()
    table = _random_table(num_relative_distance(2, 2, True), 2).requires_grad_(True)
    update = {"table": table, "target_window": [3, 4], "resize_kernel": kernel}
    params = spec.parse_params({"window": [2, 2], "beit_cls": True}).model_copy(update=update)
    pos = _grid(3, 4)
    spec.fn(params, pos, pos, _ctx(2, len(pos), len(pos))).sum().backward()
    assert table.grad is not None
    assert bool((table.grad[:9] != 0).any())
    assert torch.equal(table.grad[9:], torch.zeros(3, 2, dtype=torch.float64))  # CLS rows: not in patch entries
    assert spec.prefix_bias is not None
    (prefix_grad,) = torch.autograd.grad(spec.prefix_bias(params, _ctx(2)).sum(), table)
    assert torch.equal(prefix_grad[:9], torch.zeros(9, 2, dtype=torch.float64))
    assert torch.equal(prefix_grad[9:], torch.ones(3, 2, dtype=torch.float64))
