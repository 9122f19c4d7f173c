"""KERPLE family: conditionally positive-definite kernels of the distance, two learned scalars per head
(Chi, Fan, Ramadge, Rudnicky, NeurIPS 2022).

Methods: ``kerple_log`` (−r1·log(1 + r2·|i − j|)) and ``kerple_power`` (−r1·|i − j|^r2).
Parameters are given per head as plain lists, or drawn from ``seed`` with the reference code's init
(``chijames/KERPLE:megatron/mpu/layers.py``), including its 0.01 floor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated

import torch
from pydantic import Field

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype, relative_positions
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import BiasContext
from posenc.schemas.compute import MAX_HEADS
from posenc.schemas.methods import Kind

KERPLE_PAPER = (
    "Chi, Fan, Ramadge, Rudnicky. KERPLE: Kernelized Relative Positional Embedding for Length "
    "Extrapolation (NeurIPS 2022). https://arxiv.org/abs/2205.09921"
)
# The reference clamps every parameter to at least this on each forward pass (through .data).
REFERENCE_FLOOR = 0.01

PositiveFloat = Annotated[float, Field(gt=0)]
KernelPower = Annotated[float, Field(gt=0, le=2)]  # p <= 2 keeps -|x|^p conditionally positive definite

Initialiser = Callable[[int, int], dict[str, torch.Tensor]]


def initial_log_parameters(num_heads: int, seed: int) -> dict[str, torch.Tensor]:
    """ParallelKerpleLog's init: r1 (bias_p) ~ U(0, 2), r2 (bias_a) ~ U(0, 1), both floored at 0.01.

    Drawn in float32 on the CPU from torch.Generator().manual_seed(seed), r1 first, then r2.
    """
    generator = torch.Generator().manual_seed(seed)
    r1 = torch.rand(num_heads, generator=generator, dtype=torch.float32) * 2.0
    r2 = torch.rand(num_heads, generator=generator, dtype=torch.float32)
    return {"r1": r1.clamp(min=REFERENCE_FLOOR), "r2": r2.clamp(min=REFERENCE_FLOOR)}


def initial_power_parameters(num_heads: int, seed: int) -> dict[str, torch.Tensor]:
    """ParallelKerplePower's init: r1 (bias_a) ~ U(0, 1) floored at 0.01, r2 (bias_p) ~ U(0, 2) in [0.01, 2].

    Drawn in float32 on the CPU from torch.Generator().manual_seed(seed), r1 first, then r2.
    """
    generator = torch.Generator().manual_seed(seed)
    r1 = torch.rand(num_heads, generator=generator, dtype=torch.float32)
    r2 = torch.rand(num_heads, generator=generator, dtype=torch.float32) * 2.0
    return {"r1": r1.clamp(min=REFERENCE_FLOOR), "r2": r2.clamp(min=REFERENCE_FLOOR, max=2.0)}


class KerpleLogParams(MethodParams):
    r1: list[PositiveFloat] | None = Field(
        default=None, max_length=MAX_HEADS, description="scale r1_h > 0, one per head; omit to draw from seed"
    )
    r2: list[PositiveFloat] | None = Field(
        default=None, max_length=MAX_HEADS, description="rate r2_h > 0, one per head; omit to draw from seed"
    )
    seed: Seed = Field(default=0, description="seed of the reference init for the omitted parameters")


class KerplePowerParams(MethodParams):
    r1: list[PositiveFloat] | None = Field(
        default=None, max_length=MAX_HEADS, description="scale r1_h > 0, one per head; omit to draw from seed"
    )
    r2: list[KernelPower] | None = Field(
        default=None,
        max_length=MAX_HEADS,
        description="power 0 < r2_h <= 2, one per head; omit to draw from seed",
    )
    seed: Seed = Field(default=0, description="seed of the reference init for the omitted parameters")


def _per_head(
    value: Sequence[float] | torch.Tensor | None, seeded: torch.Tensor, field: str, ctx: BiasContext
) -> torch.Tensor:
    """(H,) in float64: the supplied list (or a training tensor, see MethodSpec.learned_init),
    else the seeded values. Supplied values are used as given: the schema has checked their range."""
    per_head = seeded if value is None else torch.as_tensor(value, dtype=torch.float64)
    if tuple(per_head.shape) != (ctx.num_heads,):
        raise InvalidInput(
            ("params", field),
            f"needs one value per head ({ctx.num_heads}), got {list(per_head.shape)}",
        )
    return per_head.to(device=ctx.device, dtype=torch.float64)


def _kernel_parameters(
    r1: Sequence[float] | torch.Tensor | None,
    r2: Sequence[float] | torch.Tensor | None,
    seed: int,
    initialise: Initialiser,
    ctx: BiasContext,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Both are drawn even when one is supplied, so a seeded r2 does not depend on whether r1 was given.
    seeded = initialise(ctx.num_heads, seed)
    return _per_head(r1, seeded["r1"], "r1", ctx), _per_head(r2, seeded["r2"], "r2", ctx)


def _per_distance(
    kernel: Callable[[torch.Tensor], torch.Tensor], q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext
) -> torch.Tensor:
    """Run ``kernel`` (float64 distances (M,) -> (H, M)) once per distinct |i − j|, then gather: (H, Nq, Nk).

    |i − j| in both directions: the reference's causal tril(i − j) agrees wherever j <= i, and the symmetric
    form is NeMo's bidirectional one. The kernel runs in float64 on at most Nq + Nk − 1 values and is rounded
    once: vectorised and scalar pow/log1p paths differ in the last float32 bit, so computing it in the
    output precision would let a value depend on where it sits in the tensor.
    """
    distance = relative_positions(q_pos, k_pos).abs()  # (Nq, Nk) int64
    distinct, index = torch.unique(distance, return_inverse=True)  # (M,), (Nq, Nk)
    per_head = kernel(distinct.to(torch.float64)).to(compute_dtype(ctx.dtype))  # (H, M)
    return per_head[:, index].to(ctx.dtype)  # (H, Nq, Nk)


def kerple_log_learned_init(params: KerpleLogParams, ctx: BiasContext) -> dict[str, torch.Tensor]:
    """The reference init of r1 and r2 from params.seed (see ``MethodSpec.learned_init``)."""
    return initial_log_parameters(ctx.num_heads, params.seed)


def kerple_power_learned_init(params: KerplePowerParams, ctx: BiasContext) -> dict[str, torch.Tensor]:
    """The reference init of r1 and r2 from params.seed (see ``MethodSpec.learned_init``)."""
    return initial_power_parameters(ctx.num_heads, params.seed)


_CONVENTIONS = {
    "distance": "|i - j| in both directions (causal: the reference's tril(i - j) under the mask)",
    "init": "seeded from the reference code, floored at 0.01; supplied values are used as given",
    "training": "r1 and r2 are clamped into their ranges (at least 0.01; the power's r2 at most 2) after every "
    "optimizer step, the reference's clamp of .data before each forward",
    "scale_placement": "added after the 1/sqrt(d) scaling",
}


@register(
    "kerple_log",
    kind=Kind.BIAS,
    params=KerpleLogParams,
    paper=KERPLE_PAPER,
    learned=True,
    toeplitz=True,
    learned_init=kerple_log_learned_init,
    learned_bounds={"r1": (REFERENCE_FLOOR, None), "r2": (REFERENCE_FLOOR, None)},
    conventions={**_CONVENTIONS, "parameterisation": "paper r1, r2 (reference bias_p = r1, bias_a = r2)"},
)
def kerple_log(params: KerpleLogParams, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext) -> torch.Tensor:
    """KERPLE logarithmic kernel: B[h, i, j] = −r1_h·log(1 + r2_h·|i − j|), r1, r2 > 0 learned per head.

    Computed with log1p, which stays accurate when r2·|i − j| is small.
    """
    r1, r2 = _kernel_parameters(params.r1, params.r2, params.seed, initial_log_parameters, ctx)  # (H,) each

    def kernel(distance: torch.Tensor) -> torch.Tensor:  # (M,) -> (H, M)
        bias = r1[:, None] * torch.log1p(r2[:, None] * distance[None, :])
        return 0.0 - bias  # 0 - x rather than -x: zero distance gives 0.0, not -0.0

    return _per_distance(kernel, q_pos, k_pos, ctx)


@register(
    "kerple_power",
    kind=Kind.BIAS,
    params=KerplePowerParams,
    paper=KERPLE_PAPER,
    learned=True,
    toeplitz=True,
    learned_init=kerple_power_learned_init,
    learned_bounds={"r1": (REFERENCE_FLOOR, None), "r2": (REFERENCE_FLOOR, 2.0)},
    conventions={**_CONVENTIONS, "parameterisation": "paper r1, r2 (reference bias_a = r1, bias_p = r2)"},
)
def kerple_power(params: KerplePowerParams, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext) -> torch.Tensor:
    """KERPLE power kernel: B[h, i, j] = −r1_h·|i − j|^{r2_h}, r1 > 0 and 0 < r2 <= 2 learned per head.

    With r1 = ALiBi's slopes and r2 = 1 this is ALiBi (the reference's 'original' option).
    """
    r1, r2 = _kernel_parameters(params.r1, params.r2, params.seed, initial_power_parameters, ctx)  # (H,) each

    def kernel(distance: torch.Tensor) -> torch.Tensor:  # (M,) -> (H, M)
        bias = r1[:, None] * torch.pow(distance[None, :], r2[:, None])
        return 0.0 - bias  # 0 - x rather than -x: zero distance gives 0.0, not -0.0

    return _per_distance(kernel, q_pos, k_pos, ctx)
