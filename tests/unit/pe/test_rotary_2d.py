"""2D axial RoPE (RoPE-ViT): hand-computed golden T22, a float64 reference written from the paper, and the
per-axis relative property through the shared apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import RotaryContext, RotaryFrequencies, get_method, rotary_frequencies
from posenc.pe.kinds import apply_rotary, rotary_tables
from posenc.pe.ops import Pairing


def axial_frequencies(dim: int, **params: float) -> RotaryFrequencies:
    spec = get_method("rope_2d_axial")
    return rotary_frequencies(spec, spec.parse_params(params), RotaryContext(dim, 16, torch.float64))


def rotate(x: torch.Tensor, freqs: RotaryFrequencies, positions: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    cos, sin = rotary_tables(freqs, positions, torch.float64)
    return apply_rotary(x, cos, sin, pairing=pairing)


def grid_positions(height: int, width: int) -> torch.Tensor:
    """(row, col) = (y, x) = (t div W, t mod W) for patch token t: (H·W, 2) int64."""
    t = torch.arange(height * width)
    return torch.stack((t // width, t % width), dim=-1)


def test_t22_axial_frequencies() -> None:
    freqs = axial_frequencies(64)
    golden = torch.tensor([1, 0.7498942093, 0.5623413252, 0.4216965034], dtype=torch.float64)
    torch.testing.assert_close(freqs.inv_freq[:4], golden, rtol=0, atol=1e-10)  # x pairs
    torch.testing.assert_close(freqs.inv_freq[16:20], golden, rtol=0, atol=1e-10)  # y pairs: same frequencies
    assert freqs.num_axes == 2
    assert freqs.pair_axis is not None
    assert freqs.pair_axis.tolist() == [1] * 16 + [0] * 16  # x = column (axis 1), then y = row (axis 0)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_matches_the_paper_reference(pairing: Pairing) -> None:
    dim, theta = 32, 100.0
    positions = grid_positions(3, 5)
    x = torch.randn(15, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = rotate(x, axial_frequencies(dim), positions, pairing)

    quarter = dim // 4
    omega = np.array([theta ** (-4.0 * kk / dim) for kk in range(quarter)])  # (d/4,)
    pos = positions.numpy().astype(np.float64)
    phase = np.concatenate([pos[:, 1:] * omega, pos[:, :1] * omega], axis=1)  # (N, d/2): x pairs, then y pairs
    xn = x.numpy()
    z = xn[:, : dim // 2] + 1j * xn[:, dim // 2 :] if pairing == "half" else xn[:, 0::2] + 1j * xn[:, 1::2]
    rotated = z * np.exp(1j * phase)  # (N, d/2)
    expected = np.empty_like(xn)
    if pairing == "half":
        expected[:, : dim // 2], expected[:, dim // 2 :] = rotated.real, rotated.imag
    else:
        expected[:, 0::2], expected[:, 1::2] = rotated.real, rotated.imag
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("shift", [(3, 0), (0, 5), (7, 11)])
def test_scores_depend_only_on_offsets_along_each_axis(pairing: Pairing, shift: tuple[int, int]) -> None:
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(12, 32, dtype=torch.float64, generator=gen)
    k = torch.randn(12, 32, dtype=torch.float64, generator=gen)
    freqs = axial_frequencies(32)
    positions = grid_positions(3, 4)
    moved = positions + torch.tensor(shift)
    before = rotate(q, freqs, positions, pairing) @ rotate(k, freqs, positions, pairing).T
    after = rotate(q, freqs, moved, pairing) @ rotate(k, freqs, moved, pairing).T
    torch.testing.assert_close(after, before, rtol=0, atol=1e-12)


def test_each_axis_drives_its_own_pairs() -> None:
    """Moving along x changes only the x pairs (the first d/4 pairs); moving along y only the others."""
    freqs = axial_frequencies(16)
    origin, along_x, along_y = (
        torch.tensor([[0, 0]]),
        torch.tensor([[0, 3]]),
        torch.tensor([[3, 0]]),
    )  # (1, 2) (row, col)
    cos0, _ = rotary_tables(freqs, origin, torch.float64)
    cos_x, _ = rotary_tables(freqs, along_x, torch.float64)
    cos_y, _ = rotary_tables(freqs, along_y, torch.float64)
    assert torch.equal(cos_x[0, 4:], cos0[0, 4:])
    assert not torch.equal(cos_x[0, :4], cos0[0, :4])
    assert torch.equal(cos_y[0, :4], cos0[0, :4])
    assert not torch.equal(cos_y[0, 4:], cos0[0, 4:])


def test_rotary_dim_not_divisible_by_four_is_invalid_input() -> None:
    with pytest.raises(InvalidInput) as caught:
        axial_frequencies(18)
    assert caught.value.loc == ("rotary_dim",)


def test_one_coordinate_positions_are_invalid_input() -> None:
    with pytest.raises(InvalidInput) as caught:
        rotary_tables(axial_frequencies(16), torch.arange(4), torch.float64)
    assert caught.value.loc == ("positions",)
