"""xPos: hand-computed golden T14, the score identity q̃_i·k̃_j = Σ_k ζ_k^((i−j)/λ)·[rotary term]_k
through the generic apply, decay with distance, and the centring convention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import RotaryContext, RotaryFrequencies, get_method, rotary_frequencies
from posenc.pe.kinds import apply_rotary, rotary_tables, xpos_scale
from posenc.pe.ops import Pairing


def xpos_frequencies(dim: int, dtype: torch.dtype = torch.float64, **params: float) -> RotaryFrequencies:
    spec = get_method("xpos")
    return rotary_frequencies(spec, spec.parse_params(params), RotaryContext(dim, 16, dtype))


def xpos_scores(
    q: torch.Tensor, k: torch.Tensor, freqs: RotaryFrequencies, positions: torch.Tensor, pairing: Pairing
) -> torch.Tensor:
    """Queries × ζ^(n/λ), keys × its reciprocal, both through the one shared apply: (N, N) scores."""
    cos, sin = rotary_tables(freqs, positions, torch.float64)
    scale = xpos_scale(freqs, positions, torch.float64)
    assert scale is not None
    q_rot = apply_rotary(q, cos, sin, pairing=pairing, scale=scale)
    k_rot = apply_rotary(k, cos, sin, pairing=pairing, scale=1.0 / scale)
    return q_rot @ k_rot.T


def test_t14_zeta() -> None:
    zeta = xpos_frequencies(8).xpos_zeta
    assert zeta is not None
    torch.testing.assert_close(
        zeta, torch.tensor([0.2857142857, 0.4642857143, 0.6428571429, 0.8214285714], dtype=torch.float64),
        rtol=0, atol=1e-10,
    )  # fmt: skip
    zeta128 = xpos_frequencies(128).xpos_zeta
    assert zeta128 is not None
    assert zeta128[0].item() == pytest.approx(0.2857142857, abs=1e-10)
    assert zeta128[63].item() == pytest.approx(0.9888392857, abs=1e-10)


def test_t14_query_scale_at_centred_positions() -> None:
    freqs = xpos_frequencies(8)
    assert freqs.xpos_scale_base == 512.0
    scale = xpos_scale(freqs, torch.tensor([512, -256]), torch.float64)
    assert scale is not None
    torch.testing.assert_close(scale[0], freqs.xpos_zeta)
    golden = torch.tensor([1.8708286934, 1.4675987714, 1.2472191289, 1.1033545687], dtype=torch.float64)
    torch.testing.assert_close(scale[1], golden, rtol=0, atol=1e-10)


def test_xpos_angles_are_ropes() -> None:
    freqs = xpos_frequencies(16, base=10000.0)
    expected = torch.tensor([10000.0 ** (-2 * k / 16) for k in range(8)], dtype=torch.float64)
    torch.testing.assert_close(freqs.inv_freq, expected, rtol=1e-14, atol=0)
    assert freqs.attention_scale == 1.0


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_score_is_the_decayed_sum_of_rotary_terms(pairing: Pairing) -> None:
    dim, scale_base = 16, 512.0
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(6, dim, dtype=torch.float64, generator=gen)
    k = torch.randn(6, dim, dtype=torch.float64, generator=gen)
    positions = torch.tensor([0, 1, 5, 40, 300, 1000])
    got = xpos_scores(q, k, xpos_frequencies(dim), positions, pairing)

    # independent float64 reference, paper eq. with complex pairs z_k (layout given by the pairing)
    half = dim // 2
    omega = np.array([10000.0 ** (-2.0 * kk / dim) for kk in range(half)])
    zeta = np.array([(2 * kk + 0.4 * dim) / (1.4 * dim) for kk in range(half)])
    qn, kn, pos = q.numpy(), k.numpy(), positions.numpy().astype(np.float64)
    zq = qn[:, :half] + 1j * qn[:, half:] if pairing == "half" else qn[:, 0::2] + 1j * qn[:, 1::2]  # (N, d/2)
    zk = kn[:, :half] + 1j * kn[:, half:] if pairing == "half" else kn[:, 0::2] + 1j * kn[:, 1::2]  # (N, d/2)
    rq = zq * np.exp(1j * pos[:, None] * omega)  # (N, d/2)
    rk = zk * np.exp(1j * pos[:, None] * omega)  # (N, d/2)
    rotary_term = (rq[:, None, :] * np.conj(rk[None, :, :])).real  # (N, N, d/2): pair-wise dot products
    decay = zeta[None, None, :] ** ((pos[:, None, None] - pos[None, :, None]) / scale_base)  # (N, N, d/2)
    expected = (decay * rotary_term).sum(-1)  # (N, N)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_scores_decay_with_distance() -> None:
    """Without rotation (ω = 0) and with q = k, the score is Σ_k ζ_k^((i−j)/λ)·|q_k|²: strictly decreasing."""
    freqs = xpos_frequencies(16)
    no_rotation = RotaryFrequencies(
        inv_freq=torch.zeros_like(freqs.inv_freq),
        xpos_zeta=freqs.xpos_zeta,
        xpos_scale_base=freqs.xpos_scale_base,
    )
    x = torch.randn(1, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(8)).expand(50, 16)
    positions = torch.arange(50) * 20
    last_row = xpos_scores(x, x, no_rotation, positions, "half")[-1]  # query 49 against keys 0..49
    assert (last_row.diff() > 0).all()  # nearer keys (larger j) score higher
    torch.testing.assert_close(last_row[-1], (x[0] ** 2).sum())  # i = j: no decay


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_shifting_all_positions_cancels(pairing: Pairing) -> None:
    """Centring (torchscale: n − ⌊N/2⌋) is free: a common shift of q and k positions leaves the scores."""
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(8, 32, dtype=torch.float64, generator=gen)
    k = torch.randn(8, 32, dtype=torch.float64, generator=gen)
    freqs = xpos_frequencies(32)
    positions = torch.arange(8) * 100 + 3000
    raw = xpos_scores(q, k, freqs, positions, pairing)
    centred = xpos_scores(q, k, freqs, positions - 3350, pairing)
    torch.testing.assert_close(centred, raw, rtol=1e-10, atol=1e-10)


def test_scale_base_is_a_parameter() -> None:
    assert xpos_frequencies(8, scale_base=2048.0).xpos_scale_base == 2048.0


def _scores_in(dtype: torch.dtype, positions: torch.Tensor, seq_len: int, **params: object) -> torch.Tensor:
    """Scores of fixed random q, k at ``positions`` with tables, scales and the apply all in ``dtype``."""
    spec = get_method("xpos")
    freqs = rotary_frequencies(spec, spec.parse_params(params), RotaryContext(16, seq_len, dtype))
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(len(positions), 16, generator=generator, dtype=torch.float64).to(dtype)
    k = torch.randn(len(positions), 16, generator=generator, dtype=torch.float64).to(dtype)
    cos, sin = rotary_tables(freqs, positions, dtype)
    scale = xpos_scale(freqs, positions, dtype)
    assert scale is not None
    q_rot = apply_rotary(q, cos, sin, pairing="half", scale=scale)
    k_rot = apply_rotary(k, cos, sin, pairing="half", scale=1.0 / scale)
    return (q_rot @ k_rot.T).to(torch.float64)


def test_raw_positions_that_overflow_float32_are_refused_naming_scale_center() -> None:
    positions = torch.arange(59_990, 60_000)
    with pytest.raises(InvalidInput, match="scale_center='midpoint'") as refused:
        _scores_in(torch.float32, positions, 60_000)
    assert refused.value.loc == ("params", "scale_center")


def test_midpoint_centring_keeps_float32_finite_and_gives_the_raw_scores() -> None:
    positions = torch.arange(59_990, 60_000)
    # the centring identity, exactly (float64 holds ζ^(±60000/512) with raw positions too)
    raw = _scores_in(torch.float64, positions, 60_000)
    centred = _scores_in(torch.float64, positions, 60_000, scale_center="midpoint")
    torch.testing.assert_close(centred, raw, rtol=1e-9, atol=1e-12)
    # float32 now stays finite; it differs from float64 only by float32 RoPE angles at n = 60000 (~4e-3 rad)
    centred32 = _scores_in(torch.float32, positions, 60_000, scale_center="midpoint")
    assert torch.isfinite(centred32).all()
    torch.testing.assert_close(centred32, raw, rtol=0, atol=2e-2)


@pytest.mark.parametrize(("seq_len", "centre"), [(6, 3), (7, 4), (1, 1)])
def test_midpoint_centre_is_torchscales_ceiling_of_half_the_length(seq_len: int, centre: int) -> None:
    """torchscale's XPOS takes min_pos = -(L // 2 rounded away from zero) = -⌈L/2⌉: position n uses n − ⌈L/2⌉."""
    spec = get_method("xpos")
    params = spec.parse_params({"scale_center": "midpoint"})
    assert rotary_frequencies(spec, params, RotaryContext(8, seq_len)).xpos_center == centre
