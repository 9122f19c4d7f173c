"""Learned rotary encodings for images: rotations R(p) = expm(Σ_a u_a·G_a) of feature blocks, with learned
skew-symmetric generators G_a per position axis.

Methods: ``rope_mixed`` (Heo et al., ECCV 2024: learned per-head 2D frequencies, 2x2 blocks), ``liere``
(Ostmeier et al., 2024: learned dense b x b blocks, in general non-commuting), ``comrope`` (Yu et al., 2025:
learned b x b blocks that commute by construction, variants AP and LD). Each returns
``posenc.pe.types.RotaryGenerators`` (Hg, A, m, b, b), m·b = rotary_dim; block j rotates features
j·b … j·b + b − 1, and u_a = (p_a + offset_a)·scale_a is the method's position scale.

Positions are (N, 2) int64 (row, col), tokens numbered row-major; prefix tokens (CLS) get the identity from
the applier. Every method is registered with axes = 2; LieRE and ComRoPE are defined for video (3 axes) too,
but a registered method has one axis count, and these take images.

Generators are built in float64 when ``ctx.dtype`` is float64 and in float32 otherwise; the learned tensors
are used as given (a training ``nn.Parameter`` included) so gradients reach them. Seeded tensors are drawn in
float32 on the CPU from ``torch.Generator().manual_seed(seed)``, so a seed gives the same values everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Literal

import torch
from pydantic import Field, ValidationInfo, field_validator

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype, learned_tensors
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import Extent, ParamCost, RotaryContext, RotaryGenerators
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn

ROPE_VIT_PAPER = (
    "Heo, Park, Han, Yun. Rotary Position Embedding for Vision Transformer (ECCV 2024). "
    "https://arxiv.org/abs/2403.13298"
)
LIERE_PAPER = (
    "Ostmeier, Axelrod, Moseley, Chaudhari, Langlotz. LieRE: Lie Rotational Positional Encodings (2024; first "
    "titled Generalizing Rotary Position Encodings). https://arxiv.org/abs/2406.10322"
)
COMROPE_PAPER = (
    "Yu, Jiang, Jia, Yan et al. ComRoPE: Scalable and Robust Rotary Position Embedding Parameterized by "
    "Trainable Commuting Angle Matrices (CVPR 2025). https://arxiv.org/abs/2506.03737"
)

AXES = 2  # positions (N, 2): column 0 = row, column 1 = col
# A seeded tensor is drawn whole; this caps it (256 MiB of float32): the gateway's budget sees only the result.
MAX_SEEDED_ELEMENTS = 2**26
# matrix_exp costs O(b³) per token and block: a b x b block larger than this is refused by the schema.
MAX_BLOCK_SIZE = 256

# The rotations act on blocks of b adjacent features (interleaved pairs for b = 2): the one layout these methods
# have, so a request for half pairing is refused rather than ignored.
BLOCK_LAYOUT = ("interleaved",)

GridSize = Annotated[int, Field(ge=1, le=1_048_576)]
BlockSize = Annotated[int, Field(ge=2, le=MAX_BLOCK_SIZE)]


# The work of R(p) = expm(Σ_a u_a G_a) (``posenc.pe.kinds.block_rotations``), in multiply-adds (8 a work unit):
# torch's matrix_exp per b x b matrix of a batch: a fixed part (its degree-18 polynomial's batched products and
# their bookkeeping, MEXP_CALL + MEXP_SQUARE·b² + MEXP_CUBE·b³) and one product per squaring (SQUARE_CALL +
# SQUARE_SQUARE·b² + SQUARE_CUBE·b³); an upper fit of its CPU time on two cores for b = 4 … 256.
MEXP_CALL, MEXP_SQUARE, MEXP_CUBE = 40_000, 1_600, 8
SQUARE_CALL, SQUARE_SQUARE, SQUARE_CUBE = 3_200, 64, 1
THETA_18 = 1.09  # the degree-18 norm limit of float64 (float32's, 3.01, takes fewer squarings)
# Frequencies (and a seeded init) are built up to this many times a request: the route's workspace estimate,
# each rotated side and the meta.
FREQUENCY_BUILDS = 5
# The closed form of 2 x 2 blocks (b = 2), per block and token: the float64 angle, cos and sin, their casts, the
# rows stacked and the (2, 2) rotation (whose own values are the route's ``rotation_elements``), and the
# elementwise passes that make them (about 100 ns a block and token, measured).
CLOSED_FORM_VALUES, CLOSED_FORM_PASSES = 12, 12
# Applying the rotations (``apply_block_rotation``'s einsum, a tiny matrix product per block): about 2 word
# passes per rotated value, and 1 ns per multiply-add (8 in the cost model's multiply-adds).
APPLY_PASSES, APPLY_MACS = 2, 8


def rotation_cost(extent: Extent, rotations: int, block_size: int, norm: float, params: tuple[str, ...]) -> ParamCost:
    """The block rotations of ``rotations`` (Hg) sets of generators at ``extent``: m = dim/b blocks per token on
    each side (queries, keys), applied to every head of the batch (APPLY_PASSES per value and APPLY_MACS·b per
    value of the B·H·(Nq + Nk)·dim rotated).

    b = 2: the closed form, CLOSED_FORM_VALUES values and CLOSED_FORM_PASSES passes per block and token. b > 2:
    matrix_exp per matrix, with s = ⌈log2(u·‖G‖/θ)⌉ squarings for coordinates below max(Nq, Nk) (``norm``
    bounds Σ_a ‖G_a‖₁ per unit of coordinate), and its intermediates, 8 matrices per matrix of the larger
    side."""
    blocks = max(extent.dim // block_size, 1)
    tokens = extent.queries + extent.keys
    values = extent.batch * extent.heads * tokens * blocks * block_size
    apply = ParamCost(passes=APPLY_PASSES * values, macs=APPLY_MACS * values * block_size, params=params)
    if block_size == 2:
        per_token = rotations * blocks
        return apply.plus(
            ParamCost(
                elements=CLOSED_FORM_VALUES * per_token * max(extent.queries, extent.keys),
                passes=CLOSED_FORM_PASSES * per_token * tokens,
            )
        )
    largest = max(extent.queries, extent.keys, 1) * norm / THETA_18
    squarings = math.ceil(math.log2(largest)) if largest > 1 else 0
    square, cube = block_size**2, block_size**3
    per_matrix = MEXP_CALL + MEXP_SQUARE * square + MEXP_CUBE * cube
    per_matrix += squarings * (SQUARE_CALL + SQUARE_SQUARE * square + SQUARE_CUBE * cube)
    return apply.plus(
        ParamCost(
            elements=8 * rotations * blocks * square * max(extent.queries, extent.keys),
            macs=rotations * blocks * tokens * per_matrix,
        )
    )


# ------------------------------------------------------------------------------------------------ helpers
def _check_seeded_size(elements: int, field: str) -> None:
    if elements > MAX_SEEDED_ELEMENTS:
        raise InvalidInput(
            ("params", field),
            f"a seeded tensor of {elements} values is over the limit of {MAX_SEEDED_ELEMENTS}; supply {field} or "
            "use fewer heads, a smaller block_size or a smaller rotary_dim",
        )


def _check_blocks(rotary_dim: int, block_size: int, axes_per_block: int = 1) -> int:
    """m = rotary_dim / block_size, after checking that block_size divides rotary_dim (else InvalidInput at
    ("params", "block_size")) and, with ``axes_per_block`` A > 1, that the m blocks split evenly over the A axes
    (else InvalidInput at ("rotary_dim",))."""
    if rotary_dim % block_size:
        raise InvalidInput(("params", "block_size"), f"block_size {block_size} must divide rotary_dim {rotary_dim}")
    if rotary_dim % (block_size * axes_per_block):
        raise InvalidInput(
            ("rotary_dim",),
            f"the blocks are split over {axes_per_block} axes: rotary_dim must be divisible by "
            f"block_size·axes = {block_size * axes_per_block}, got {rotary_dim}",
        )
    return rotary_dim // block_size


def _rotation_blocks(freqs: torch.Tensor) -> torch.Tensor:
    """[[0, −f], [f, 0]] for every entry f: (...) -> (..., 2, 2), the generator of the rotation by f."""
    zero = torch.zeros_like(freqs)
    return torch.stack((torch.stack((zero, -freqs), -1), torch.stack((freqs, zero), -1)), -2)  # (..., 2, 2)


def _axis_tensor(values: tuple[float, ...], ctx: RotaryContext) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, device=ctx.device)  # (A,)


def _integer_positions(ctx: RotaryContext) -> tuple[torch.Tensor, torch.Tensor]:
    """position_scale, position_offset of u = p: ones and zeros, (A,) float64 each."""
    return _axis_tensor((1.0,) * AXES, ctx), _axis_tensor((0.0,) * AXES, ctx)


# ----------------------------------------------------------------------------------------------- RoPE-Mixed
class RopeMixedParams(MethodParams):
    base: float = Field(
        default=10.0, gt=1, description="θ of the init magnitudes θ^(−4k/d) (10 in the reference Mixed models)"
    )
    freqs: TensorIn | None = Field(
        default=None,
        description="the learned (f_x, f_y), shape (2, num_heads, rotary_dim/2), x (column) then y (row); the "
        "reference stores (2, depth, H·d/2) per model and layer l is its [:, l] viewed as (2, H, d/2); omit to "
        "draw the init from seed",
    )
    seed: Seed = Field(default=0, description="seed of the per-head random angles α when no freqs are supplied")


def rope_mixed_freqs(base: float, rotary_dim: int, num_heads: int, seed: int) -> torch.Tensor:
    """The reference init (``init_random_2d_freqs``): (2, H, d/2) float32, [f_x, f_y].

    mag_k = θ^(−4k/d), k < d/4; α_h ~ U[0, 2π) per head (torch.rand in float32 from the seed, times 2π);
    f_x = [mag·cos α, mag·cos(α + π/2)], f_y = [mag·sin α, mag·sin(α + π/2)]: the first d/4 pairs point in
    direction α, the next d/4 in α + 90°. Computed in float64 from the float32 draw, rounded once.
    """
    generator = torch.Generator().manual_seed(seed)
    alpha = torch.rand(num_heads, generator=generator, dtype=torch.float32).to(torch.float64) * (2 * math.pi)  # (H,)
    exponents = torch.arange(0, rotary_dim, 4, dtype=torch.int64).to(torch.float64) / rotary_dim  # (d/4,)
    mag = 1.0 / (float(base) ** exponents)  # (d/4,)
    angles = torch.stack((alpha, alpha + math.pi / 2), dim=-1)  # (H, 2): α, α + π/2
    f_x = (torch.cos(angles)[:, :, None] * mag).reshape(num_heads, rotary_dim // 2)  # (H, 2, d/4) -> (H, d/2)
    f_y = (torch.sin(angles)[:, :, None] * mag).reshape(num_heads, rotary_dim // 2)  # (H, 2, d/4) -> (H, d/2)
    return torch.stack((f_x, f_y)).to(torch.float32)  # (2, H, d/2)


def _check_mixed_dim(ctx: RotaryContext) -> None:
    if ctx.rotary_dim % 4:
        raise InvalidInput(
            ("rotary_dim",),
            f"RoPE-Mixed draws d/4 magnitudes in two directions: rotary_dim must be divisible by 4, got "
            f"{ctx.rotary_dim}",
        )


def rope_mixed_learned_init(params: RopeMixedParams, ctx: RotaryContext) -> dict[str, torch.Tensor]:
    """{"freqs": (2, H, d/2)} from params.seed (see ``MethodSpec.learned_init`` and ``rope_mixed_freqs``)."""
    _check_mixed_dim(ctx)
    _check_seeded_size(ctx.num_heads * ctx.rotary_dim, "freqs")
    return {"freqs": rope_mixed_freqs(params.base, ctx.rotary_dim, ctx.num_heads, params.seed)}


def rope_mixed_cost(params: RopeMixedParams, extent: Extent) -> ParamCost:
    """Per-head 2 x 2 rotations (``rotation_cost`` with Hg = H, b = 2) and the seeded init's H angles and
    (2, H, d/2) frequencies, built FREQUENCY_BUILDS times."""
    seeded = FREQUENCY_BUILDS * 3 * extent.heads * extent.dim if params.freqs is None else 0
    return rotation_cost(extent, extent.heads, 2, 0.0, ()).plus(ParamCost(elements=seeded, drawn=extent.heads))


@register(
    "rope_mixed",
    axes=AXES,
    kind=Kind.ROTARY,
    params=RopeMixedParams,
    paper=ROPE_VIT_PAPER,
    learned=True,
    per_layer=True,
    learned_init=rope_mixed_learned_init,
    param_cost=rope_mixed_cost,
    block_rotation=lambda params, heads: (heads, 2),
    pairings=BLOCK_LAYOUT,
    conventions={
        "positions": "(N, 2) int (row, col) = (y, x): axis 0 (row) turns by f_y, axis 1 (column) by f_x; "
        "integer patch indices, no rescaling at a new resolution (the reference extrapolates in position)",
        "pairing": "interleaved: block j = features 2j, 2j+1 (the reference's view_as_complex(x.reshape(..., -1, 2)))",
        "freqs": "(2, H, d/2): [f_x, f_y]; the reference's (2, depth, H·d/2) parameter at layer l is [:, l] "
        "viewed as (2, H, d/2)",
        "init": "mag_k = base^(−4k/d), k < d/4, base 10; α ~ U[0, 2π) per head (float32 draw from seed); "
        "f_x = [mag cos α, mag cos(α+π/2)], f_y = [mag sin α, mag sin(α+π/2)]",
        "cls": "the reference does not rotate CLS: prefix tokens get the identity",
    },
)
def rope_mixed(params: RopeMixedParams, ctx: RotaryContext) -> RotaryGenerators:
    """RoPE-Mixed: pair k of head h turns by φ = x·f_x[h, k] + y·f_y[h, k], f_x, f_y ∈ R^{d/2} learned per head
    and layer, x = column, y = row (Heo et al., 2024).

    As generators: the 2x2 block of pair k on axis a is [[0, −f_a[h, k]], [f_a[h, k], 0]], so
    R(p) = expm(y·G_y + x·G_x) is the rotation by φ. The score ⟨R(p)q, R(p')k⟩ depends on p' − p only.
    """
    _check_mixed_dim(ctx)
    expected = {"freqs": (2, ctx.num_heads, ctx.rotary_dim // 2)}
    freqs = learned_tensors(
        params,
        expected,
        lambda: rope_mixed_learned_init(params, ctx),
        device=ctx.device,
        dtype=compute_dtype(ctx.dtype),
        labels={"freqs": "[2, num_heads, rotary_dim/2]"},
    )["freqs"]  # (2, H, d/2): x, y
    per_axis = torch.stack((freqs[1], freqs[0]), dim=1)  # (H, 2, d/2): axis 0 = row = y, axis 1 = col = x
    scale, offset = _integer_positions(ctx)
    return RotaryGenerators(_rotation_blocks(per_axis), scale, offset, commuting=True)  # (H, 2, d/2, 2, 2)


# ----------------------------------------------------------------------------------------------------- LieRE
class LiereParams(MethodParams):
    block_size: BlockSize = Field(
        default=64, description="b, the size of each dense skew block (the reference generator_dim, 64); divides d"
    )
    per_head: bool = Field(default=False, description="one set of generators per head (else shared by the heads)")
    train_grid: tuple[GridSize, GridSize] | None = Field(
        default=None,
        description="[rows, cols] of the training grid: u_a = p_a · s_a / (n_a (s_a − 1)) with s the current grid "
        "(the reference's linspace(0, s/n, s)), i.e. p/(n − 1) at the training resolution; None: u = p",
    )
    grid: tuple[GridSize, GridSize] | None = Field(
        default=None, description="[rows, cols] of the current grid, for train_grid; None: the training grid"
    )
    generators: TensorIn | None = Field(
        default=None,
        description="the raw parameters U, shape (Hg, 2, rotary_dim/b, b, b), Hg = num_heads if per_head else 1; "
        "only the strict upper triangle is read, G = triu(U, 1) − triu(U, 1)ᵀ; omit to draw U ~ U[0, 2π) from seed",
    )
    seed: Seed = Field(default=0, description="seed of the init when no generators are supplied")

    @field_validator("grid")
    @classmethod
    def _grid_needs_train_grid(cls, grid: tuple[int, int] | None, info: ValidationInfo) -> tuple[int, int] | None:
        if grid is not None and info.data.get("train_grid") is None:
            raise ValueError("grid rescales positions relative to train_grid: give train_grid too")
        return grid


def _liere_shape(params: LiereParams, ctx: RotaryContext) -> tuple[int, int, int, int, int]:
    blocks = _check_blocks(ctx.rotary_dim, params.block_size)
    heads = ctx.num_heads if params.per_head else 1
    return (heads, AXES, blocks, params.block_size, params.block_size)


def liere_learned_init(params: LiereParams, ctx: RotaryContext) -> dict[str, torch.Tensor]:
    """{"generators": U} with U ~ U[0, 2π) of shape (Hg, 2, d/b, b, b), float32 from params.seed (the reference
    draws torch.rand(...)·2π, RoPE-Mixed's angle range; its −0.5 shift cancels in G = triu(U,1) − triu(U,1)ᵀ)."""
    shape = _liere_shape(params, ctx)
    _check_seeded_size(math.prod(shape), "generators")
    generator = torch.Generator().manual_seed(params.seed)
    return {"generators": torch.rand(shape, generator=generator, dtype=torch.float32) * (2 * math.pi)}


def liere_position_scale(params: LiereParams) -> tuple[float, ...]:
    """scale_a of u_a = p_a·scale_a: the step of the reference's linspace(0, s_a/n_a, s_a), s_a/(n_a (s_a − 1))
    (n the training grid, s the current one; 0 when s_a = 1, whose only position is 0), or 1 without a grid."""
    if params.train_grid is None:
        return (1.0,) * AXES
    current = params.grid if params.grid is not None else params.train_grid
    return tuple(0.0 if s == 1 else s / (n * (s - 1)) for n, s in zip(params.train_grid, current, strict=True))


def liere_cost(params: LiereParams, extent: Extent) -> ParamCost:
    """The rotations of Hg = H (per_head) or 1 sets of generators (``rotation_cost``, ‖G_a‖₁ ≤ (b − 1)·2π per
    axis, the seeded init's range, times the position scale) and the (Hg, 2, d/b, b, b) generators: drawn when
    seeded and made skew (3 values each), FREQUENCY_BUILDS times."""
    block = params.block_size
    rotations = extent.heads if params.per_head else 1
    generators = rotations * AXES * max(extent.dim // block, 1) * block * block
    builds = ParamCost(
        drawn=FREQUENCY_BUILDS * generators if params.generators is None else 0,
        elements=3 * generators,
        passes=3 * FREQUENCY_BUILDS * generators,
    )
    norm = AXES * max(liere_position_scale(params)) * (block - 1) * 2 * math.pi
    return rotation_cost(extent, rotations, block, norm, ("block_size", "per_head")).plus(builds)


@register(
    "liere",
    axes=AXES,
    kind=Kind.ROTARY,
    params=LiereParams,
    paper=LIERE_PAPER,
    learned=True,
    per_layer=True,
    learned_init=liere_learned_init,
    param_cost=liere_cost,
    block_rotation=lambda params, heads: (heads if params.per_head else 1, params.block_size),
    pairings=BLOCK_LAYOUT,
    conventions={
        "positions": "(N, 2) int (row, col), as the reference's cartesian_prod; 3D (video) is not registered",
        "orientation": "G = triu(U, 1) − triu(U, 1)ᵀ exactly as the reference, so a reference U gives the "
        "reference's R(p); a 2x2 raw u is [[0, u], [−u, 0]], the rotation by −u·p (store u = −t for +t)",
        "position_scale": "train_grid n: u = p·s/(n (s − 1)) (the reference's linspace(0, s/n, s), s the current "
        "grid, default n), i.e. p/(n − 1) at the training resolution; no train_grid: u = p (integer positions)",
        "generators": "(Hg, 2, d/b, b, b); the reference's raw (2, layers, Hg·m, b, b) at layer l is [:, l] "
        "viewed as (2, Hg, m, b, b) and permuted to (Hg, 2, m, b, b)",
        "block_size": "64 (reference model_args generator_dim); must divide rotary_dim",
        "init": "U ~ U[0, 2π) from seed (float32); the reference's −0.5 shift cancels in U − Uᵀ",
        "cls": "identity rotation for prefix tokens, as the reference",
        "commuting": "true only for block_size 2 (2x2 skew blocks commute): only then exactly relative",
    },
)
def liere(params: LiereParams, ctx: RotaryContext) -> RotaryGenerators:
    """LieRE: R(p) = expm(Σ_a u_a G_a), G_a ∈ so(b)^{d/b} block-diagonal learned skew-symmetric generators per
    axis (and per head with per_head), q' = R(p_i) q_i, k' = R(p_j) k_j (Ostmeier et al., 2024).

    G = triu(U, 1) − triu(U, 1)ᵀ from the raw learned U. The G_a generally do not commute, so R(p)ᵀR(p') is not
    R(p' − p): LieRE is relative only approximately (exactly for b = 2). matrix_exp in float32 at least.
    """
    shape = _liere_shape(params, ctx)
    raw = learned_tensors(
        params,
        {"generators": shape},
        lambda: liere_learned_init(params, ctx),
        device=ctx.device,
        dtype=compute_dtype(ctx.dtype),
        labels={"generators": "[Hg, 2, rotary_dim/block_size, block_size, block_size]"},
    )["generators"]  # (Hg, 2, m, b, b)
    upper = torch.triu(raw, diagonal=1)  # (Hg, 2, m, b, b)
    generators = upper - upper.transpose(-1, -2)  # (Hg, 2, m, b, b)
    scale = _axis_tensor(liere_position_scale(params), ctx)  # (2,)
    offset = _axis_tensor((0.0,) * AXES, ctx)  # (2,)
    return RotaryGenerators(generators, scale, offset, commuting=params.block_size == 2)


# --------------------------------------------------------------------------------------------------- ComRoPE
class ComropeParams(MethodParams):
    variant: Literal["ap", "ld"] = Field(
        default="ap",
        description="ap (axis-partitioned): block j is driven by axis j mod 2 alone, B_aj = P_j − P_jᵀ; "
        "ld (linearly dependent): B_aj = θ_aj (P_j − P_jᵀ), one skew block per j scaled per axis",
    )
    block_size: BlockSize = Field(default=2, description="b (the reference config default 2); divides d (AP: 2b does)")
    grid: tuple[GridSize, GridSize] | None = Field(
        default=None,
        description="[rows, cols] n: u_a = (p_a + 0.5)/n_a (the reference's axis_scale, in (0, 1)); None: u = p",
    )
    blocks: TensorIn | None = Field(
        default=None,
        description="the raw P, shape (num_heads, rotary_dim/b, b, b) (the reference's freqs[:, 0]); "
        "B = P − Pᵀ; omit to draw P ~ N(0, init_std²) from seed",
    )
    multiplier: TensorIn | None = Field(
        default=None,
        description="ld only: θ, shape (2, rotary_dim/b) (the reference's (1, 2, m, 1, 1)); omit to draw N(0, 1)",
    )
    init_std: float = Field(default=1.0, gt=0, description="std of the seeded P (the reference's init_std, 1.0)")
    seed: Seed = Field(default=0, description="seed of the init of the tensors not supplied")

    @field_validator("multiplier")
    @classmethod
    def _multiplier_is_ld_only(cls, multiplier: TensorIn | None, info: ValidationInfo) -> TensorIn | None:
        if multiplier is not None and info.data.get("variant", "ap") != "ld":
            raise ValueError("multiplier is a parameter of variant 'ld' only")
        return multiplier


def _comrope_shapes(params: ComropeParams, ctx: RotaryContext) -> dict[str, tuple[int, ...]]:
    """The learned tensors' shapes: blocks (H, m, b, b), and multiplier (2, m) for LD."""
    if params.variant != "ld" and params.multiplier is not None:  # model_copy skips the field validator
        raise InvalidInput(("params", "multiplier"), "multiplier is a parameter of variant 'ld' only")
    blocks = _check_blocks(ctx.rotary_dim, params.block_size, AXES if params.variant == "ap" else 1)
    shapes: dict[str, tuple[int, ...]] = {"blocks": (ctx.num_heads, blocks, params.block_size, params.block_size)}
    if params.variant == "ld":
        shapes["multiplier"] = (AXES, blocks)
    return shapes


def comrope_learned_init(params: ComropeParams, ctx: RotaryContext) -> dict[str, torch.Tensor]:
    """P ~ N(0, init_std²) (H, m, b, b), then for LD θ ~ N(0, 1) (2, m), float32 in that order from params.seed."""
    shapes = _comrope_shapes(params, ctx)
    _check_seeded_size(sum(math.prod(shape) for shape in shapes.values()), "blocks")
    generator = torch.Generator().manual_seed(params.seed)
    return {
        name: torch.randn(shape, generator=generator, dtype=torch.float32)
        * (params.init_std if name == "blocks" else 1)
        for name, shape in shapes.items()
    }


def _comrope_tensors(params: ComropeParams, ctx: RotaryContext) -> Mapping[str, torch.Tensor]:
    return learned_tensors(
        params,
        _comrope_shapes(params, ctx),
        lambda: comrope_learned_init(params, ctx),
        device=ctx.device,
        dtype=compute_dtype(ctx.dtype),
        labels={"blocks": "[num_heads, rotary_dim/block_size, block_size, block_size]", "multiplier": "[2, m]"},
    )


def comrope_cost(params: ComropeParams, extent: Extent) -> ParamCost:
    """The rotations of H sets of generators (``rotation_cost``; ‖B_aj‖₁ ≤ 4·(b − 1)·max(init_std, 1) per axis,
    times |θ| ≤ 4 for LD and the position scale) and the (H, d/b, b, b) blocks: drawn when seeded, made skew and
    spread over the axes (4 values each), FREQUENCY_BUILDS times."""
    block = params.block_size
    blocks = max(extent.dim // block, 1)
    size = extent.heads * blocks * block * block
    builds = ParamCost(
        drawn=FREQUENCY_BUILDS * (size + AXES * blocks) if params.blocks is None else 0,
        elements=(2 + 2 * AXES) * size,
        passes=(2 + 2 * AXES) * FREQUENCY_BUILDS * size,
    )
    scale = 1.0 / min(params.grid) if params.grid is not None else 1.0
    norm = AXES * scale * 4 * (block - 1) * max(params.init_std, 1.0) * (4 if params.variant == "ld" else 1)
    return rotation_cost(extent, extent.heads, block, norm, ("block_size",)).plus(builds)


@register(
    "comrope",
    axes=AXES,
    kind=Kind.ROTARY,
    params=ComropeParams,
    paper=COMROPE_PAPER,
    learned=True,
    per_layer=True,
    learned_init=comrope_learned_init,
    param_cost=comrope_cost,
    block_rotation=lambda params, heads: (heads, params.block_size),
    pairings=BLOCK_LAYOUT,
    conventions={
        "positions": "(N, 2) int (row, col), as the reference; 3D (video) is not registered",
        "position_scale": "grid n: u = (p + 0.5)/n per axis (the reference's axis_scale); no grid: u = p",
        "ap_partition": "block j belongs to axis j mod 2 (row: even blocks, column: odd), the reference's mask",
        "blocks": "P per head (H, d/b, b, b), B = P − Pᵀ (the reference's freqs (H, 1, m, b, b)[:, 0])",
        "multiplier": "ld: θ (2, d/b) shared by the heads (the reference's (1, 2, m, 1, 1))",
        "init": "P ~ N(0, init_std²), init_std 1.0; ld θ ~ N(0, 1); drawn in that order from seed",
        "block_size": "2 (the reference config default; the paper's main results may use larger blocks)",
        "cls": "the reference rotates CLS at (0.5, 0.5) normalised; here prefix tokens get the identity",
    },
)
def comrope(params: ComropeParams, ctx: RotaryContext) -> RotaryGenerators:
    """ComRoPE: R(p) = expm(Σ_a u_a A_a), A_a = diag(B_a1, …, B_am), B_aj ∈ so(b), with the blocks at each j
    commuting across axes, so R(p)ᵀR(p') = R(p' − p) exactly (Yu et al., 2025).

    AP: B_aj = P_j − P_jᵀ if j ≡ a (mod 2), else 0 (each block driven by one axis; needs d % 2b = 0).
    LD: B_aj = θ_aj (P_j − P_jᵀ) (one skew block per j, scaled per axis). P learned per head.
    """
    tensors = _comrope_tensors(params, ctx)
    raw = tensors["blocks"]  # (H, m, b, b)
    skew = raw - raw.transpose(-1, -2)  # (H, m, b, b)
    blocks = raw.shape[1]
    if params.variant == "ap":
        owner = torch.arange(blocks, device=ctx.device) % AXES  # (m,): the axis of each block
        weight = (owner[None, :] == torch.arange(AXES, device=ctx.device)[:, None]).to(skew.dtype)  # (2, m)
    else:
        weight = tensors["multiplier"]  # (2, m)
    generators = skew[:, None] * weight[None, :, :, None, None]  # (H, 2, m, b, b)
    if params.grid is None:
        scale, offset = _integer_positions(ctx)
    else:
        scale = _axis_tensor(tuple(1.0 / n for n in params.grid), ctx)  # (2,)
        offset = _axis_tensor((0.5,) * AXES, ctx)  # (2,)
    return RotaryGenerators(generators, scale, offset, commuting=True)
