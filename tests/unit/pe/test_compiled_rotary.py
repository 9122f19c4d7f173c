"""The compiled one-pass rotary kernel (``posenc.pe.compiled``) against the eager apply: equal to float32 rounding
for both pairings and xPos scaling; used only where it may be (large float32 inputs outside autograd, full
rotation), never for float64, whose eager path equals the plain formula bit for bit; and never compiling on
the caller's thread."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pytest
import torch

from posenc.pe import compiled
from posenc.pe.kinds import apply_rotary

Pairing = Literal["half", "interleaved"]


@pytest.fixture
def eager_only() -> Iterator[None]:
    compiled.configure(enabled=False)
    yield
    compiled.configure(enabled=True)


def tables(length: int, half_rot: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(half_rot)
    angles = torch.rand(length, half_rot, generator=generator, dtype=torch.float64) * 1000  # (N, d_rot/2)
    scale = 1 + torch.rand(length, half_rot, generator=generator, dtype=torch.float64)  # (N, d_rot/2)
    return angles.cos().to(dtype), angles.sin().to(dtype), scale.to(dtype)


def large(dtype: torch.dtype = torch.float32, batch: int = 2) -> torch.Tensor:
    """(B, H, N, D) above ``COMPILE_MIN_BYTES``."""
    elements = compiled.COMPILE_MIN_BYTES // torch.tensor([], dtype=dtype).element_size()
    length = elements // (batch * 4 * 64) + 1
    return torch.randn(batch, 4, length, 64, generator=torch.Generator().manual_seed(0), dtype=dtype)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("with_scale", [False, True])
def test_the_compiled_kernel_equals_the_eager_apply(pairing: Pairing, with_scale: bool) -> None:
    assert compiled.wait_until_ready(pairing)
    x = large()
    rotary_dim = x.shape[-1]
    cos, sin, scale = tables(x.shape[-2], rotary_dim // 2, torch.float32)
    fused = compiled.rotate(x, cos, sin, pairing, scale if with_scale else None)
    assert fused is not None  # ready, and the input is one it serves
    compiled.configure(enabled=False)
    try:
        eager = apply_rotary(x, cos, sin, pairing=pairing, scale=scale if with_scale else None)
    finally:
        compiled.configure(enabled=True)
    eps = torch.finfo(torch.float32).eps  # xPos's scale is folded into the tables: a few roundings apart at most
    torch.testing.assert_close(fused, eager, rtol=8 * eps, atol=16 * eps)
    assert torch.equal(apply_rotary(x, cos, sin, pairing=pairing, scale=scale if with_scale else None), fused)


def test_what_the_kernel_leaves_to_the_eager_path() -> None:
    assert compiled.wait_until_ready("half")
    x = large()
    cos, sin, _ = tables(x.shape[-2], 32, torch.float32)
    assert compiled.rotate(x, cos, sin, "half", None) is not None
    small = x[:, :, :8].contiguous()
    assert compiled.rotate(small, cos[:8], sin[:8], "half", None) is None  # under COMPILE_MIN_BYTES
    assert compiled.rotate(x.double(), cos.double(), sin.double(), "half", None) is None  # float64: exact eager
    assert compiled.rotate(x.transpose(1, 2), cos, sin, "half", None) is None  # not contiguous
    assert compiled.rotate(x, cos[:, :16], sin[:, :16], "half", None) is None  # partial: eager was faster
    single = large(batch=1)[:, :1]  # (1, 1, N, D): a size of 1 would need a kernel of its own
    cos_single, sin_single, _ = tables(single.shape[-2], 32, torch.float32)
    assert compiled.rotate(single.contiguous(), cos_single, sin_single, "half", None) is None
    with torch.enable_grad():
        assert compiled.rotate(x.clone().requires_grad_(), cos, sin, "half", None) is None


def test_tensors_off_the_cpu_go_straight_to_the_eager_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel is compiled for the CPU: a tensor elsewhere (CUDA; meta stands in for it here) must not even
    try it (on an H100 the failed attempt cost 35x the eager apply), nor start a compile."""

    def no_kernel(pairing: Pairing) -> None:
        raise AssertionError(f"the {pairing} kernel was asked for a tensor that is not on the CPU")

    monkeypatch.setattr(compiled, "_kernel", no_kernel)
    x = large().to("meta")
    cos, sin, _ = tables(x.shape[-2], 32, torch.float32)
    assert compiled.rotate(x, cos.to("meta"), sin.to("meta"), "half", None) is None
    assert apply_rotary(x, cos.to("meta"), sin.to("meta"), pairing="half").device.type == "meta"


def test_float64_stays_on_the_exact_eager_path() -> None:
    """Even where a compiled kernel is ready, float64 is the plain formula: products rounded, then summed."""
    assert compiled.wait_until_ready("half")
    x = large(torch.float64)
    cos, sin, _ = tables(x.shape[-2], 32, torch.float64)
    first, second = x[..., :32], x[..., 32:]
    expected = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    assert torch.equal(apply_rotary(x, cos, sin, pairing="half"), expected)


def test_switched_off_means_eager(eager_only: None) -> None:
    x = large()
    cos, sin, _ = tables(x.shape[-2], 32, torch.float32)
    assert compiled.rotate(x, cos, sin, "half", None) is None
    assert not compiled.wait_until_ready("half")


def test_threads_take_turns_and_leave_dynamo_as_they_found_it() -> None:
    """Dynamo's stance is global: concurrent callers take turns at the kernel (a caller that finds the turn
    taken, as during a compile, runs eagerly), every answer is the same, and the stance is back to default."""
    import threading

    import torch._dynamo.eval_frame as eval_frame

    assert compiled.wait_until_ready("half")
    x = large()
    cos, sin, _ = tables(x.shape[-2], 32, torch.float32)
    expected = compiled.rotate(x, cos, sin, "half", None)
    assert expected is not None
    with compiled._dynamo_turn:  # a compile (or another call) under way: this call goes eager
        assert compiled.rotate(x, cos, sin, "half", None) is None
    answers: list[torch.Tensor] = []

    def caller() -> None:
        for _ in range(10):
            answers.append(apply_rotary(x, cos, sin, pairing="half"))

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    eps = torch.finfo(torch.float32).eps
    for answer in answers:  # the kernel's, or the eager path's where the turn was taken
        torch.testing.assert_close(answer, expected, rtol=4 * eps, atol=4 * eps)
    assert eval_frame._stance.stance == "default"
