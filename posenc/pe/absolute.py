"""Absolute encodings: a table P added to the token embeddings, X' = X + P.

Methods: ``sinusoidal`` (paper and tensor2tensor layouts), ``nope``, ``learned_absolute`` (GPT-2/BERT),
``axial`` (Reformer), ``sinusoidal_2d`` (MAE), ``sinusoidal_3d`` (separable time, height, width).

Every table is built in float64 when ``ctx.dtype`` is float64 (references) and in float32 otherwise, then
cast to ``ctx.dtype`` last. Positions are int64 until the frequency multiply. Seeded learned tables are drawn
in float32 on the CPU whatever the requested dtype or device, so a seed gives the same values everywhere.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import torch
from pydantic import Field, model_validator

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype, rope_inv_freq
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import AbsoluteContext, Extent, ParamCost
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn
from posenc.tensors import to_torch

VASWANI_PAPER = "Vaswani et al. Attention Is All You Need (NeurIPS 2017). https://arxiv.org/abs/1706.03762"
MAE_PAPER = "He et al. Masked Autoencoders Are Scalable Vision Learners (CVPR 2022). https://arxiv.org/abs/2111.06377"

# A seeded table is drawn whole (so its rows do not depend on the requested length); this caps its size
# (256 MiB of float32) because the gateway's output budget only sees the (N, D) result.
MAX_SEEDED_TABLE_ELEMENTS = 2**26

AxisSize = Annotated[int, Field(ge=1, le=1_048_576)]
AxisWidth = Annotated[int, Field(ge=1, le=65536)]


# ------------------------------------------------------------------------------------------------ helpers
def _length(ctx: AbsoluteContext, method: str) -> int:
    """N of a 1D request; a grid of two or more axes is the wrong kind of request for a 1D method."""
    if len(ctx.grid) != 1:
        raise InvalidInput(("grid",), f"{method} is a 1D method: give 'length', not a grid of {len(ctx.grid)} axes")
    return ctx.grid[0]


def _grid(ctx: AbsoluteContext, method: str, axes: Literal[2, 3]) -> tuple[int, ...]:
    if len(ctx.grid) != axes:
        wanted = "[H, W]" if axes == 2 else "[T, H, W]"
        raise InvalidInput(("grid",), f"{method} needs grid {wanted}, got {len(ctx.grid)} axis(es)")
    return ctx.grid


def _sincos_block(positions: torch.Tensor, width: int, base: float, dtype: torch.dtype) -> torch.Tensor:
    """[sin(u·ω), cos(u·ω)] (concatenated halves), ω_k = base^(−2k/width), k ∈ [0, width/2).

    positions (M,) int64 -> (M, width) in ``dtype``; ``width`` is even. This is MAE's ``emb1d`` (width D/2)
    and each axis block of ``sinusoidal_3d``.
    """
    inv_freq = rope_inv_freq(base, width, dtype=dtype).to(positions.device)  # (width/2,)
    angles = positions.to(dtype)[:, None] * inv_freq[None, :]  # (M, width/2)
    return torch.cat((torch.sin(angles), torch.cos(angles)), dim=-1)  # (M, width)


def _seeded_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _check_seeded_size(rows: int, width: int, loc: tuple[str | int, ...]) -> None:
    if rows * width > MAX_SEEDED_TABLE_ELEMENTS:
        raise InvalidInput(
            loc,
            f"a seeded table of {rows} x {width} values is over the limit of {MAX_SEEDED_TABLE_ELEMENTS}; "
            "supply the table or make it smaller",
        )


def _supplied_table(
    table: TensorIn, expected: tuple[int, int], loc: tuple[str | int, ...], dtype: torch.dtype
) -> torch.Tensor:
    """Decode a supplied table and check that it is ``expected`` = (rows, width); errors name ``loc``."""
    values = to_torch(table, loc)
    if tuple(values.shape) != expected:
        raise InvalidInput((*loc, "shape"), f"expected shape {list(expected)}, got {list(values.shape)}")
    if not values.is_floating_point():
        raise InvalidInput((*loc, "dtype"), f"a table must be floating point, got {values.dtype}")
    return values.to(dtype)


def _even_split(total: int, parts: int, *, granularity: int = 1) -> list[int]:
    """Split ``total`` into ``parts`` widths that are multiples of ``granularity``, the earlier parts taking
    one extra unit each while units remain: 8 in 3 (granularity 2) -> [4, 2, 2]; 7 in 2 -> [4, 3]."""
    units = total // granularity
    return [granularity * (units // parts + (1 if i < units % parts else 0)) for i in range(parts)]


# --------------------------------------------------------------------------------------------- sinusoidal
class SinusoidalParams(MethodParams):
    variant: Literal["paper", "tensor2tensor"] = Field(
        default="paper",
        description="paper: interleaved sin/cos, ω_k = base^(−2k/D); tensor2tensor (also fairseq): "
        "concatenated [sin, cos] halves, ω_k = base^(−k/(D/2 − 1))",
    )
    base: float = Field(default=10000.0, gt=1, description="the 10000 of the paper (t2t: max_timescale)")


@register(
    "sinusoidal",
    kind=Kind.ABSOLUTE,
    params=SinusoidalParams,
    paper=VASWANI_PAPER,
    conventions={
        "layout": "paper: interleaved PE[p, 2k] = sin, PE[p, 2k+1] = cos; "
        "tensor2tensor/fairseq: concatenated halves [sin(p ω_0..), cos(p ω_0..)]",
        "frequency_denominator": "paper: ω_k = base^(−2k/D) (denominator D/2); "
        "tensor2tensor/fairseq: ω_k = base^(−k/(D/2 − 1)) (denominator D/2 − 1, at least 1)",
        "positions": "0-based; fairseq's padding_idx + 1 offset is not applied",
        "odd_dim": "the table for D − 1 is built and one zero column appended last (fairseq, t2t)",
        "embedding_scale": "the √D multiplication of token embeddings belongs to the model, not applied here",
    },
)
def sinusoidal(params: SinusoidalParams, ctx: AbsoluteContext) -> torch.Tensor:
    """Sinusoidal PE: PE[p, 2k] = sin(p·ω_k), PE[p, 2k+1] = cos(p·ω_k), ω_k = base^(−2k/D) (Vaswani 2017).

    ``variant='tensor2tensor'`` is the t2t/fairseq table: [sin(p·ω'), cos(p·ω')] as two halves with
    ω'_k = exp(−k·ln(base)/(D/2 − 1)). It is not the paper's table (the two are easily
    mixed up); pick one and keep it. Odd D: one zero column is appended after the D − 1 computed ones.
    """
    length = _length(ctx, "sinusoidal")
    dtype = compute_dtype(ctx.dtype)
    half = ctx.dim // 2  # sin/cos pairs; an odd D leaves one column for the zero pad
    positions = torch.arange(length, dtype=torch.int64, device=ctx.device)  # (N,)
    if params.variant == "paper":
        inv_freq = rope_inv_freq(params.base, 2 * half, dtype=dtype).to(ctx.device)  # (D/2,)
    else:
        # t2t guards the (num_timescales − 1) denominator with max(·, 1); fairseq divides by zero at D = 2
        step = math.log(params.base) / max(half - 1, 1)
        exponents = torch.arange(half, dtype=torch.int64).to(torch.float64) * -step  # (D/2,)
        inv_freq = torch.exp(exponents).to(dtype=dtype, device=ctx.device)
    angles = positions.to(dtype)[:, None] * inv_freq[None, :]  # (N, D/2)
    if params.variant == "paper":
        pairs = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1)  # (N, D/2, 2)
        table = pairs.reshape(length, 2 * half)  # (N, 2·(D/2)): sin and cos of pair k interleaved
    else:
        table = torch.cat((torch.sin(angles), torch.cos(angles)), dim=-1)  # (N, 2·(D/2))
    if ctx.dim % 2:
        table = torch.nn.functional.pad(table, (0, 1))  # (N, D): zero column last
    return table.to(ctx.dtype)


# ------------------------------------------------------------------------------------------------- NoPE
class NopeParams(MethodParams):
    pass


@register(
    "nope",
    kind=Kind.ABSOLUTE,
    params=NopeParams,
    paper="Kazemnejad et al. The Impact of Positional Encoding on Length Generalization in Transformers "
    "(NeurIPS 2023). https://arxiv.org/abs/2305.19466; Haviv et al. Transformer Language Models without "
    "Positional Encodings Still Learn Positional Information (2022). https://arxiv.org/abs/2203.16634",
    conventions={
        "output": "zeros of shape (*grid, D): any grid is accepted, so 1D, 2D and 3D pipelines stay uniform",
        "semantics": "causal: position is inferable from the mask; bidirectional: permutation-equivariant",
    },
)
def nope(params: NopeParams, ctx: AbsoluteContext) -> torch.Tensor:
    """NoPE: P = 0 (no positional encoding), returned as zeros so that X' = X + P leaves X unchanged.

    Under a causal mask a model can still infer positions (token i attends to i + 1 keys, so e.g. the
    attention mass on the first token falls like 1/(i + 1)); Haviv et al. 2022, Kazemnejad et al. 2023.
    Under bidirectional attention the layer is permutation-equivariant and order information is lost.
    """
    return torch.zeros((*ctx.grid, ctx.dim), dtype=ctx.dtype, device=ctx.device)


# ------------------------------------------------------------------------------------------ learned (1D)
class LearnedAbsoluteParams(MethodParams):
    max_positions: int = Field(
        default=1024, ge=1, le=1_048_576, description="rows of the table, N_max (GPT-2 n_ctx 1024; BERT 512)"
    )
    table: TensorIn | None = Field(
        default=None,
        description="the learned table (max_positions, dim); omit to initialise it from the seed",
    )
    seed: Seed = Field(default=0, description="seed of the initialisation when no table is supplied")
    init: Literal["gpt2", "bert"] = Field(
        default="gpt2",
        description="gpt2: N(0, 0.01) (wpe in openai/gpt-2); bert: normal std 0.02 truncated at ±2 std",
    )


def _initial_learned_table(params: LearnedAbsoluteParams, dim: int) -> torch.Tensor:
    """The seeded (max_positions, dim) float32 table: gpt2 N(0, 0.01) or bert N(0, 0.02) cut at ±0.04."""
    shape = (params.max_positions, dim)
    _check_seeded_size(*shape, loc=("params", "max_positions"))
    table = torch.empty(shape, dtype=torch.float32)
    generator = _seeded_generator(params.seed)
    if params.init == "gpt2":
        return torch.nn.init.normal_(table, mean=0.0, std=0.01, generator=generator)
    return torch.nn.init.trunc_normal_(table, mean=0.0, std=0.02, a=-0.04, b=0.04, generator=generator)


def learned_absolute_cost(params: LearnedAbsoluteParams, extent: Extent) -> ParamCost:
    """The seeded (max_positions, D) table, drawn whole whatever the length (a truncated normal's transform is
    about 7 passes more per value); nothing with a supplied table."""
    if params.table is not None:
        return ParamCost()
    values = params.max_positions * extent.width
    return ParamCost(drawn=values, passes=7 * values if params.init == "bert" else 0, params=("max_positions",))


def learned_absolute_init(params: LearnedAbsoluteParams, ctx: AbsoluteContext) -> dict[str, torch.Tensor]:
    """The paper's initial table from params.seed (see ``MethodSpec.learned_init``)."""
    return {"table": _initial_learned_table(params, ctx.dim)}


@register(
    "learned_absolute",
    kind=Kind.ABSOLUTE,
    params=LearnedAbsoluteParams,
    paper="Radford et al. Language Models are Unsupervised Multitask Learners (GPT-2, 2019); Devlin et al. "
    "BERT (NAACL 2019). https://arxiv.org/abs/1810.04805",
    learned=True,
    learned_init=learned_absolute_init,
    param_cost=learned_absolute_cost,
    conventions={
        "positions": "0-based; RoBERTa's padding_idx + 1 offset is not applied",
        "init": "gpt2: N(0, 0.01), the wpe init of openai/gpt-2 (HF re-initialises with 0.02); "
        "bert: truncated normal std 0.02 cut at ±0.04 (TF truncated_normal redraws, so the std is ≈0.0176)",
        "seeded_table": "the whole (max_positions, dim) table is drawn in float32 on the CPU from "
        "torch.Generator().manual_seed(seed), then the first N rows are kept",
        "extrapolation": "positions >= max_positions are an error, never clamped",
    },
)
def learned_absolute(params: LearnedAbsoluteParams, ctx: AbsoluteContext) -> torch.Tensor:
    """Learned absolute PE: X'[p] = X[p] + E[p], E ∈ R^{N_max×D} a trained table (GPT-2; BERT).

    Without a supplied table E is drawn from the seed with the chosen init (gpt2: N(0, 0.01); bert:
    N(0, 0.02) truncated at ±2 std). There is no embedding past N_max − 1, so a longer request is an error.
    """
    length = _length(ctx, "learned_absolute")
    if length > params.max_positions:
        raise InvalidInput(
            ("length",),
            f"length {length} is past the learned table: positions 0..{params.max_positions - 1} "
            f"exist (max_positions={params.max_positions}); learned positions do not extrapolate",
        )
    shape = (params.max_positions, ctx.dim)
    if params.table is not None:
        table = _supplied_table(params.table, shape, ("params", "table"), compute_dtype(ctx.dtype))
    else:
        table = _initial_learned_table(params, ctx.dim)
    return table[:length].to(device=ctx.device, dtype=ctx.dtype)  # (N, D)


# ------------------------------------------------------------------------------------------------- axial
class AxialParams(MethodParams):
    shape: list[AxisSize] = Field(
        default_factory=lambda: [64, 64],
        min_length=2,
        max_length=8,
        description="factor sizes [n1, n2, ...]; the first is the slowest axis (HF axial_pos_shape (64, 64))",
    )
    dims: list[AxisWidth] | None = Field(
        default=None,
        min_length=2,
        max_length=8,
        description="widths [d1, d2, ...] with sum == dim (HF (64, 192) for D = 256); default an even split",
    )
    tables: list[TensorIn] | None = Field(
        default=None,
        description="the learned tables, table i of shape (n_i, d_i); omit to draw them from seed",
    )
    seed: Seed = Field(default=0, description="seed of the initialisation when no tables are supplied")
    init_std: float = Field(default=1.0, gt=0, description="std of the normal init (HF axial_norm_std 1.0)")

    @model_validator(mode="after")
    def _one_entry_per_factor(self) -> AxialParams:
        for name, value in (("dims", self.dims), ("tables", self.tables)):
            if value is not None and len(value) != len(self.shape):
                raise ValueError(f"'{name}' has {len(value)} entries but 'shape' has {len(self.shape)} factors")
        return self


def _axial_dims(params: AxialParams, dim: int) -> list[int]:
    """The factor widths: params.dims, or an even split of D with the earlier factors taking the remainder."""
    dims = params.dims if params.dims is not None else _even_split(dim, len(params.shape))
    if sum(dims) != dim:
        raise InvalidInput(("params", "dims"), f"dims {dims} sum to {sum(dims)}, not dim={dim}")
    if min(dims) < 1:
        raise InvalidInput(("dim",), f"dim {dim} is too small for {len(params.shape)} factors")
    return dims


def _initial_axial_tables(params: AxialParams, dims: list[int]) -> list[torch.Tensor]:
    """The seeded float32 tables E_i (n_i, d_i) ~ N(0, init_std), drawn in factor order from one generator."""
    _check_seeded_size(sum(n * d for n, d in zip(params.shape, dims, strict=True)), 1, ("params", "shape"))
    generator = _seeded_generator(params.seed)
    return [
        torch.nn.init.normal_(torch.empty(rows, width, dtype=torch.float32), std=params.init_std, generator=generator)
        for rows, width in zip(params.shape, dims, strict=True)
    ]


def axial_cost(params: AxialParams, extent: Extent) -> ParamCost:
    """The seeded tables Σ_i n_i·d_i (each factor at most D wide; nothing drawn with supplied tables); the N
    rows gathered from them are the route's own output."""
    widest = max(params.dims) if params.dims is not None else extent.width
    drawn = sum(params.shape) * widest if params.tables is None else 0
    return ParamCost(drawn=drawn, params=("shape",))


def axial_init(params: AxialParams, ctx: AbsoluteContext) -> dict[str, list[torch.Tensor]]:
    """The initial tables from params.seed (see ``MethodSpec.learned_init``); ``tables`` is a list field."""
    return {"tables": _initial_axial_tables(params, _axial_dims(params, ctx.dim))}


@register(
    "axial",
    kind=Kind.ABSOLUTE,
    params=AxialParams,
    paper="Kitaev, Kaiser, Levskaya. Reformer: The Efficient Transformer (ICLR 2020). https://arxiv.org/abs/2001.04451",
    learned=True,
    learned_init=axial_init,
    param_cost=axial_cost,
    conventions={
        "factor_order": "row-major mixed radix, the first factor is the slow axis (HF): p = r·n2 + c",
        "layout": "PE[p] = concat(E1[r], E2[c]): the first d1 features come from the first factor",
        "default_dims": "an even split of D, the earlier factors taking the remainder",
        "init": "N(0, init_std) with init_std = 1.0 (HF axial_norm_std); tables drawn in float32 on the CPU "
        "in factor order from one torch.Generator().manual_seed(seed)",
        "extrapolation": "N > n1·n2 is an error; HF training additionally requires N == n1·n2 (not enforced)",
    },
)
def axial(params: AxialParams, ctx: AbsoluteContext) -> torch.Tensor:
    """Axial PE: PE[p] = concat(E1[p // n2], E2[p % n2]), E_i ∈ R^{n_i×d_i}, d1 + d2 = D (Reformer).

    With k factors p is written in mixed radix (n1, …, nk), first digit slowest, and the k rows are
    concatenated. n1·d1 + n2·d2 parameters stand in for an (n1·n2) × D table.
    """
    length = _length(ctx, "axial")
    capacity = math.prod(params.shape)
    if length > capacity:
        raise InvalidInput(
            ("length",),
            f"length {length} is past the axial table: shape {params.shape} holds {capacity} positions",
        )
    dims = _axial_dims(params, ctx.dim)
    dtype = compute_dtype(ctx.dtype)
    if params.tables is not None:
        tables = [
            _supplied_table(table, (rows, width), ("params", "tables", i), dtype)
            for i, (table, rows, width) in enumerate(zip(params.tables, params.shape, dims, strict=True))
        ]
    else:
        tables = _initial_axial_tables(params, dims)
    # digits on the tables' device: training may pass parameters that live on the GPU
    remaining = torch.arange(length, dtype=torch.int64, device=tables[0].device)  # (N,)
    digits: list[torch.Tensor] = []
    for radix in reversed(params.shape):  # the last factor is the fastest digit
        digits.insert(0, remaining % radix)  # (N,)
        remaining = remaining // radix
    rows = [table[digit] for table, digit in zip(tables, digits, strict=True)]  # each (N, d_i)
    return torch.cat(rows, dim=-1).to(device=ctx.device, dtype=ctx.dtype)  # (N, D)


# -------------------------------------------------------------------------------------------------- 2D
class Sinusoidal2dParams(MethodParams):
    base: float = Field(default=10000.0, gt=1, description="ω_k = base^(−k/(D/4))")
    first_half: Literal["column", "row"] = Field(
        default="column",
        description="the axis the first D/2 features encode: column (MAE, Big-Vision) or row (DETR's order)",
    )


@register(
    "sinusoidal_2d",
    axes=2,
    kind=Kind.ABSOLUTE,
    params=Sinusoidal2dParams,
    paper=MAE_PAPER,
    conventions={
        "layout": "PE[r, c] = concat(emb1d(c), emb1d(r)), emb1d(u) = [sin(u ω), cos(u ω)] (two halves)",
        "axis_halves": "first half encodes the column c (MAE: its 'emb_h' is the w coordinate because of "
        "meshgrid(grid_w, grid_h)); first_half='row' swaps them",
        "frequency_denominator": "ω_k = base^(−k/(D/4)), k ∈ [0, D/4); D divisible by 4",
        "token_order": "output (H, W, D); row-major, token t = r·W + c; no CLS row (MAE prepends zeros)",
    },
)
def sinusoidal_2d(params: Sinusoidal2dParams, ctx: AbsoluteContext) -> torch.Tensor:
    """2D sin-cos PE (MAE): PE[r, c] = concat(emb1d(c), emb1d(r)), emb1d(u) = [sin(u·ω_k), cos(u·ω_k)],
    ω_k = base^(−k/(D/4)), k ∈ [0, D/4).

    Fixed (not learned); recompute it for a new grid instead of interpolating.
    """
    height, width = _grid(ctx, "sinusoidal_2d", 2)
    if ctx.dim % 4:
        raise InvalidInput(("dim",), f"sinusoidal_2d needs dim divisible by 4, got {ctx.dim}")
    dtype = compute_dtype(ctx.dtype)
    half = ctx.dim // 2
    rows = _sincos_block(torch.arange(height, device=ctx.device), half, params.base, dtype)  # (H, D/2)
    cols = _sincos_block(torch.arange(width, device=ctx.device), half, params.base, dtype)  # (W, D/2)
    row_part = rows[:, None, :].expand(height, width, half)  # (H, W, D/2): constant along c
    col_part = cols[None, :, :].expand(height, width, half)  # (H, W, D/2): constant along r
    parts = (col_part, row_part) if params.first_half == "column" else (row_part, col_part)
    return torch.cat(parts, dim=-1).to(ctx.dtype)  # (H, W, D)


# -------------------------------------------------------------------------------------------------- 3D
class Sinusoidal3dParams(MethodParams):
    combine: Literal["concat", "sum"] = Field(
        default="concat",
        description="concat: [E_t | E_h | E_w] with widths dims; sum: E_t + E_h + E_w, each D wide",
    )
    dims: list[Annotated[int, Field(ge=2, le=65536, multiple_of=2)]] | None = Field(
        default=None,
        min_length=3,
        max_length=3,
        description="concat only: even widths [d_t, d_h, d_w] summing to dim; default an even split in pairs",
    )
    base: float = Field(default=10000.0, gt=1, description="ω_k = base^(−2k/d_a) within each axis block")

    @model_validator(mode="after")
    def _dims_only_with_concat(self) -> Sinusoidal3dParams:
        if self.dims is not None and self.combine == "sum":
            raise ValueError("'dims' applies to combine='concat' only; with 'sum' every factor is dim wide")
        return self


@register(
    "sinusoidal_3d",
    axes=3,
    kind=Kind.ABSOLUTE,
    params=Sinusoidal3dParams,
    paper="Arnab et al. ViViT: A Video Vision Transformer (ICCV 2021). https://arxiv.org/abs/2103.15691; "
    "separable form as in Bertasius et al. TimeSformer (ICML 2021). https://arxiv.org/abs/2102.05095",
    conventions={
        "layout": "concat: [sin t, cos t | sin r, cos r | sin c, cos c] in grid order (time, row, column), "
        "each block [sin(u ω), cos(u ω)] in concatenated halves; sum: the three D-wide blocks added",
        "frequency_denominator": "ω_k = base^(−2k/d_a), k ∈ [0, d_a/2), per block of width d_a "
        "(ViViT's sinusoidal_3d is concat with d_a = D/3)",
        "default_dims": "D/2 sin-cos pairs split as evenly as possible, time then row taking the remainder",
        "axis_order": "time, row (height), column (width); sinusoidal_2d instead puts the column first",
        "token_order": "output (T, H, W, D); flattened row-major, token = (t·H + r)·W + c",
    },
)
def sinusoidal_3d(params: Sinusoidal3dParams, ctx: AbsoluteContext) -> torch.Tensor:
    """Separable 3D sin-cos PE: PE[t, r, c] = concat(E_t[t], E_h[r], E_w[c]) or E_t[t] + E_h[r] + E_w[c],
    each factor a 1D block [sin(u·ω_k), cos(u·ω_k)], ω_k = base^(−2k/d_a) (ViViT; general separable form).

    Fixed (not learned). ``combine='concat'`` gives each axis its own d_a features (d_t + d_h + d_w = D);
    ``combine='sum'`` gives every axis all D features, like TimeSformer's added time and space tables.
    """
    frames, height, width = _grid(ctx, "sinusoidal_3d", 3)
    if ctx.dim % 2:
        raise InvalidInput(("dim",), f"sinusoidal_3d needs an even dim, got {ctx.dim}")
    dtype = compute_dtype(ctx.dtype)
    if params.combine == "sum":
        dims = [ctx.dim, ctx.dim, ctx.dim]
    else:
        dims = params.dims if params.dims is not None else _even_split(ctx.dim, 3, granularity=2)
        if sum(dims) != ctx.dim:
            raise InvalidInput(("params", "dims"), f"dims {dims} sum to {sum(dims)}, not dim={ctx.dim}")
        if min(dims) < 2:
            raise InvalidInput(("dim",), f"sinusoidal_3d needs dim >= 6 to give every axis a pair, got {ctx.dim}")
    d_t, d_h, d_w = dims
    time_block = _sincos_block(torch.arange(frames, device=ctx.device), d_t, params.base, dtype)  # (T, d_t)
    row_block = _sincos_block(torch.arange(height, device=ctx.device), d_h, params.base, dtype)  # (H, d_h)
    col_block = _sincos_block(torch.arange(width, device=ctx.device), d_w, params.base, dtype)  # (W, d_w)
    grid = (frames, height, width)
    time_part = time_block[:, None, None, :].expand(*grid, d_t)  # (T, H, W, d_t)
    row_part = row_block[None, :, None, :].expand(*grid, d_h)  # (T, H, W, d_h)
    col_part = col_block[None, None, :, :].expand(*grid, d_w)  # (T, H, W, d_w)
    if params.combine == "sum":
        return (time_part + row_part + col_part).to(ctx.dtype)  # (T, H, W, D)
    return torch.cat((time_part, row_part, col_part), dim=-1).to(ctx.dtype)  # (T, H, W, D)
