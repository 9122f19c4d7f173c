"""Swin / BEiT 2D relative position bias: one learned scalar per head and 2D offset inside a window
(Liu et al., ICCV 2021; Bao et al., ICLR 2022).

Methods: ``swin`` (kind ``bias``, axes 2, learned). B[h, a, b] = T[idx(a, b), h] with (dy, dx) = query minus key
on each axis, shifted into [0, 2W − 2], idx = dy·(2Ww − 1) + dx. ``beit_cls`` adds BEiT's three CLS rows at the
end of the table, returned to the applier through ``prefix_bias``. ``target_window`` resizes the table, viewed as
(2Wh − 1, 2Ww − 1) per head, to a new window (Swin's fine-tuning loader). Index layout as
``microsoft/Swin-Transformer:models/swin_transformer.py:WindowAttention`` and
``microsoft/unilm:beit/modeling_finetune.py:RelativePositionBias``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype, learned_tensors
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import BiasContext, Extent, ParamCost
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

SWIN_PAPER = (
    "Liu et al. Swin Transformer: Hierarchical Vision Transformer using Shifted Windows (ICCV 2021). "
    "https://arxiv.org/abs/2103.14030; Bao et al. BEiT: BERT Pre-Training of Image Transformers (ICLR 2022). "
    "https://arxiv.org/abs/2106.08254"
)
# The table is drawn or resized whole: this caps rows × heads (256 MiB of float32), as for absolute tables.
MAX_TABLE_ELEMENTS = 2**26
BEIT_EXTRA_ROWS = 3  # cls→token, token→cls, cls→cls, the last three rows of a BEiT table
SWIN_INIT_STD = 0.02
ResizeKernel = Literal["bicubic", "bilinear"]
WindowSide = Annotated[int, Field(ge=1, le=1024)]


class SwinParams(MethodParams):
    window: list[WindowSide] = Field(
        min_length=2,
        max_length=2,
        description="[Wh, Ww], the window the table was built for (Swin: 7 or 12; BEiT: the patch grid, 14)",
    )
    table: TensorIn | None = Field(
        default=None,
        description="the learned T, ((2Wh − 1)(2Ww − 1) [+ 3 with beit_cls], num_heads), Swin's and BEiT's "
        "relative_position_bias_table; omit to initialise it from seed",
    )
    beit_cls: bool = Field(
        default=False,
        description="BEiT's table: three extra last rows (cls→token, token→cls, cls→cls) for the prefix token",
    )
    init: Literal["trunc_normal", "zeros"] | None = Field(
        default=None,
        description="seeded table: trunc_normal (Swin, std 0.02) or zeros (BEiT); None: zeros with beit_cls, "
        "trunc_normal without",
    )
    seed: Seed = Field(default=0, description="seed of the initialisation when no table is supplied")
    target_window: list[WindowSide] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="[Wh', Ww']: interpolate the table to this window before use; None: use it as it is",
    )
    resize_kernel: ResizeKernel = Field(
        default="bicubic",
        description="bicubic: torch bicubic, align_corners=False (Swin's own load_pretrained); bilinear: torch "
        "bilinear, align_corners=False. timm's resize_rel_pos_bias_table (geometric grid) is not implemented",
    )


def num_relative_distance(window_h: int, window_w: int, beit_cls: bool) -> int:
    """R, the rows of the table: (2Wh − 1)(2Ww − 1), plus BEiT's three CLS rows with ``beit_cls``."""
    return (2 * window_h - 1) * (2 * window_w - 1) + (BEIT_EXTRA_ROWS if beit_cls else 0)


def relative_position_index(window_h: int, window_w: int, beit_cls: bool) -> torch.Tensor:
    """Swin's (WhWw, WhWw) or BEiT's (WhWw + 1, WhWw + 1) int64 index matrix over a window's tokens.

    Tokens are numbered row-major, a = y·Ww + x; idx(a, b) = (y_a − y_b + Wh − 1)(2Ww − 1) + (x_a − x_b + Ww − 1).
    BEiT puts its CLS first (token 0) and fills, in this order, row 0 with R − 3 (cls→token), column 0 with R − 2
    (token→cls) and [0, 0] with R − 1 (cls→cls), R = num_relative_distance: the corner is written last.
    """
    rows = torch.arange(window_h, dtype=torch.int64).repeat_interleave(window_w)  # (WhWw,): y of each token
    cols = torch.arange(window_w, dtype=torch.int64).repeat(window_h)  # (WhWw,): x of each token
    dy = rows[:, None] - rows[None, :] + (window_h - 1)  # (WhWw, WhWw)
    dx = cols[:, None] - cols[None, :] + (window_w - 1)  # (WhWw, WhWw)
    patches = dy * (2 * window_w - 1) + dx  # (WhWw, WhWw)
    if not beit_cls:
        return patches
    total = num_relative_distance(window_h, window_w, True)
    tokens = window_h * window_w
    index = torch.zeros((tokens + 1, tokens + 1), dtype=torch.int64)  # (WhWw + 1, WhWw + 1)
    index[1:, 1:] = patches
    index[0, :] = total - 3
    index[:, 0] = total - 2
    index[0, 0] = total - 1
    return index


def _check_table_size(rows: int, heads: int, loc: tuple[str | int, ...]) -> None:
    if rows * heads > MAX_TABLE_ELEMENTS:
        raise InvalidInput(
            loc,
            f"a table of {rows} x {heads} values is over the limit of {MAX_TABLE_ELEMENTS}; use a smaller window",
        )


def _initial_table(params: SwinParams, num_heads: int) -> torch.Tensor:
    """The seeded (R, H) float32 table, drawn on the CPU from torch.Generator().manual_seed(seed)."""
    rows = num_relative_distance(params.window[0], params.window[1], params.beit_cls)
    _check_table_size(rows, num_heads, ("params", "window"))
    init = params.init if params.init is not None else ("zeros" if params.beit_cls else "trunc_normal")
    table = torch.zeros((rows, num_heads), dtype=torch.float32)
    if init == "zeros":
        return table
    generator = torch.Generator().manual_seed(params.seed)
    # timm's trunc_normal_(std=.02) cuts at the absolute values ±2 (±100 std): in effect N(0, 0.02²)
    return torch.nn.init.trunc_normal_(table, mean=0.0, std=SWIN_INIT_STD, a=-2.0, b=2.0, generator=generator)


def swin_learned_init(params: SwinParams, ctx: BiasContext) -> dict[str, torch.Tensor]:
    """The paper's initial table for ``window`` (not ``target_window``) from params.seed (see ``MethodSpec``)."""
    return {"table": _initial_table(params, ctx.num_heads)}


def _table(params: SwinParams, ctx: BiasContext, dtype: torch.dtype) -> torch.Tensor:
    """T (R, H) for ``window`` in ``dtype`` on the context's device: supplied (shape-checked) or seeded."""
    height, width = params.window
    rows = num_relative_distance(height, width, params.beit_cls)
    label = "[(2·Wh − 1)(2·Ww − 1) + 3, num_heads]" if params.beit_cls else "[(2·Wh − 1)(2·Ww − 1), num_heads]"
    return learned_tensors(
        params,
        {"table": (rows, ctx.num_heads)},
        lambda: swin_learned_init(params, ctx),
        device=ctx.device,
        dtype=dtype,
        labels={"table": label},
    )["table"]


def resize_table(
    table: torch.Tensor,
    window: tuple[int, int],
    target_window: tuple[int, int],
    kernel: ResizeKernel,
    beit_cls: bool,
) -> torch.Tensor:
    """T (R, H) for ``window`` -> T' (R', H) for ``target_window``: the first (2Wh − 1)(2Ww − 1) rows, viewed as a
    (2Wh − 1, 2Ww − 1) image per head, interpolated with torch's ``kernel`` (align_corners=False) to
    (2Wh' − 1, 2Ww' − 1); BEiT's three CLS rows are appended unchanged. The same window returns ``table`` as it
    is (Swin's loader only interpolates when the sizes differ). Runs in float32 at least (float64 stays float64).
    """
    if tuple(window) == tuple(target_window):
        return table
    height, width = window
    new_height, new_width = target_window
    heads = table.shape[1]
    patches = (2 * height - 1) * (2 * width - 1)
    work = torch.float64 if table.dtype == torch.float64 else torch.float32
    grid = table[:patches].to(work).T.reshape(1, heads, 2 * height - 1, 2 * width - 1)  # (1, H, 2Wh−1, 2Ww−1)
    resized = F.interpolate(grid, size=(2 * new_height - 1, 2 * new_width - 1), mode=kernel, align_corners=False)
    flat = resized.reshape(heads, -1).T  # ((2Wh'−1)(2Ww'−1), H)
    if not beit_cls:
        return flat.to(table.dtype)
    return torch.cat((flat.to(table.dtype), table[patches:]), dim=0)  # ((2Wh'−1)(2Ww'−1) + 3, H)


def _effective_window(params: SwinParams) -> tuple[int, int]:
    window = params.target_window if params.target_window is not None else params.window
    return window[0], window[1]


def _coordinates(positions: torch.Tensor, name: str) -> torch.Tensor:
    """(N, 2) integer (row, col) coordinates, else InvalidInput at ("positions",)."""
    if positions.dim() != 2 or positions.shape[1] != 2:
        raise InvalidInput(
            ("positions",), f"swin needs {name} positions (N, 2) (row, col), got {list(positions.shape)}"
        )
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise InvalidInput(("positions",), f"swin needs integer positions, got {positions.dtype}")
    return positions.to(torch.int64)


def _check_offsets(q_pos: torch.Tensor, k_pos: torch.Tensor, window: tuple[int, int]) -> None:
    """Refuse any |y_a − y_b| > Wh − 1 or |x_a − x_b| > Ww − 1 from the coordinates' extremes (O(Nq + Nk), in Python
    integers so that no subtraction overflows), before anything of size Nq·Nk exists."""
    for axis, (name, side) in enumerate(zip(("row", "column"), window, strict=True)):
        q_lo, q_hi = int(q_pos[:, axis].min()), int(q_pos[:, axis].max())
        k_lo, k_hi = int(k_pos[:, axis].min()), int(k_pos[:, axis].max())
        widest = max(q_hi - k_lo, k_hi - q_lo)
        if widest > side - 1:
            raise InvalidInput(
                ("positions",),
                f"a {name} offset of {widest} is outside the {window[0]}x{window[1]} window the table covers "
                f"(|offset| <= {side - 1}); give target_window to resize the table",
            )


def swin_prefix_bias(params: SwinParams, ctx: BiasContext) -> torch.Tensor:
    """(H, 3) per-head [prefix→token, token→prefix, prefix→prefix] = T[R − 3], T[R − 2], T[R − 1] with beit_cls
    (BEiT's cls→token, token→cls, cls→cls rows, never resized); zeros without it (Swin has no CLS token)."""
    if not params.beit_cls:
        return torch.zeros((ctx.num_heads, BEIT_EXTRA_ROWS), dtype=ctx.dtype, device=ctx.device)
    table = _table(params, ctx, compute_dtype(ctx.dtype))  # (R, H)
    return table[-BEIT_EXTRA_ROWS:].T.to(ctx.dtype).clone()  # (H, 3): a copy, never a view of a supplied table


# Work units per tap of F.interpolate (one source value weighted into one output value), measured on CPU.
RESIZE_TAP_WORK = 2
RESIZE_TAPS = {"bicubic": 16, "bilinear": 4}
TRUNC_NORMAL_PASSES = 1  # trunc_normal_'s transform of its uniform draws, per value (about 17 ns a value in all)


def swin_cost(params: SwinParams, extent: Extent) -> ParamCost:
    """The (R, H) table of ``window``, drawn (trunc_normal: a pass more per value) or zeros, twice with beit_cls
    (the bias and the prefix entries); with ``target_window`` its transposed copy and the resize to (R', H), taps
    by kernel (16 bicubic, 4 bilinear) per output value, and the (R', H) copies after it; per query-key pair the
    (dy, dx) offsets and the index (4 values, 6 passes)."""
    rows = num_relative_distance(params.window[0], params.window[1], params.beit_cls) * extent.heads
    drawn = 0
    if params.table is None and (params.init or ("zeros" if params.beit_cls else "trunc_normal")) == "trunc_normal":
        drawn = (2 if params.beit_cls else 1) * rows
    elements, passes = 2 * rows, TRUNC_NORMAL_PASSES * drawn
    if params.target_window is not None:
        target = num_relative_distance(params.target_window[0], params.target_window[1], params.beit_cls)
        resized = target * extent.heads
        elements += rows + 3 * resized
        passes += RESIZE_TAPS[params.resize_kernel] * resized * RESIZE_TAP_WORK // 12
    return ParamCost(
        drawn=drawn,
        elements=elements + 4 * extent.pairs,
        passes=passes + 6 * extent.pairs,
        params=("window", "target_window") if params.target_window is not None else ("window",),
    )


@register(
    "swin",
    axes=2,
    kind=Kind.BIAS,
    params=SwinParams,
    paper=SWIN_PAPER,
    learned=True,
    learned_init=swin_learned_init,
    param_cost=swin_cost,
    per_layer=True,
    prefix_bias=swin_prefix_bias,
    conventions={
        "offset": "(dy, dx) = query minus key on each axis (row, col), as Swin and BEiT; "
        "idx = (dy + Wh − 1)(2Ww − 1) + (dx + Ww − 1)",
        "table": "T (R, H), R = (2Wh − 1)(2Ww − 1), Swin's relative_position_bias_table row layout; one per layer",
        "window": "offsets beyond the (effective) window are refused, never clamped; any positions whose "
        "offsets fit are accepted (not only the tokens of one window)",
        "beit_cls": "R gains three last rows: R − 3 cls→token, R − 2 token→cls, R − 1 cls→cls (BEiT's index "
        "assignment order: row 0, then column 0, then [0, 0]); every prefix token gets these three values",
        "init": "Swin: trunc_normal std 0.02 cut at ±2 absolute (timm's trunc_normal_ defaults, in effect "
        "N(0, 0.02²)); BEiT: zeros (its trunc_normal_ line is commented out); drawn in float32 on the CPU",
        "resize": "target_window interpolates T viewed as (H, 2Wh − 1, 2Ww − 1) with torch "
        "bicubic/bilinear align_corners=False; bicubic matches Swin's load_pretrained; timm's "
        "resize_rel_pos_bias_table (linear on BEiT's geometric grid) is not implemented; BEiT rows unchanged",
        "scale_placement": "added after q·scale @ kᵀ (Swin); the −100 shifted-window mask is the caller's",
    },
)
def swin(params: SwinParams, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext) -> torch.Tensor:
    """Swin / BEiT relative position bias: B[h, a, b] = T[(y_a − y_b + Wh − 1)(2Ww − 1) + (x_a − x_b + Ww − 1), h].

    T ∈ R^{(2Wh−1)(2Ww−1) × H} is learned (Liu et al., Swin Transformer, ICCV 2021; Bao et al., BEiT, ICLR 2022),
    so B depends on the 2D offset (Δy, Δx) only. q_pos (Nq, 2) and k_pos (Nk, 2) are int64 (row, col)
    coordinates; every offset must lie inside the window (|Δy| <= Wh − 1, |Δx| <= Ww − 1) of ``target_window``
    when given (the table then resized by ``resize_table``) or of ``window``. BEiT's CLS rows reach the prefix
    token through ``swin_prefix_bias``. The table is only gathered (and interpolated), so B stays differentiable
    in T. Computed in float32 (float64 for float64 contexts), returned in ctx.dtype.
    """
    q_coords, k_coords = _coordinates(q_pos, "query"), _coordinates(k_pos, "key")
    height, width = _effective_window(params)
    if params.target_window is not None:
        _check_table_size(
            num_relative_distance(height, width, params.beit_cls), ctx.num_heads, ("params", "target_window")
        )
    if q_coords.shape[0] and k_coords.shape[0]:
        _check_offsets(q_coords, k_coords, (height, width))
    table = _table(params, ctx, compute_dtype(ctx.dtype))  # (R, H)
    if params.target_window is not None:
        window = (params.window[0], params.window[1])
        table = resize_table(table, window, (height, width), params.resize_kernel, params.beit_cls)  # (R', H)
    q_coords, k_coords = q_coords.to(table.device), k_coords.to(table.device)
    dy = q_coords[:, None, 0] - k_coords[None, :, 0] + (height - 1)  # (Nq, Nk) in [0, 2Wh − 2]
    dx = q_coords[:, None, 1] - k_coords[None, :, 1] + (width - 1)  # (Nq, Nk) in [0, 2Ww − 2]
    index = dy * (2 * width - 1) + dx  # (Nq, Nk)
    return table.T[:, index].to(ctx.dtype)  # (H, Nq, Nk)
