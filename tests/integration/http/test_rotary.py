"""POST /v1/rotary: RoPE against a float64 rotation written here, and every rotary method against the
library's own frequency functions."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from starlette.testclient import TestClient

from posenc.pe import (
    MethodSpec,
    RotaryContext,
    apply_rotary,
    list_methods,
    rotary_frequencies,
    rotary_tables,
    xpos_scale,
)
from posenc.pe.kinds import apply_block_rotation, block_rotations
from posenc.pe.types import RotaryGenerators
from posenc.schemas.methods import Kind


def rope_by_hand(x: torch.Tensor, positions: torch.Tensor, base: float, pairing: str) -> torch.Tensor:
    """float64 RoPE from the paper: pair k of token n turns by n·base^(-2k/d)."""
    x = x.to(torch.float64)
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angle = positions.to(torch.float64)[:, None] * theta[None, :]  # (N, d/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    if pairing == "half":
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rope_matches_the_paper(client: TestClient, wire: Any, inline: Any, pairing: str) -> None:
    q = torch.randn(2, 3, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    k = torch.randn(2, 3, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    request = {"method": "rope", "q": inline(q), "k": inline(k), "pairing": pairing, "offset": 5}
    response = client.post("/v1/rotary", json=request, headers={"Accept": "application/vnd.safetensors"})
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)
    positions = torch.arange(7) + 5
    torch.testing.assert_close(tensors["q"], rope_by_hand(q, positions, 10000.0, pairing), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(tensors["k"], rope_by_hand(k, positions, 10000.0, pairing), rtol=1e-12, atol=1e-12)
    assert meta["pairing"] == pairing
    assert meta["dtype"] == "float64"


def test_explicit_positions_and_partial_rotation(client: TestClient, wire: Any, inline: Any) -> None:
    q = torch.randn(1, 1, 4, 12, generator=torch.Generator().manual_seed(3))
    positions = [0, 10, 100, 1000]
    request = {"method": "rope", "q": inline(q), "rotate": "query", "positions": positions, "rotary_dim": 8}
    response = client.post("/v1/rotary", json=request, headers={"Accept": "application/vnd.safetensors"})
    tensors, _ = wire.safetensors(response)
    assert set(tensors) == {"q"}
    expected = rope_by_hand(q[..., :8], torch.tensor(positions), 10000.0, "half")
    torch.testing.assert_close(tensors["q"][..., :8], expected.to(torch.float32), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tensors["q"][..., 8:], q[..., 8:], rtol=0, atol=0)  # passed through


def test_rotate_query_passes_k_through(client: TestClient, wire: Any, inline: Any) -> None:
    q = {"random": {"shape": [1, 2, 3, 4], "seed": 0}}
    k = torch.randn(1, 2, 9, 4, generator=torch.Generator().manual_seed(9))  # cross-attention: other length
    request = {"method": "rope", "q": q, "k": inline(k), "rotate": "query"}
    tensors, meta = wire.safetensors(
        client.post("/v1/rotary", json=request, headers={"Accept": "application/vnd.safetensors"})
    )
    torch.testing.assert_close(tensors["k"], k, rtol=0, atol=0)
    assert meta["rotate"] == "query"


def test_return_tables_are_half_the_rotary_dim(client: TestClient, wire: Any, inline: Any) -> None:
    request = {
        "method": "rope",
        "q": {"random": {"shape": [1, 1, 6, 10]}},
        "rotate": "query",
        "return_tables": True,
    }
    tensors, meta = wire.safetensors(
        client.post("/v1/rotary", json=request, headers={"Accept": "application/vnd.safetensors"})
    )
    assert tensors["cos"].shape == tensors["sin"].shape == (6, 5)
    assert meta["tables_dtype"] == "float32"
    angle = torch.arange(6, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, 10, 2) / 10)[None, :]
    torch.testing.assert_close(tensors["cos"], torch.cos(angle).float(), rtol=1e-6, atol=1e-6)


def test_bfloat16_q_is_rotated_in_float32_and_cast_last(client: TestClient, wire: Any, inline: Any) -> None:
    q = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    positions = [100_000, 100_001, 100_002, 100_003, 100_004]
    request = {"method": "rope", "q": inline(q), "rotate": "query", "positions": positions}
    response = client.post("/v1/rotary", json=request, headers={"Accept": "application/octet-stream"})
    assert response.headers["x-tensor-dtype"] == "bfloat16"
    got = wire.octet_stream(response)
    reference = rope_by_hand(q, torch.tensor(positions), 10000.0, "half")  # float64 from the same inputs
    torch.testing.assert_close(got.float(), reference.to(torch.bfloat16).float(), rtol=0, atol=2**-7)


def _case(spec: MethodSpec, params: dict[str, Any], inline: Any) -> tuple[dict[str, Any], torch.Tensor]:
    """A request for any rotary method, with 2- or 3-coordinate positions for the 2D and 3D ones."""
    probe = rotary_frequencies(spec, spec.parse_params(params), RotaryContext(rotary_dim=8, seq_len=6, num_heads=2))
    if probe.num_axes == 1:
        positions = torch.arange(6)
    elif probe.num_axes == 2:
        positions = torch.stack((torch.arange(6) // 3, torch.arange(6) % 3), dim=-1)  # (6, 2) on a 2x3 grid
    else:
        grid = torch.arange(6)
        positions = torch.stack((grid // 6, grid // 3, grid % 3), dim=-1)  # (6, 3) on a 1x2x3 grid
    return {"positions": positions.tolist() if probe.num_axes == 1 else inline(positions)}, positions


@pytest.mark.parametrize("spec", list_methods(Kind.ROTARY), ids=lambda spec: spec.name)
def test_every_rotary_method_matches_the_library(
    client: TestClient, wire: Any, inline: Any, example_params: Any, spec: MethodSpec
) -> None:
    raw_params = example_params(spec.name)
    extra, positions = _case(spec, raw_params, inline)
    q = torch.randn(1, 2, 6, 8, generator=torch.Generator().manual_seed(5))
    k = torch.randn(1, 2, 6, 8, generator=torch.Generator().manual_seed(6))
    request = {"method": spec.name, "params": raw_params, "q": inline(q), "k": inline(k)} | extra
    response = client.post("/v1/rotary", json=request, headers={"Accept": "application/vnd.safetensors"})
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)

    params = spec.parse_params(raw_params)
    seq_len = int(positions.max()) + 1
    freqs = rotary_frequencies(spec, params, RotaryContext(rotary_dim=8, seq_len=seq_len, num_heads=2))
    if isinstance(freqs, RotaryGenerators):  # block rotations expm(Σ p_a G_a) (RoPE-Mixed, LieRE, ComRoPE)
        rotations = block_rotations(freqs, positions, torch.float32)  # (Hg, N, m, b, b)
        torch.testing.assert_close(tensors["q"], apply_block_rotation(q, rotations), rtol=0, atol=0)
        torch.testing.assert_close(tensors["k"], apply_block_rotation(k, rotations), rtol=0, atol=0)
        assert meta["attention_scale"] == 1.0
        return
    cos, sin = rotary_tables(freqs, positions)
    scale = xpos_scale(freqs, positions, torch.float32)
    expected_q = apply_rotary(q, cos, sin, pairing="half", scale=scale)
    expected_k = apply_rotary(k, cos, sin, pairing="half", scale=None if scale is None else 1 / scale)
    torch.testing.assert_close(tensors["q"], expected_q, rtol=0, atol=0)
    torch.testing.assert_close(tensors["k"], expected_k, rtol=0, atol=0)
    assert meta["method"] == spec.name
    assert meta["attention_scale"] == freqs.attention_scale


@pytest.mark.parametrize("spec", list_methods(Kind.ROTARY), ids=lambda spec: spec.name)
def test_a_pairing_is_honoured_or_refused_and_the_answer_says_which_was_applied(
    client: TestClient, wire: Any, inline: Any, example_params: Any, spec: MethodSpec
) -> None:
    """Each pairing a method lists rotates differently from the other (half pairs (k, k + d/2), interleaved
    (2k, 2k + 1)) and is echoed; one it does not list is a 422 at body.pairing; none given is its own."""
    raw_params = example_params(spec.name)
    extra, _ = _case(spec, raw_params, inline)
    q = torch.randn(1, 2, 6, 8, generator=torch.Generator().manual_seed(5))
    base = {"method": spec.name, "params": raw_params, "q": inline(q), "rotate": "query"} | extra
    accept = {"Accept": "application/vnd.safetensors"}
    rotated = {}
    for pairing in ("half", "interleaved"):
        response = client.post("/v1/rotary", json=base | {"pairing": pairing}, headers=accept)
        if pairing not in spec.pairings:
            assert response.status_code == 422, response.text
            assert response.json()["errors"][0]["loc"] == ["body", "pairing"]
            continue
        assert response.status_code == 200, response.text
        tensors, meta = wire.safetensors(response)
        assert meta["pairing"] == pairing
        rotated[pairing] = tensors["q"]
    if len(rotated) == 2:
        assert not torch.equal(rotated["half"], rotated["interleaved"])
    response = client.post("/v1/rotary", json=base, headers=accept)
    assert response.status_code == 200, response.text
    tensors, meta = wire.safetensors(response)
    assert meta["pairing"] == spec.pairings[0]
    torch.testing.assert_close(tensors["q"], rotated[spec.pairings[0]], rtol=0, atol=0)


def test_the_catalogue_lists_each_rotary_method_s_pairings(client: TestClient) -> None:
    methods = {entry["name"]: entry for entry in client.get("/v1/methods").json()["data"]}
    assert methods["rope"]["pairings"] == ["half", "interleaved"]
    for name in ("rope_mixed", "liere", "comrope"):  # rotations of blocks of adjacent features
        assert methods[name]["pairings"] == ["interleaved"]
    assert methods["alibi"]["pairings"] == []


def test_xpos_scales_queries_up_and_keys_down(client: TestClient, wire: Any, inline: Any) -> None:
    ones = {"random": {"shape": [1, 1, 4, 8], "seed": 0}}
    request = {"method": "xpos", "q": ones, "k": ones, "positions": [0, 1, 2, 300]}
    tensors, _ = wire.safetensors(
        client.post("/v1/rotary", json=request, headers={"Accept": "application/vnd.safetensors"})
    )
    rope = wire.safetensors(
        client.post("/v1/rotary", json=request | {"method": "rope"}, headers={"Accept": "application/vnd.safetensors"})
    )[0]
    # rotation keeps pair norms, so the xPos scale shows in the per-token norm ratio against plain RoPE
    q_ratio = tensors["q"].norm(dim=-1) / rope["q"].norm(dim=-1)
    k_ratio = tensors["k"].norm(dim=-1) / rope["k"].norm(dim=-1)
    torch.testing.assert_close(q_ratio[..., 0], torch.ones(1, 1))
    assert bool((q_ratio[..., 3] < 1).all())  # ζ < 1: later queries shrink ...
    torch.testing.assert_close(k_ratio[..., 0], torch.ones(1, 1))
    assert bool((k_ratio[..., 3] > 1).all())  # ... and later keys grow by the reciprocal


def test_xpos_overflow_is_a_422_naming_scale_center(client: TestClient) -> None:
    request = {
        "method": "xpos",
        "q": {"random": {"shape": [1, 1, 4, 16], "seed": 0}},
        "k": {"random": {"shape": [1, 1, 4, 16], "seed": 1}},
        "offset": 60_000,
    }
    refused = client.post("/v1/rotary", json=request)
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert ["body", "params", "scale_center"] in [error["loc"] for error in refused.json()["errors"]]
    # float64 holds the raw-position decay at this distance
    request["q"] = {"random": {"shape": [1, 1, 4, 16], "seed": 0, "dtype": "float64"}}
    request["k"] = {"random": {"shape": [1, 1, 4, 16], "seed": 1, "dtype": "float64"}}
    assert client.post("/v1/rotary", json=request).status_code == 200


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_positions_past_float32_integers_are_exact(client: TestClient, wire: Any, inline: Any, pairing: str) -> None:
    """At offset 2^24 + 1 a float32 position would already be 2^24: the float32 answer must be the float64
    rotation of the true positions, rounded to float32 (a few ulps), not the rotation by cos(2^24 · ω)."""
    offset = 2**24 + 1
    q = torch.randn(1, 2, 3, 16, generator=torch.Generator().manual_seed(7))
    request = {"method": "rope", "q": inline(q), "rotate": "query", "pairing": pairing, "offset": offset}
    response = client.post("/v1/rotary", json=request, headers={"Accept": "application/vnd.safetensors"})
    assert response.status_code == 200, response.text
    got = wire.safetensors(response)[0]["q"]
    assert got.dtype == torch.float32
    exact = rope_by_hand(q, torch.arange(3) + offset, 10000.0, pairing)  # float64
    torch.testing.assert_close(got.to(torch.float64), exact, rtol=0, atol=4e-7)
    rounded_positions = rope_by_hand(q, torch.tensor([2.0**24, 2.0**24 + 2, 2.0**24 + 2]), 10000.0, pairing)
    assert float((rounded_positions - exact).abs().max()) > 1e-2, "the test must tell the two apart"


def test_positions_where_angles_cannot_be_exact_are_refused(client: TestClient, wire: Any, inline: Any) -> None:
    q = inline(torch.zeros(1, 1, 2, 8))
    too_far = {"method": "rope", "q": q, "rotate": "query", "offset": 2**26}
    problem = wire.problem(client.post("/v1/rotary", json=too_far), 422)
    assert wire.locs(problem) == [["body", "offset"]]
    assert "2^26" in problem["detail"]
    given = {"method": "rope", "q": q, "rotate": "query", "positions": [0, 2**26 + 1]}
    problem = wire.problem(client.post("/v1/rotary", json=given), 422)
    assert wire.locs(problem) == [["body", "positions"]]
    assert "2^26" in problem["detail"]


def test_xpos_scale_at_long_positions_is_the_float64_one_rounded(client: TestClient, wire: Any, inline: Any) -> None:
    """xPos at offset 2^24 + 1 (λ = 2^22 keeps ζ^(n/λ) in range): q is scaled by ζ^(n/λ) of the exact n."""
    offset, length, scale_base = 2**24 + 1, 3, 2.0**22
    q = torch.randn(1, 1, length, 8, generator=torch.Generator().manual_seed(8))
    request = {
        "method": "xpos",
        "params": {"scale_base": scale_base},
        "q": inline(q),
        "rotate": "query",
        "offset": offset,
        "return_tables": True,
    }
    response = client.post("/v1/rotary", json=request, headers={"Accept": "application/vnd.safetensors"})
    assert response.status_code == 200, response.text
    got = wire.safetensors(response)[0]["q"].to(torch.float64)
    positions = torch.arange(length, dtype=torch.float64) + offset
    d = 8
    zeta = (torch.arange(0, d, 2, dtype=torch.float64) + 0.4 * d) / (1.4 * d)  # (d/2,)
    scale = zeta[None, :] ** (positions[:, None] / scale_base)  # (N, d/2)
    expected = rope_by_hand(q, torch.arange(length) + offset, 10000.0, "half") * torch.cat((scale, scale), -1)
    torch.testing.assert_close(got, expected, rtol=2e-6, atol=1e-6)
