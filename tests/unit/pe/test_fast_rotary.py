"""The fast rotary apply (one output buffer; interleaved pairs as one complex multiply; out= and in-place
variants) against the reference formula it replaced: equal in float64 exactly and in float32 to float32
rounding, for both pairings, partial rotation and xPos scaling; and the reference path is still what autograd
uses."""

from __future__ import annotations

from typing import Literal

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe.kinds import apply_rotary
from posenc.pe.ops import _rotate_pairs_differentiable, rotate_pairs

Pairing = Literal["half", "interleaved"]


def reference(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: Pairing, scale: torch.Tensor | None
) -> torch.Tensor:
    """The functional form: rotate the first d_rot features, scale them, concatenate the rest."""
    rot = cos.shape[-1] * 2
    rotated = _rotate_pairs_differentiable(x[..., :rot], cos, sin, pairing, None)
    if scale is not None:
        rotated = rotated * (torch.cat((scale, scale), -1) if pairing == "half" else scale.repeat_interleave(2, -1))
    return torch.cat((rotated, x[..., rot:]), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [64, 32, 16])
@pytest.mark.parametrize("with_scale", [False, True])
def test_the_fast_apply_equals_the_reference(
    dtype: torch.dtype, pairing: Pairing, rotary_dim: int, with_scale: bool
) -> None:
    generator = torch.Generator().manual_seed(rotary_dim)
    x = torch.randn(2, 3, 17, 64, generator=generator, dtype=dtype)  # (B, H, N, D)
    angles = torch.rand(17, rotary_dim // 2, generator=generator, dtype=torch.float64) * 100  # (N, d_rot/2)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    scale = (1 + torch.rand(17, rotary_dim // 2, generator=generator, dtype=dtype)) if with_scale else None
    fast = apply_rotary(x, cos, sin, pairing=pairing, scale=scale)
    expected = reference(x, cos, sin, pairing, scale)
    if dtype == torch.float64:
        assert torch.equal(fast, expected)
    else:  # each output is two products and a sum: at most a rounding apart however the kernel fuses them
        torch.testing.assert_close(fast, expected, rtol=2 * torch.finfo(dtype).eps, atol=torch.finfo(dtype).eps)
    assert torch.equal(fast[..., rotary_dim:], x[..., rotary_dim:])  # the rest passes through untouched


def test_autograd_takes_the_differentiable_path() -> None:
    x = torch.randn(1, 2, 5, 8, requires_grad=True)
    angles = torch.rand(5, 4, dtype=torch.float64)
    cos, sin = angles.cos().float(), angles.sin().float()
    out = rotate_pairs(x, cos, sin, "half")
    out.sum().backward()  # type: ignore[no-untyped-call]
    assert x.grad is not None
    with torch.no_grad():  # the in-place path: a fused multiply-add in float32, equal to float32 rounding
        eps = torch.finfo(torch.float32).eps
        torch.testing.assert_close(rotate_pairs(x, cos, sin, "half"), out, rtol=2 * eps, atol=eps)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [64, 16])
@pytest.mark.parametrize("with_scale", [False, True])
def test_the_out_and_in_place_variants_equal_the_reference(
    dtype: torch.dtype, pairing: Pairing, rotary_dim: int, with_scale: bool
) -> None:
    """out= a caller's buffer, and out=x (in place, half the rotated features as scratch) give the new-tensor
    result bit for bit."""
    generator = torch.Generator().manual_seed(rotary_dim)
    x = torch.randn(2, 3, 17, 64, generator=generator, dtype=dtype)  # (B, H, N, D); one slab 17·64 elements
    angles = torch.rand(17, rotary_dim // 2, generator=generator, dtype=torch.float64) * 100  # (N, d_rot/2)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    scale = (1 + torch.rand(17, rotary_dim // 2, generator=generator, dtype=dtype)) if with_scale else None
    expected = apply_rotary(x, cos, sin, pairing=pairing, scale=scale)
    if dtype == torch.float64:
        assert torch.equal(expected, reference(x, cos, sin, pairing, scale))
    buffer = torch.empty_like(x)
    assert apply_rotary(x, cos, sin, pairing=pairing, scale=scale, out=buffer) is buffer
    assert torch.equal(buffer, expected)
    owned = x.clone()
    assert apply_rotary(owned, cos, sin, pairing=pairing, scale=scale, out=owned) is owned
    assert torch.equal(owned, expected)


def test_out_must_fit_and_cannot_be_differentiated() -> None:
    x = torch.randn(1, 2, 5, 8)
    angles = torch.rand(5, 4, dtype=torch.float64)
    cos, sin = angles.cos().float(), angles.sin().float()
    with pytest.raises(InvalidInput, match="out must be contiguous"):
        apply_rotary(x, cos, sin, pairing="half", out=torch.empty(1, 2, 5, 6))
    with pytest.raises(InvalidInput, match="out must be contiguous"):
        apply_rotary(x, cos, sin, pairing="half", out=torch.empty(1, 2, 5, 8, dtype=torch.float64))
    with pytest.raises(InvalidInput, match="cannot be differentiated"):
        apply_rotary(x.requires_grad_(), cos, sin, pairing="half", out=torch.empty(1, 2, 5, 8))


def test_a_transposed_input_is_rotated_as_its_values_say() -> None:
    """q taken from a fused projection as a (B, T, H, d) -> (B, H, T, d) view: not contiguous, same answer."""
    generator = torch.Generator().manual_seed(2)
    projected = torch.randn(2, 9, 3, 16, generator=generator)  # (B, T, H, d)
    angles = torch.rand(9, 8, generator=generator, dtype=torch.float64)
    cos, sin = angles.cos().float(), angles.sin().float()
    for pairing in ("half", "interleaved"):
        view = projected.transpose(1, 2)  # (B, H, T, d), strided
        assert torch.equal(
            apply_rotary(view, cos, sin, pairing=pairing), apply_rotary(view.contiguous(), cos, sin, pairing=pairing)
        )
