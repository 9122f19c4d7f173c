"""RoPE and the shared rotary apply: hand-computed goldens T8, T9, T18, a float64 reference written from the
paper's complex-number formula, the exact half/interleaved permutation, partial rotary, offsets and bf16."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import RotaryContext, RotaryFrequencies, get_method, rotary_angles, rotary_frequencies
from posenc.pe.kinds import apply_rotary, rotary_tables
from posenc.pe.ops import Pairing, half_to_interleaved_permutation

PAIRINGS: tuple[Pairing, ...] = ("half", "interleaved")


def frequencies(
    name: str, params: dict[str, Any], rotary_dim: int, seq_len: int = 16, dtype: torch.dtype = torch.float64
) -> RotaryFrequencies:
    spec = get_method(name)
    return rotary_frequencies(spec, spec.parse_params(params), RotaryContext(rotary_dim, seq_len, dtype))


def rotate(
    x: torch.Tensor,
    freqs: RotaryFrequencies,
    positions: torch.Tensor,
    pairing: Pairing,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    cos, sin = rotary_tables(freqs, positions, dtype)
    return apply_rotary(x, cos, sin, pairing=pairing)


def reference_rope(x: np.ndarray, positions: np.ndarray, base: float, pairing: Pairing) -> np.ndarray:
    """RoFormer eq. (34) as complex multiplication: pair k is the complex number z_k, rotated by e^{i p ω_k}.

    x: (N, d) float64, positions: (N,) -> (N, d). half pairs (k, k + d/2); interleaved pairs (2k, 2k + 1).
    """
    d = x.shape[-1]
    omega = np.array([base ** (-2.0 * k / d) for k in range(d // 2)])  # (d/2,)
    z = x[:, : d // 2] + 1j * x[:, d // 2 :] if pairing == "half" else x[:, 0::2] + 1j * x[:, 1::2]  # (N, d/2)
    rotated = z * np.exp(1j * positions[:, None] * omega[None, :])  # (N, d/2)
    out = np.empty_like(x)
    if pairing == "half":
        out[:, : d // 2], out[:, d // 2 :] = rotated.real, rotated.imag
    else:
        out[:, 0::2], out[:, 1::2] = rotated.real, rotated.imag
    return out


# ------------------------------------------------------------------------------------------------ goldens
T8_INTERLEAVED = [
    -1.1426396637, 1.9220755965, 2.5856788292, 4.2795169111,
    4.9397510021, 6.0496991692, 6.9919965013, 8.0069959988,
]  # fmt: skip
T8_HALF = [
    -3.6670526182, 1.3910078307, 2.9298511679, 3.9919980013,
    3.5429825141, 6.1696918250, 7.0296495029, 8.0039959993,
]  # fmt: skip


@pytest.mark.parametrize(("pairing", "golden"), [("interleaved", T8_INTERLEAVED), ("half", T8_HALF)])
def test_t8_rope_position_one(pairing: Pairing, golden: list[float]) -> None:
    x = torch.arange(1.0, 9.0, dtype=torch.float64)[None, :]  # (1, 8)
    out = rotate(x, frequencies("rope", {}, 8), torch.tensor([1]), pairing)
    torch.testing.assert_close(out[0], torch.tensor(golden, dtype=torch.float64), rtol=0, atol=1e-9)


def test_t8_permutation_check() -> None:
    x = torch.arange(1.0, 9.0, dtype=torch.float64)[None, :]  # (1, 8)
    perm = half_to_interleaved_permutation(8)
    assert perm.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    freqs, pos = frequencies("rope", {}, 8), torch.tensor([1])
    torch.testing.assert_close(rotate(x[:, perm], freqs, pos, "half"), rotate(x, freqs, pos, "interleaved")[:, perm])


def test_t9_inv_freq() -> None:
    torch.testing.assert_close(
        frequencies("rope", {}, 8).inv_freq, torch.tensor([1, 0.1, 0.01, 0.001], dtype=torch.float64)
    )
    inv_freq = frequencies("rope", {}, 128).inv_freq
    first = torch.tensor([1, 0.8659643234, 0.7498942093, 0.6493816316], dtype=torch.float64)
    last = torch.tensor([1.778279e-4, 1.539927e-4, 1.333521e-4, 1.154782e-4], dtype=torch.float64)
    torch.testing.assert_close(inv_freq[:4], first, rtol=1e-9, atol=0)
    torch.testing.assert_close(inv_freq[-4:], last, rtol=5e-7, atol=0)


def test_float32_inv_freq_is_the_rounded_float64_one() -> None:
    inv64 = frequencies("rope", {"base": 500000.0}, 128).inv_freq
    inv32 = frequencies("rope", {"base": 500000.0}, 128, dtype=torch.float32).inv_freq
    assert inv32.dtype == torch.float32
    assert torch.equal(inv32, inv64.to(torch.float32))


# ---------------------------------------------------------------------------------- float64 reference
@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize(("dim", "base"), [(8, 10000.0), (64, 10000.0), (128, 500000.0)])
def test_matches_complex_reference(pairing: Pairing, dim: int, base: float) -> None:
    gen = torch.Generator().manual_seed(dim)
    x = torch.randn(2, 3, 12, dim, dtype=torch.float64, generator=gen)  # (B, H, N, D)
    positions = torch.tensor([0, 1, 2, 7, 100, 511, 4095, 4096, 10000, 65537, 100000, 1_000_000])
    out = rotate(x, frequencies("rope", {"base": base}, dim), positions, pairing)
    for b in range(2):
        for h in range(3):
            expected = reference_rope(x[b, h].numpy(), positions.numpy().astype(np.float64), base, pairing)
            np.testing.assert_allclose(out[b, h].numpy(), expected, rtol=0, atol=1e-9)


def test_float32_tables_stay_close_to_the_reference_at_long_positions() -> None:
    """The float32 path (float32 angles from int64 positions) is within float32 angle rounding of float64."""
    x = torch.randn(1, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    positions = torch.tensor([100000])
    out32 = rotate(x.float(), frequencies("rope", {}, 64, dtype=torch.float32), positions, "half", torch.float32)
    expected = reference_rope(x.numpy(), positions.numpy().astype(np.float64), 10000.0, "half")
    # |angle| ≤ 1e5 rad carries ≤ ulp(1e5)/2 ≈ 4e-3 rad of float32 error; |x| ≲ 4, so ≲ 2e-2 per feature
    np.testing.assert_allclose(out32.double().numpy(), expected, rtol=0, atol=2e-2)


# --------------------------------------------------------------------------------------------- properties
def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-1, -2)  # (..., Nq, Nk)


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize("shift", [1, 37, 5000])
def test_scores_depend_only_on_relative_position(pairing: Pairing, shift: int) -> None:
    gen = torch.Generator().manual_seed(shift)
    q = torch.randn(2, 10, 32, dtype=torch.float64, generator=gen)  # (H, N, D)
    k = torch.randn(2, 10, 32, dtype=torch.float64, generator=gen)
    freqs = frequencies("rope", {}, 32)
    pos = torch.tensor([0, 3, 4, 9, 10, 20, 21, 50, 99, 100])
    before = scores(rotate(q, freqs, pos, pairing), rotate(k, freqs, pos, pairing))
    after = scores(rotate(q, freqs, pos + shift, pairing), rotate(k, freqs, pos + shift, pairing))
    torch.testing.assert_close(after, before, rtol=0, atol=1e-10)


@pytest.mark.parametrize("dim", [2, 8, 64])
def test_half_and_interleaved_convert_exactly_by_the_permutation(dim: int) -> None:
    gen = torch.Generator().manual_seed(dim)
    q = torch.randn(2, 3, 9, dim, dtype=torch.float32, generator=gen)  # (B, H, N, D)
    k = torch.randn(2, 3, 9, dim, dtype=torch.float32, generator=gen)
    perm = half_to_interleaved_permutation(dim)
    freqs = frequencies("rope", {}, dim, dtype=torch.float32)
    pos = torch.arange(9) * 13
    half_of_permuted = rotate(q[..., perm], freqs, pos, "half", torch.float32)
    interleaved = rotate(q, freqs, pos, "interleaved", torch.float32)
    assert torch.equal(half_of_permuted, interleaved[..., perm])  # the same float operations, bit for bit
    torch.testing.assert_close(
        scores(half_of_permuted, rotate(k[..., perm], freqs, pos, "half", torch.float32)),
        scores(interleaved, rotate(k, freqs, pos, "interleaved", torch.float32)),
    )


def test_the_two_pairings_differ_without_the_permutation() -> None:
    """A checkpoint cannot switch layout without permuting its weights."""
    x = torch.arange(1.0, 9.0, dtype=torch.float64)[None, :]  # (1, 8)
    freqs, pos = frequencies("rope", {}, 8), torch.tensor([1])
    assert not torch.allclose(rotate(x, freqs, pos, "half"), rotate(x, freqs, pos, "interleaved"))


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_partial_rotary_rotates_the_head_and_leaves_the_tail(pairing: Pairing) -> None:
    head_dim, rotary_dim = 48, 16
    x = torch.randn(2, 7, head_dim, dtype=torch.float32, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(7) + 3
    freqs = frequencies("rope", {}, rotary_dim, dtype=torch.float32)
    out = rotate(x, freqs, pos, pairing, torch.float32)
    assert torch.equal(out[..., rotary_dim:], x[..., rotary_dim:])
    # frequencies use d = rotary_dim: the head is a full rotation of a rotary_dim-wide vector
    head = x[..., :rotary_dim].double().numpy()  # (B, N, rotary_dim)
    expected = torch.stack(
        [torch.from_numpy(reference_rope(head[b], pos.numpy() * 1.0, 1e4, pairing)) for b in range(2)]
    )
    torch.testing.assert_close(out[..., :rotary_dim].double(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_offset_positions_equal_the_tail_of_a_longer_sequence(pairing: Pairing) -> None:
    """Decoding with a KV cache: new tokens at offset + arange(n) are rotated as in the full sequence."""
    offset, new = 29, 4
    x = torch.randn(offset + new, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    freqs = frequencies("rope", {}, 16, seq_len=offset + new)
    full = rotate(x, freqs, torch.arange(offset + new), pairing)
    tail = rotate(x[offset:], freqs, torch.arange(new) + offset, pairing)
    torch.testing.assert_close(tail, full[offset:], rtol=0, atol=0)


def test_rotary_dim_larger_than_head_dim_is_invalid_input() -> None:
    x = torch.zeros(3, 8)
    cos, sin = rotary_tables(frequencies("rope", {}, 16, dtype=torch.float32), torch.arange(3))
    with pytest.raises(InvalidInput) as caught:
        apply_rotary(x, cos, sin, pairing="half")
    assert caught.value.loc == ("rotary_dim",)


def test_odd_rotary_dim_is_invalid_input() -> None:
    with pytest.raises(InvalidInput) as caught:
        frequencies("rope", {}, 7)
    assert caught.value.loc == ("rotary_dim",)


def test_values_are_not_rotated_twice_and_norm_is_kept() -> None:
    x = torch.randn(5, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    out = rotate(x, frequencies("rope", {}, 32), torch.arange(5) * 1000, "interleaved")
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))


# --------------------------------------------------------------------------------------- bf16 and T18
def test_t18_bf16_cannot_hold_long_positions() -> None:
    as_bf16 = torch.tensor([100000.0, 65537.0, 4097.0]).bfloat16().float()
    assert as_bf16.tolist() == [99840.0, 65536.0, 4096.0]
    assert math.isclose(math.cos(100000.0), -0.99936081, abs_tol=1e-8)
    assert math.isclose(math.cos(99840.0), 0.98284989, abs_tol=1e-8)


def test_bf16_inputs_are_the_float32_result_rounded_once() -> None:
    x_bf16 = torch.randn(3, 8, 64, generator=torch.Generator().manual_seed(4)).bfloat16()  # (H, N, D)
    positions = torch.arange(8) + 100000
    freqs = frequencies("rope", {}, 64, dtype=torch.float32)
    out_bf16 = rotate(x_bf16, freqs, positions, "half", torch.float32)
    assert out_bf16.dtype == torch.bfloat16
    via_float32 = rotate(x_bf16.float(), freqs, positions, "half", torch.float32).bfloat16()
    assert torch.equal(out_bf16, via_float32)


def test_angles_from_bf16_positions_would_be_wrong() -> None:
    freqs = frequencies("rope", {}, 8, dtype=torch.float32)
    int_pos = torch.tensor([100000])
    cos, _ = rotary_tables(freqs, int_pos)
    assert cos[0, 0].item() == pytest.approx(math.cos(100000.0), abs=1e-2)  # ω_0 = 1: angle = position
    bf16_angle = int_pos.to(torch.bfloat16).float() * freqs.inv_freq[0]
    assert torch.cos(bf16_angle).item() == pytest.approx(math.cos(99840.0), abs=1e-2)
    assert cos[0, 0].item() < 0 < torch.cos(bf16_angle).item()  # the sign flips
    with pytest.raises(TypeError):
        rotary_angles(freqs, int_pos.to(torch.bfloat16), torch.float32)
