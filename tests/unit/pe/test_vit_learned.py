"""ViT learned 2D grid resized to a new grid (posenc.pe.vit_learned): the hand-computed golden rows
(T17) for every kernel, float64 references of the four kernels written here from their
definitions, the identity at the source grid, the antialiased outputs one row or one column wide (a torch
bug), the prefix rows, float32 interpolation of half tables, the seeded init, gradients and errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
import torch
import torch.nn.functional as F

from posenc.errors import InvalidInput
from posenc.pe import AbsoluteContext, encoding, get_method
from posenc.pe.vit_learned import Kernel, VitLearnedParams, resize_grid
from posenc.schemas.methods import Kind

KERNELS: tuple[Kernel, ...] = ("vit_linear", "bicubic", "bicubic_antialias", "nearest")
SPEC = get_method("vit_learned")

# golden T17: the grid [[0,1,4],[1,2,5],[4,5,8]] resized from 3×3 to 5×5, row 0 (float32 script output)
T17_GRID = [[0.0, 1.0, 4.0], [1.0, 2.0, 5.0], [4.0, 5.0, 8.0]]
T17_ROW0 = {
    "vit_linear": [0.0, 0.5, 1.0, 2.5, 4.0],
    "bicubic": [-0.192, 0.0760009, 0.9040002, 2.8120005, 4.192001],
    "bicubic_antialias": [-0.1509433, 0.1409462, 0.9245283, 2.9170659, 4.150943],
    "nearest": [0.0, 0.0, 1.0, 1.0, 4.0],
}

Weights = list[dict[int, float]]  # one {source index: weight} per output index


def params(**fields: Any) -> VitLearnedParams:
    """Params from the wire fields; a torch ``table`` goes in as training passes it (model_copy)."""
    table = fields.pop("table") if isinstance(fields.get("table"), torch.Tensor) else None
    parsed = SPEC.parse_params(fields)
    assert isinstance(parsed, VitLearnedParams)
    return parsed if table is None else parsed.model_copy(update={"table": table})


def encode(p: VitLearnedParams, grid: tuple[int, ...], dim: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return encoding(SPEC, p, AbsoluteContext(grid=grid, dim=dim, dtype=dtype))


def with_prefix(grid: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
    """The checkpoint layout (T + Hs·Ws, D) of a grid (Hs, Ws, D) and prefix rows (T, D)."""
    return torch.cat((prefix, grid.reshape(-1, grid.shape[-1])))


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Standard normal values, float32 draws from a seeded generator cast to ``dtype``."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def as_wire(table: torch.Tensor) -> dict[str, Any]:
    return {"dtype": "float64", "shape": list(table.shape), "data": table.reshape(-1).tolist()}


# --------------------------------------------------------------- references (from the kernels' definitions)
def cubic(x: float, a: float) -> float:
    """Keys' cubic convolution kernel with parameter a (−0.75 torch bicubic, −0.5 PIL/antialias)."""
    x = abs(x)
    if x < 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def linear_corners(n_in: int, n_out: int) -> Weights:
    """scipy.ndimage.zoom(order=1): output i samples input coordinate i·(n_in − 1)/(n_out − 1), linearly."""
    rows: Weights = []
    for i in range(n_out):
        src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        lo = math.floor(src)
        hi, t = min(lo + 1, n_in - 1), src - lo
        row = {lo: 1.0 - t}
        row[hi] = row.get(hi, 0.0) + t
        rows.append(row)
    return rows


def bicubic_half_pixel(n_in: int, n_out: int) -> Weights:
    """Bicubic a = −0.75 at src = (i + 0.5)·n_in/n_out − 0.5, taps x0 − 1 … x0 + 2 clamped to the edge."""
    rows: Weights = []
    for i in range(n_out):
        src = (i + 0.5) * n_in / n_out - 0.5
        x0 = math.floor(src)
        t = src - x0
        row: dict[int, float] = {}
        for tap, distance in zip(range(x0 - 1, x0 + 3), (t + 1, t, 1 - t, 2 - t), strict=True):
            index = min(max(tap, 0), n_in - 1)
            row[index] = row.get(index, 0.0) + cubic(distance, -0.75)
        rows.append(row)
    return rows


def bicubic_antialias(n_in: int, n_out: int) -> Weights:
    """PIL's resampling filter (what torch's antialias=True computes): bicubic a = −0.5 stretched by the
    downscale factor, centre (i + 0.5)·scale, support 2·max(scale, 1), weights normalised to sum 1."""
    scale = n_in / n_out
    support = 2.0 * max(scale, 1.0)
    stretch = 1.0 / scale if scale >= 1 else 1.0
    rows: Weights = []
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        raw = {j: cubic((j - center + 0.5) * stretch, -0.5) for j in range(lo, hi)}
        total = sum(raw.values())
        rows.append({j: w / total for j, w in raw.items()})
    return rows


def nearest(n_in: int, n_out: int) -> Weights:
    """torch 'nearest': output i takes input floor(i·n_in/n_out)."""
    return [{min(i * n_in // n_out, n_in - 1): 1.0} for i in range(n_out)]


REFERENCE_WEIGHTS: dict[str, Callable[[int, int], Weights]] = {
    "vit_linear": linear_corners,
    "bicubic": bicubic_half_pixel,
    "bicubic_antialias": bicubic_antialias,
    "nearest": nearest,
}


def reference_resize(grid: torch.Tensor, size: tuple[int, int], kernel: Kernel) -> torch.Tensor:
    """out[i, j] = Σ_a Σ_b w_rows[i][a] · w_cols[j][b] · grid[a, b], plain loops in float64."""
    weights = REFERENCE_WEIGHTS[kernel]
    rows, cols = weights(grid.shape[0], size[0]), weights(grid.shape[1], size[1])
    values = grid.to(torch.float64)
    out = torch.zeros((*size, grid.shape[-1]), dtype=torch.float64)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            for a, wa in row.items():
                for b, wb in col.items():
                    out[i, j] += wa * wb * values[a, b]
    return out


# --------------------------------------------------------------------------------------------- registry
def test_registration() -> None:
    assert SPEC.kind is Kind.ABSOLUTE
    assert SPEC.family == "vit_learned"
    assert SPEC.axes == 2
    assert SPEC.learned
    assert SPEC.learned_init is not None
    assert SPEC.prefix_encoding is not None
    assert {"kernel", "prefix", "init", "source_grid", "interpolation_dtype"} <= set(SPEC.conventions)
    defaults = VitLearnedParams()
    assert (defaults.kernel, defaults.prefix_tokens, defaults.table, defaults.source_grid) == ("bicubic", 1, None, None)


# ----------------------------------------------------------------------------------------------- goldens
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_t17_golden_row(kernel: Kernel, dtype: torch.dtype) -> None:
    grid = torch.tensor(T17_GRID, dtype=torch.float64)[:, :, None]  # (3, 3, 1)
    table = with_prefix(grid, torch.tensor([[7.0]], dtype=torch.float64))  # (1 + 9, 1)
    out = encode(params(table=as_wire(table), kernel=kernel), (5, 5), 1, dtype)
    assert out.shape == (5, 5, 1)
    assert out.dtype == dtype
    torch.testing.assert_close(
        out[0, :, 0].double(), torch.tensor(T17_ROW0[kernel], dtype=torch.float64), atol=2e-6, rtol=0
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_reference_kernels_reproduce_the_goldens(kernel: Kernel) -> None:
    grid = torch.tensor(T17_GRID, dtype=torch.float64)[:, :, None]
    row = reference_resize(grid, (5, 5), kernel)[0, :, 0]
    torch.testing.assert_close(row, torch.tensor(T17_ROW0[kernel], dtype=torch.float64), atol=2e-6, rtol=0)


SIZES = [
    ((3, 3), (5, 5)),  # up
    ((7, 7), (3, 3)),  # down (the antialias filter stretches)
    ((4, 6), (9, 2)),  # non-square, up one axis and down the other
    ((5, 4), (3, 1)),  # one column wide (torch's antialias bug on a contiguous input)
    ((5, 4), (1, 3)),  # one row high
    ((4, 5), (7, 1)),
    ((6, 6), (1, 1)),
    ((1, 5), (3, 4)),  # a one-row source
    ((5, 1), (2, 7)),  # a one-column source
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(("source", "target"), SIZES)
def test_matches_the_reference(kernel: Kernel, source: tuple[int, int], target: tuple[int, int]) -> None:
    grid = randn(*source, 3, seed=source[0] * 31 + target[1])  # (Hs, Ws, 3)
    table = with_prefix(grid, torch.zeros(1, 3, dtype=torch.float64))
    expected = reference_resize(grid, target, kernel)
    out64 = encode(params(table=table, kernel=kernel, source_grid=list(source)), target, 3, torch.float64)
    torch.testing.assert_close(out64, expected, atol=1e-12, rtol=0)
    out32 = encode(params(table=table, kernel=kernel, source_grid=list(source)), target, 3, torch.float32)
    torch.testing.assert_close(out32.double(), expected, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------- properties
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("source", [(4, 4), (3, 5)])
def test_same_grid_is_the_identity(kernel: Kernel, dtype: torch.dtype, source: tuple[int, int]) -> None:
    table = randn(2 + source[0] * source[1], 6, dtype=dtype)
    out = encode(params(table=table, kernel=kernel, prefix_tokens=2, source_grid=list(source)), source, 6, dtype)
    assert torch.equal(out, table[2:].reshape(*source, 6))


@pytest.mark.parametrize("dim", [1, 2, 5])
@pytest.mark.parametrize("target", [(3, 1), (1, 3), (7, 1), (1, 1)])
def test_antialias_one_row_or_one_column(dim: int, target: tuple[int, int]) -> None:
    """torch's antialiased bicubic on a contiguous (1, D, H, W) input ignores H when the output is one column
    wide; timm's permuted layout avoids it, as does the method (also for D = 1)."""
    grid = randn(5, 4, dim, seed=dim)
    out = resize_grid(grid, target, "bicubic_antialias")
    torch.testing.assert_close(out, reference_resize(grid, target, "bicubic_antialias"), atol=1e-12, rtol=0)
    if dim > 1:
        # timm resample_abs_pos_embed's layout: reshape (1, Hs, Ws, D), permute to (1, D, Hs, Ws)
        timm_layout = grid.reshape(1, 5, 4, dim).permute(0, 3, 1, 2)
        timm = F.interpolate(timm_layout, size=target, mode="bicubic", antialias=True)[0].permute(1, 2, 0)
        torch.testing.assert_close(out, timm, atol=1e-12, rtol=0)
    if target[0] > 1:
        assert not torch.allclose(out[0], out[-1]), "the rows of a one-column output must differ"


def test_prefix_rows_are_unchanged_and_left_out_of_the_grid() -> None:
    grid = randn(4, 4, 3, seed=1)
    prefix = randn(3, 3, seed=2)
    p = params(table=with_prefix(grid, prefix), prefix_tokens=3)
    ctx = AbsoluteContext(grid=(3,), dim=3, dtype=torch.float64)  # what the applier passes: grid (count,)
    assert SPEC.prefix_encoding is not None
    assert torch.equal(SPEC.prefix_encoding(p, ctx, 3), prefix)
    assert torch.equal(SPEC.prefix_encoding(p, ctx, 1), prefix[:1])
    assert SPEC.prefix_encoding(p, ctx, 0).shape == (0, 3)
    torch.testing.assert_close(encode(p, (6, 2), 3), reference_resize(grid, (6, 2), "bicubic"), atol=1e-12, rtol=0)


def test_more_prefix_tokens_than_prefix_rows_is_refused() -> None:
    p = params(prefix_tokens=1)
    assert SPEC.prefix_encoding is not None
    with pytest.raises(InvalidInput) as error:
        SPEC.prefix_encoding(p, AbsoluteContext(grid=(2, 2), dim=4), 2)
    assert error.value.loc == ("prefix",)
    assert "prefix_tokens=1" in error.value.msg


def test_no_prefix_rows() -> None:
    grid = randn(3, 3, 2)
    out = encode(params(table=grid.reshape(9, 2), prefix_tokens=0, kernel="vit_linear"), (5, 4), 2)
    torch.testing.assert_close(out, reference_resize(grid, (5, 4), "vit_linear"), atol=1e-12, rtol=0)


@pytest.mark.parametrize("table_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kernel", KERNELS)
def test_half_tables_interpolate_in_float32(table_dtype: torch.dtype, out_dtype: torch.dtype, kernel: Kernel) -> None:
    table = randn(1 + 16, 4, dtype=table_dtype)
    out = encode(params(table=table, kernel=kernel), (3, 6), 4, out_dtype)
    assert out.dtype == out_dtype
    grid32 = table[1:].float().reshape(4, 4, 4)
    expected = reference_resize(grid32, (3, 6), kernel).float().to(out_dtype)  # float32, rounded once
    if out_dtype == torch.float32:
        # float32 rounding only; interpolating in the half dtype itself would be off by about 1e-3
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    else:
        # one bf16 rounding of the float32 result: at most one unit in the last place away from it
        torch.testing.assert_close(out.float(), expected.float(), atol=0, rtol=2**-7)
    # resize_grid keeps the table's dtype but still interpolates in float32
    assert resize_grid(table[1:].reshape(4, 4, 4), (3, 6), kernel).dtype == table_dtype


def test_wire_table_equals_tensor_table() -> None:
    table = randn(1 + 9, 4)
    torch.testing.assert_close(encode(params(table=as_wire(table)), (4, 5), 4), encode(params(table=table), (4, 5), 4))


# ------------------------------------------------------------------------------------------- seeded init
def test_seeded_table_at_the_request_grid() -> None:
    out = encode(params(seed=3), (4, 6), 32, torch.float32)
    assert out.shape == (4, 6, 32)
    assert torch.equal(out, encode(params(seed=3), (4, 6), 32, torch.float32))
    assert not torch.equal(out, encode(params(seed=4), (4, 6), 32, torch.float32))
    assert abs(float(out.std()) - 0.02) < 0.002
    generator = torch.Generator().manual_seed(3)
    prefix = torch.randn(1, 32, generator=generator) * 0.02  # the prefix block is drawn first
    grid = torch.randn(24, 32, generator=generator) * 0.02
    assert torch.equal(out, grid.reshape(4, 6, 32))
    assert SPEC.prefix_encoding is not None
    ctx = AbsoluteContext(grid=(1,), dim=32)  # the applier passes grid (count,)
    assert torch.equal(SPEC.prefix_encoding(params(seed=3), ctx, 1), prefix)


def test_seeded_prefix_rows_do_not_depend_on_the_grid() -> None:
    assert SPEC.learned_init is not None
    p = params(seed=9, prefix_tokens=2)
    small = SPEC.learned_init(p, AbsoluteContext(grid=(2, 2), dim=16))["table"]
    large = SPEC.learned_init(p, AbsoluteContext(grid=(7, 7), dim=16))["table"]
    assert torch.equal(small[:2], large[:2])
    assert SPEC.prefix_encoding is not None
    assert torch.equal(SPEC.prefix_encoding(p, AbsoluteContext(grid=(2,), dim=16), 2), small[:2])


def test_learned_init_matches_the_seeded_table() -> None:
    assert SPEC.learned_init is not None
    p = params(seed=5, prefix_tokens=2, kernel="bicubic_antialias")
    initial = SPEC.learned_init(p, AbsoluteContext(grid=(4, 4), dim=8))
    assert set(initial) == {"table"}
    assert initial["table"].shape == (2 + 16, 8)
    assert initial["table"].dtype == torch.float32
    # no table and no source_grid: seeded at the request grid; with the table supplied it is inferred as 4×4
    torch.testing.assert_close(
        encode(p.model_copy(update=initial), (4, 4), 8, torch.float32), encode(p, (4, 4), 8, torch.float32)
    )
    resized = encode(p.model_copy(update=initial), (2, 3), 8, torch.float32)
    seeded_source = encode(
        params(seed=5, prefix_tokens=2, kernel="bicubic_antialias", source_grid=[4, 4]), (2, 3), 8, torch.float32
    )
    assert torch.equal(resized, seeded_source)
    rect = params(source_grid=[2, 5])
    assert SPEC.learned_init(rect, AbsoluteContext(grid=(2, 5), dim=8))["table"].shape == (1 + 10, 8)


def test_learned_init_on_a_non_square_grid_needs_source_grid() -> None:
    assert SPEC.learned_init is not None
    with pytest.raises(InvalidInput) as error:
        SPEC.learned_init(params(), AbsoluteContext(grid=(2, 5), dim=8))
    assert error.value.loc == ("params", "source_grid")


@pytest.mark.parametrize("kernel", KERNELS)
def test_gradients_reach_the_table(kernel: Kernel) -> None:
    assert SPEC.learned_init is not None
    p = params(kernel=kernel, prefix_tokens=1)
    weight = torch.nn.Parameter(SPEC.learned_init(p, AbsoluteContext(grid=(4, 4), dim=8))["table"])
    trained = p.model_copy(update={"table": weight})
    ctx = AbsoluteContext(grid=(3, 5), dim=8)
    out = encoding(SPEC, trained, ctx)
    assert SPEC.prefix_encoding is not None
    (out.square().sum() + SPEC.prefix_encoding(trained, ctx, 1).sum()).backward()
    assert weight.grad is not None
    assert bool(weight.grad[1:].abs().sum() > 0)
    assert torch.equal(weight.grad[0], torch.ones(8))  # the prefix row, passed through unchanged


# ------------------------------------------------------------------------------------------------ errors
def test_width_mismatch_names_both_widths() -> None:
    with pytest.raises(InvalidInput) as error:
        encode(params(table=torch.zeros(1 + 9, 6)), (3, 3), 8)
    assert error.value.loc == ("params", "table")
    assert "6" in error.value.msg
    assert "8" in error.value.msg


def test_non_square_row_count_needs_source_grid() -> None:
    with pytest.raises(InvalidInput) as error:
        encode(params(table=torch.zeros(1 + 6, 4)), (2, 3), 4)
    assert error.value.loc == ("params", "source_grid")
    assert "6 grid rows" in error.value.msg
    assert encode(params(table=torch.zeros(1 + 6, 4), source_grid=[2, 3]), (2, 3), 4).shape == (2, 3, 4)


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"table": torch.zeros(1 + 9, 4), "source_grid": [2, 4]}, ("params", "table", "shape")),
        ({"table": torch.zeros(1, 4)}, ("params", "table", "shape")),
        ({"table": torch.zeros(2, 5, 4)}, ("params", "table", "shape")),
        ({"table": torch.zeros(1 + 9, 4, dtype=torch.int64)}, ("params", "table", "dtype")),
        ({"source_grid": [8192, 8192]}, ("params", "source_grid")),
    ],
)
def test_bad_tables_are_refused(fields: dict[str, Any], loc: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput) as error:
        encode(params(**fields), (3, 3), 4)
    assert error.value.loc == loc


@pytest.mark.parametrize("grid", [(9,), (2, 3, 3)])
def test_grid_must_have_two_axes(grid: tuple[int, ...]) -> None:
    with pytest.raises(InvalidInput) as error:
        encode(params(), grid, 4)
    assert error.value.loc == ("grid",)


@pytest.mark.parametrize(
    "raw",
    [
        {"kernel": "bilinear"},
        {"prefix_tokens": -1},
        {"source_grid": [3, 3, 3]},
        {"source_grid": [0, 3]},
        {"seed": -1},
    ],
)
def test_params_are_validated(raw: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        SPEC.parse_params(raw)


def test_resize_grid_contract() -> None:
    grid = randn(3, 4, 2, dtype=torch.float32)
    assert resize_grid(grid, (3, 4)) is grid
    assert resize_grid(grid, (5, 2), "nearest").shape == (5, 2, 2)
    with pytest.raises(ValueError, match="Hs, Ws, D"):
        resize_grid(grid.reshape(12, 2), (3, 3))
    with pytest.raises(ValueError, match="at least"):
        resize_grid(grid, (0, 3))
