"""ViT's learned 2D grid of position embeddings, resized to the requested grid.

Methods: ``vit_learned`` (kind ``absolute``, axes 2). The learned table is stored as checkpoints store it,
(prefix_tokens + Hs·Ws, D): the prefix rows (CLS, distillation, registers) first, then the grid rows in
row-major order. A request for another grid (H', W') keeps the prefix rows and resamples the grid part with
one of the kernels the reference loaders use:

    vit_linear         google-research/vision_transformer checkpoint loader, scipy.ndimage.zoom(order=1):
                       linear with the corners preserved (= F.interpolate bilinear, align_corners=True)
    bicubic            DeiT / MAE interpolate_pos_embed: F.interpolate bicubic, align_corners=False (a = −0.75)
    bicubic_antialias  timm resample_abs_pos_embed: bicubic with antialias=True (PIL's kernel, a = −0.5)
    nearest            TimeSformer: F.interpolate nearest (source index floor(i·Hs/H'))

The interpolation runs in float32 (float64 for float64 requests), in timm's (1, D, Hs, Ws) channels-last
layout, and the result is cast to the request's dtype last.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import AbsoluteContext, Extent, ParamCost
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn
from posenc.tensors import to_torch

VIT_PAPER = (
    "Dosovitskiy et al. An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale (ICLR 2021). "
    "https://arxiv.org/abs/2010.11929; resizing as in Touvron et al. DeiT (ICML 2021) "
    "https://arxiv.org/abs/2012.12877 and He et al. MAE (CVPR 2022) https://arxiv.org/abs/2111.06377"
)

Kernel = Literal["vit_linear", "bicubic", "bicubic_antialias", "nearest"]
GridAxis = Annotated[int, Field(ge=1, le=65536)]

# A seeded table is drawn at its full source grid; this caps it (256 MiB of float32), since the gateway's
# output budget only sees the resized (H', W', D) result and a large source_grid would allocate unchecked.
MAX_SEEDED_TABLE_ELEMENTS = 2**26
INIT_STD = 0.02  # ViT JAX AddPositionEmbs: normal(stddev=0.02)


class VitLearnedParams(MethodParams):
    table: TensorIn | None = Field(
        default=None,
        description="the learned embedding as checkpoints store it, (prefix_tokens + Hs·Ws, dim): prefix rows "
        "first, then the grid rows row-major; omit to draw it from the seed at the source grid",
    )
    source_grid: list[GridAxis] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="[Hs, Ws], the grid the table was trained for; default: the square grid of the table's "
        "rows minus the prefix rows, or the requested grid when no table is given",
    )
    prefix_tokens: int = Field(
        default=1,
        ge=0,
        le=1024,
        description="rows before the grid rows (1: ViT's CLS; DeiT adds a distillation token, others registers), "
        "kept unchanged by the resize",
    )
    kernel: Kernel = Field(
        default="bicubic",
        description="resampling kernel: vit_linear (original ViT, scipy zoom order 1, corners aligned), bicubic "
        "(DeiT/MAE, a = −0.75), bicubic_antialias (timm resample_abs_pos_embed), nearest (TimeSformer)",
    )
    seed: Seed = Field(default=0, description="seed of the N(0, 0.02) initialisation when no table is supplied")


# ------------------------------------------------------------------------------------------------ resize
def resize_grid(grid_table: torch.Tensor, new_grid: tuple[int, int], kernel: Kernel = "bicubic") -> torch.Tensor:
    """Resample a grid of embeddings (Hs, Ws, D) to (H', W', D) with ``kernel`` (see the module docstring).

    Interpolates in float32 (float64 for a float64 table) and returns the input's dtype; differentiable.
    The same grid returns ``grid_table`` itself (exact identity, as timm). The input is laid out as timm lays
    it, (1, D, Hs, Ws) with channels-last strides: torch's antialiased bicubic on a contiguous input ignores
    the rows when the output is one column wide. A one-channel input is also contiguous, so
    it is doubled to two identical channels for the call.
    """
    if grid_table.dim() != 3:
        raise ValueError(f"grid_table must be (Hs, Ws, D), got shape {list(grid_table.shape)}")
    height, width = new_grid
    if height < 1 or width < 1:
        raise ValueError(f"new_grid must be at least [1, 1], got {list(new_grid)}")
    if (height, width) == tuple(grid_table.shape[:2]):
        return grid_table
    dim = grid_table.shape[-1]
    work = torch.float64 if grid_table.dtype == torch.float64 else torch.float32
    grid = grid_table.to(work).contiguous()  # (Hs, Ws, D)
    if dim == 1:
        grid = torch.cat((grid, grid), dim=-1)  # (Hs, Ws, 2): a real channels-last layout
    images = grid.unsqueeze(0).permute(0, 3, 1, 2)  # (1, max(D, 2), Hs, Ws), channels-last strides
    size = (height, width)
    if kernel == "vit_linear":
        resized = F.interpolate(images, size=size, mode="bilinear", align_corners=True)
    elif kernel == "bicubic":
        resized = F.interpolate(images, size=size, mode="bicubic", align_corners=False)
    elif kernel == "bicubic_antialias":
        resized = F.interpolate(images, size=size, mode="bicubic", align_corners=False, antialias=True)
    else:
        resized = F.interpolate(images, size=size, mode="nearest")
    out = resized[0].permute(1, 2, 0)[..., :dim]  # (H', W', D): the doubled channel of D = 1 dropped
    return out.to(grid_table.dtype)


# ------------------------------------------------------------------------------------------------ tables
def _request_grid(ctx: AbsoluteContext) -> tuple[int, int]:
    if len(ctx.grid) != 2:
        raise InvalidInput(("grid",), f"vit_learned needs grid [H, W], got {len(ctx.grid)} axis(es)")
    if min(ctx.grid) < 1:
        raise InvalidInput(("grid",), f"vit_learned needs a grid of at least [1, 1], got {list(ctx.grid)}")
    return ctx.grid[0], ctx.grid[1]


def _inferred_source_grid(grid_rows: int, prefix_tokens: int) -> tuple[int, int]:
    """The square grid of ``grid_rows`` cells; any other count is ambiguous and needs source_grid."""
    side = math.isqrt(grid_rows)
    if side * side != grid_rows:
        raise InvalidInput(
            ("params", "source_grid"),
            f"the table has {grid_rows} grid rows (after {prefix_tokens} prefix rows), not a square number, so "
            "its grid is ambiguous: give source_grid [Hs, Ws]",
        )
    return side, side


def _seeded_rows(params: VitLearnedParams, grid_rows: int, dim: int) -> torch.Tensor:
    """E (prefix_tokens + grid_rows, D) ~ N(0, 0.02²), float32 on the CPU from torch.Generator().manual_seed(seed).

    The prefix block is drawn first, then the grid block with a second draw from the same generator, so the
    prefix rows depend on (seed, prefix_tokens, D) only, never on the grid (``vit_learned_prefix`` does not
    know the grid). ``grid_rows = 0`` draws the prefix rows alone.
    """
    rows = params.prefix_tokens + grid_rows
    if rows * dim > MAX_SEEDED_TABLE_ELEMENTS:
        raise InvalidInput(
            ("params", "source_grid"),
            f"a seeded table of {rows} x {dim} values is over the limit of {MAX_SEEDED_TABLE_ELEMENTS}; "
            "supply the table or make the source grid smaller",
        )
    generator = torch.Generator().manual_seed(params.seed)
    prefix = torch.randn((params.prefix_tokens, dim), generator=generator, dtype=torch.float32)  # (T, D)
    grid = torch.randn((grid_rows, dim), generator=generator, dtype=torch.float32)  # (Hs·Ws, D)
    return torch.cat((prefix, grid)) * INIT_STD  # (T + Hs·Ws, D)


def _supplied_table(
    params: VitLearnedParams, supplied: TensorIn | torch.Tensor, dim: int
) -> tuple[torch.Tensor, tuple[int, int]]:
    """params.table (prefix_tokens + Hs·Ws, D) decoded, in its own dtype and device, and its grid (Hs, Ws).

    Checked: 2-D, floating point, ``dim`` wide, at least one grid row, and prefix_tokens + Hs·Ws rows for
    source_grid (or a square number of grid rows when source_grid is absent).
    """
    table = to_torch(supplied, ("params", "table"))
    if table.dim() != 2:
        raise InvalidInput(
            ("params", "table", "shape"),
            f"expected (prefix_tokens + Hs·Ws, dim), a 2-D table, got shape {list(table.shape)}",
        )
    if not table.is_floating_point():
        raise InvalidInput(("params", "table", "dtype"), f"a table must be floating point, got {table.dtype}")
    if table.shape[1] != dim:
        raise InvalidInput(("params", "table"), f"the table is {table.shape[1]} wide but the requested dim is {dim}")
    grid_rows = table.shape[0] - params.prefix_tokens
    if grid_rows < 1:
        raise InvalidInput(
            ("params", "table", "shape"),
            f"the table has {table.shape[0]} rows, no grid rows after prefix_tokens={params.prefix_tokens}",
        )
    if params.source_grid is None:
        return table, _inferred_source_grid(grid_rows, params.prefix_tokens)
    source = (params.source_grid[0], params.source_grid[1])
    if grid_rows != source[0] * source[1]:
        expected = [params.prefix_tokens + source[0] * source[1], dim]
        raise InvalidInput(
            ("params", "table", "shape"),
            f"expected (prefix_tokens + Hs·Ws, dim) = {expected} for source_grid {list(source)}, "
            f"got {list(table.shape)}",
        )
    return table, source


def vit_learned_init(params: VitLearnedParams, ctx: AbsoluteContext) -> dict[str, torch.Tensor]:
    """The seeded table (prefix_tokens + Hs·Ws, D), float32 on the CPU (see ``MethodSpec.learned_init``).

    (Hs, Ws) is params.source_grid, else ctx.grid (the training grid). A non-square training grid needs
    source_grid, since the method infers only square grids from a table's row count.
    """
    train = _request_grid(ctx)
    if params.source_grid is not None:
        source = (params.source_grid[0], params.source_grid[1])
    elif train[0] == train[1]:
        source = train
    else:
        raise InvalidInput(
            ("params", "source_grid"),
            f"training at the non-square grid {list(train)} needs source_grid={list(train)}: a table's grid is "
            "inferred only when it is square",
        )
    return {"table": _seeded_rows(params, source[0] * source[1], ctx.dim)}


def vit_learned_prefix(params: VitLearnedParams, ctx: AbsoluteContext, count: int) -> torch.Tensor:
    """The first ``count`` prefix rows of the table, unchanged: (count, D) in ctx.dtype. Prefix token p
    (position −(p + 1)) gets row p; more prefix tokens than prefix_tokens rows is an error.

    ctx.grid is not read (the applier passes (count,)): the seeded prefix rows do not depend on the grid.
    """
    if count > params.prefix_tokens:
        raise InvalidInput(
            ("prefix",),
            f"{count} prefix tokens but the table holds prefix_tokens={params.prefix_tokens} prefix rows",
        )
    if params.table is None:
        table = _seeded_rows(params, 0, ctx.dim)  # (T, D)
    else:
        table, _ = _supplied_table(params, params.table, ctx.dim)
    return table[:count].to(device=ctx.device, dtype=ctx.dtype)  # (count, D)


# Work units per tap of F.interpolate (one source value weighted into one output value), measured on CPU.
INTERPOLATION_TAP_WORK = 2
TAPS = {"nearest": 1, "vit_linear": 4, "bicubic": 16, "bicubic_antialias": 16}


def vit_learned_cost(params: VitLearnedParams, extent: Extent) -> ParamCost:
    """The seeded (prefix_tokens + Hs·Ws, D) table, drawn for the grid and again for the prefix rows, with its
    concatenated and scaled copies; the grid part in the interpolation's dtype and layout; and the resize to the
    requested grid (N = H'·W' cells): taps per output value by kernel (1, 4, 16; antialiased bicubic's grow with
    the downscale, at most 16 per source value), INTERPOLATION_TAP_WORK each. Hs·Ws is the supplied table's,
    else source_grid, else the requested grid (then nothing is resized)."""
    dim, target = extent.width, extent.queries
    if params.table is not None:
        source = max((params.table.shape or [0])[0] - params.prefix_tokens, 0)
    elif params.source_grid is not None:
        source = params.source_grid[0] * params.source_grid[1]
    else:
        source = target
    seeded = params.table is None
    rows = params.prefix_tokens + source
    resized = source != target or (params.table is None and params.source_grid is not None)
    taps = TAPS[params.kernel] * max(source, target) * dim if resized else 0
    return ParamCost(
        drawn=(rows + params.prefix_tokens) * dim if seeded else 0,
        elements=(2 * rows if seeded else 0) * dim + 2 * source * dim + (2 * target * dim if resized else 0),
        passes=taps * INTERPOLATION_TAP_WORK // 12,
        params=("source_grid", "prefix_tokens") if seeded else ("table",),
    )


@register(
    "vit_learned",
    axes=2,
    kind=Kind.ABSOLUTE,
    params=VitLearnedParams,
    paper=VIT_PAPER,
    learned=True,
    learned_init=vit_learned_init,
    param_cost=vit_learned_cost,
    prefix_encoding=vit_learned_prefix,
    conventions={
        "table_layout": "(prefix_tokens + Hs·Ws, D): prefix rows first, then the grid rows row-major "
        "(token t = r·Ws + c), as ViT/timm checkpoints store pos_embed",
        "prefix": "prefix rows are never resized; prefix token p (position −(p + 1)) gets row p "
        "(prefix_encoding); default prefix_tokens = 1 (CLS)",
        "kernel": "default bicubic (DeiT/MAE, align_corners=False, a = −0.75); vit_linear = original ViT "
        "scipy.ndimage.zoom(order=1) = bilinear align_corners=True; bicubic_antialias = timm's default "
        "(PIL kernel a = −0.5, differs even when upsampling); nearest = TimeSformer (torch 'nearest', not "
        "'nearest-exact')",
        "interpolation_dtype": "float32 (float64 for float64 requests), cast to the request dtype last; "
        "half-precision tables are upcast first (timm, MAE)",
        "same_grid": "a request at the source grid returns the table's grid rows unchanged (no interpolation)",
        "source_grid": "default: square from the table's row count minus prefix_tokens (timm, MAE assume "
        "square); a non-square count needs source_grid; without a table, the request grid",
        "init": "N(0, 0.02) (ViT JAX AddPositionEmbs; timm uses trunc_normal_(std=.02)), drawn in float32 on the "
        "CPU from torch.Generator().manual_seed(seed): the (prefix_tokens, D) block first, then the (Hs·Ws, D) "
        "grid block, so the seeded prefix rows do not depend on the grid",
        "output": "(H', W', D), the grid part only; no CLS row (see prefix_encoding)",
    },
)
def vit_learned(params: VitLearnedParams, ctx: AbsoluteContext) -> torch.Tensor:
    """ViT learned 2D grid PE resized to the request grid: P = resize(E_grid, (H', W')), E ∈ R^{(T + Hs·Ws)×D}.

    E is the learned table (T prefix rows, then the Hs×Ws grid rows row-major; ViT, Dosovitskiy 2021). The grid
    rows, reshaped to (Hs, Ws, D), are resampled to (H', W', D) with the chosen kernel (original ViT's
    linear zoom, DeiT/MAE's bicubic, timm's antialiased bicubic or TimeSformer's nearest) in float32; the
    prefix rows are left out here and returned unchanged by the prefix encoding. Without a supplied table E is
    drawn from N(0, 0.02²) at the source grid.
    """
    request = _request_grid(ctx)
    if params.table is not None:
        table, (src_h, src_w) = _supplied_table(params, params.table, ctx.dim)
    else:
        src_h, src_w = (params.source_grid[0], params.source_grid[1]) if params.source_grid is not None else request
        table = _seeded_rows(params, src_h * src_w, ctx.dim)
    work = table[params.prefix_tokens :].to(compute_dtype(ctx.dtype))  # (Hs·Ws, D) in float32 or float64
    grid = work.reshape(src_h, src_w, ctx.dim)  # (Hs, Ws, D)
    resized = resize_grid(grid, request, params.kernel)  # (H', W', D)
    return resized.to(device=ctx.device, dtype=ctx.dtype)
