"""Learned vision rotations (RoPE-Mixed, LieRE, ComRoPE): float64 references written
here from the papers' formulas (complex phases for RoPE-Mixed; a dense block-diagonal exponent through
torch.linalg.matrix_exp for LieRE and ComRoPE, independent of the per-block path), goldens T21 and T22, the
relative property (exact for RoPE-Mixed, ComRoPE and commuting LieRE, not for general LieRE), orthogonality,
the seeded inits, gradients to the learned tensors, and the errors."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import RotaryContext, get_method, rotary_frequencies
from posenc.pe.kinds import apply_block_rotation, block_rotations
from posenc.pe.registry import MethodParams
from posenc.pe.rope_vision import LiereParams, liere_position_scale
from posenc.pe.types import RotaryGenerators
from posenc.schemas.methods import Kind

METHODS = ("rope_mixed", "liere", "comrope")
T21 = [[0.8253356149, -0.5646424734], [0.5646424734, 0.8253356149]]  # expm(2·[[0, −0.3], [0.3, 0]])


# ------------------------------------------------------------------------------------------------ helpers
def make_params(name: str, raw: dict[str, Any] | None = None, **tensors: torch.Tensor) -> MethodParams:
    params = get_method(name).parse_params(raw or {})
    return params.model_copy(update=tensors) if tensors else params


def context(dim: int, heads: int = 1, dtype: torch.dtype = torch.float64) -> RotaryContext:
    return RotaryContext(rotary_dim=dim, seq_len=16, dtype=dtype, num_heads=heads)


def gens(name: str, params: MethodParams, dim: int, heads: int = 1, dtype: torch.dtype = torch.float64) -> Any:
    result = rotary_frequencies(get_method(name), params, context(dim, heads, dtype))
    assert isinstance(result, RotaryGenerators)
    return result


def rotate(x: torch.Tensor, generators: RotaryGenerators, positions: torch.Tensor) -> torch.Tensor:
    """x (B, H, N, d) rotated by R(p_n) for positions (N, 2)."""
    return apply_block_rotation(x, block_rotations(generators, positions, x.dtype))


def scores(
    q: torch.Tensor, k: torch.Tensor, generators: RotaryGenerators, q_pos: torch.Tensor, k_pos: torch.Tensor
) -> torch.Tensor:
    return rotate(q, generators, q_pos) @ rotate(k, generators, k_pos).transpose(-1, -2)  # (B, H, Nq, Nk)


def grid_positions(rows: int, cols: int) -> torch.Tensor:
    """(row, col) of every token of a rows x cols grid in C order: (rows·cols, 2) int64."""
    t = torch.arange(rows * cols)
    return torch.stack((t // cols, t % cols), dim=-1)


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def block_diagonal(blocks: torch.Tensor) -> torch.Tensor:
    """(m, b, b) -> the dense (m·b, m·b) block-diagonal matrix."""
    count, size = blocks.shape[0], blocks.shape[-1]
    dense = torch.zeros(count * size, count * size, dtype=blocks.dtype)
    for j in range(count):
        dense[j * size : (j + 1) * size, j * size : (j + 1) * size] = blocks[j]
    return dense


def dense_reference(x: torch.Tensor, generators: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    """x (1, H, N, d) rotated by expm(Σ_a u_a G_a) of the dense block-diagonal G_a: generators (Hg, A, m, b, b)
    built by the test, coords u (N, A) float64."""
    heads, tokens = x.shape[1], x.shape[2]
    out = torch.empty_like(x)
    for h in range(heads):
        g = generators[h if generators.shape[0] > 1 else 0]  # (A, m, b, b)
        dense = [block_diagonal(g[a]) for a in range(g.shape[0])]  # A x (d, d)
        for n in range(tokens):
            exponent = sum(float(coords[n, a]) * dense[a] for a in range(len(dense)))
            assert isinstance(exponent, torch.Tensor)
            out[0, h, n] = torch.linalg.matrix_exp(exponent) @ x[0, h, n]
    return out


def skew_from_upper(raw: torch.Tensor) -> torch.Tensor:
    """G[i, j] = U[i, j] (i < j), −U[j, i] (i > j), 0 on the diagonal, by loops over the last two axes."""
    out = torch.zeros_like(raw)
    size = raw.shape[-1]
    for i in range(size):
        for j in range(i + 1, size):
            out[..., i, j] = raw[..., i, j]
            out[..., j, i] = -raw[..., i, j]
    return out


# The exactly relative configurations: (method, params).
RELATIVE = [
    ("rope_mixed", {}),
    ("rope_mixed", {"base": 100.0, "seed": 4}),
    ("liere", {"block_size": 2}),
    ("comrope", {}),
    ("comrope", {"block_size": 4, "seed": 2}),
    ("comrope", {"block_size": 4, "grid": [3, 4]}),
    ("comrope", {"variant": "ld"}),
    ("comrope", {"variant": "ld", "block_size": 4, "seed": 3}),
    ("comrope", {"variant": "ld", "block_size": 8, "grid": [5, 7]}),
]


# --------------------------------------------------------------------------------------------- registry
@pytest.mark.parametrize("name", METHODS)
def test_registered_as_learned_per_layer_2d_rotary(name: str) -> None:
    spec = get_method(name)
    assert spec.kind is Kind.ROTARY
    assert spec.axes == 2
    assert spec.learned
    assert spec.per_layer
    assert spec.learned_init is not None
    assert spec.family == "rope_vision"


# ------------------------------------------------------------------------------------------- RoPE-Mixed
def test_t22_rope_mixed_init_follows_the_reference_formula() -> None:
    dim, heads, seed = 64, 4, 3
    spec = get_method("rope_mixed")
    assert spec.learned_init is not None
    freqs = spec.learned_init(make_params("rope_mixed", {"seed": seed}), context(dim, heads))["freqs"]
    assert freqs.shape == (2, heads, dim // 2)
    assert freqs.dtype == torch.float32
    f_x, f_y = freqs.double()  # (H, d/2) each

    golden = torch.tensor([1, 0.8659643234, 0.7498942093, 0.6493816316], dtype=torch.float64)
    magnitude = torch.sqrt(f_x**2 + f_y**2)  # (H, d/2)
    for h in range(heads):
        torch.testing.assert_close(magnitude[h, :4], golden, rtol=0, atol=1e-6)  # direction α
        torch.testing.assert_close(magnitude[h, 16:20], golden, rtol=0, atol=1e-6)  # direction α + π/2

    alpha = torch.rand(heads, generator=torch.Generator().manual_seed(seed), dtype=torch.float32).double() * 2 * math.pi
    for h in range(heads):
        a = float(alpha[h])
        assert 0 <= a < 2 * math.pi
        for k in range(dim // 4):
            mag = 10.0 ** (-4 * k / dim)
            assert float(f_x[h, k]) == pytest.approx(mag * math.cos(a), abs=1e-6)
            assert float(f_y[h, k]) == pytest.approx(mag * math.sin(a), abs=1e-6)
            assert float(f_x[h, dim // 4 + k]) == pytest.approx(mag * math.cos(a + math.pi / 2), abs=1e-6)
            assert float(f_y[h, dim // 4 + k]) == pytest.approx(mag * math.sin(a + math.pi / 2), abs=1e-6)
    assert len({round(float(a), 6) for a in alpha}) == heads  # one angle per head


def test_rope_mixed_matches_the_complex_phase_formula() -> None:
    """Pair k = features (2k, 2k+1) as z = x_2k + i·x_2k+1, turned by φ = col·f_x[h, k] + row·f_y[h, k]."""
    dim, heads = 16, 3
    freqs = randn(2, heads, dim // 2, seed=1)  # (2, H, d/2): f_x, f_y
    positions = grid_positions(3, 4)
    x = randn(1, heads, 12, dim, seed=2)
    got = rotate(x, gens("rope_mixed", make_params("rope_mixed", freqs=freqs), dim, heads), positions)

    row, col = positions[:, 0].double(), positions[:, 1].double()  # (N,) each
    phase = col[None, :, None] * freqs[0][:, None, :] + row[None, :, None] * freqs[1][:, None, :]  # (H, N, d/2)
    z = torch.complex(x[0, ..., 0::2], x[0, ..., 1::2]) * torch.polar(torch.ones_like(phase), phase)  # (H, N, d/2)
    expected = torch.stack((z.real, z.imag), dim=-1).reshape(heads, 12, dim)  # (H, N, d): interleaved back
    torch.testing.assert_close(got[0], expected, rtol=0, atol=1e-12)


def test_rope_mixed_generators_are_2x2_rotation_blocks_per_axis() -> None:
    freqs = randn(2, 2, 4, seed=5)
    generators = gens("rope_mixed", make_params("rope_mixed", freqs=freqs), 8, 2).generators  # (H, 2, 4, 2, 2)
    assert generators.shape == (2, 2, 4, 2, 2)
    torch.testing.assert_close(generators[:, 0, :, 1, 0], freqs[1])  # axis 0 = row = y
    torch.testing.assert_close(generators[:, 1, :, 1, 0], freqs[0])  # axis 1 = column = x
    torch.testing.assert_close(generators[..., 0, 1], -generators[..., 1, 0])
    assert bool((generators[..., 0, 0] == 0).all())
    assert bool((generators[..., 1, 1] == 0).all())


# ---------------------------------------------------------------------------------------------- relative
@pytest.mark.parametrize(("name", "raw"), RELATIVE)
@pytest.mark.parametrize("shift", [(2, 5), (0, 3), (7, 0)])
def test_scores_depend_only_on_the_2d_offset(name: str, raw: dict[str, Any], shift: tuple[int, int]) -> None:
    dim, heads = 16, 2
    generators = gens(name, make_params(name, raw), dim, heads)
    q, k = randn(1, heads, 6, dim, seed=7), randn(1, heads, 5, dim, seed=8)
    gen = torch.Generator().manual_seed(9)
    q_pos = torch.randint(0, 6, (6, 2), generator=gen)
    k_pos = torch.randint(0, 6, (5, 2), generator=gen)
    moved = torch.tensor(shift)
    before = scores(q, k, generators, q_pos, k_pos)
    after = scores(q, k, generators, q_pos + moved, k_pos + moved)
    torch.testing.assert_close(after, before, rtol=0, atol=1e-11)


def test_liere_with_random_non_commuting_generators_is_not_relative() -> None:
    dim, block = 16, 8
    generators = gens("liere", make_params("liere", {"block_size": block, "seed": 1}), dim)
    assert not generators.commuting
    q, k = randn(1, 1, 6, dim, seed=3), randn(1, 1, 6, dim, seed=4)
    positions = grid_positions(2, 3)
    before = scores(q, k, generators, positions, positions)
    after = scores(q, k, generators, positions + torch.tensor([3, 2]), positions + torch.tensor([3, 2]))
    assert float((after - before).abs().max()) > 1e-2


def test_liere_with_commuting_generators_is_relative() -> None:
    """Each axis a multiple of one skew matrix: the generators commute, so R(p)ᵀR(p') = R(p' − p)."""
    dim, block = 16, 8
    base = randn(1, 1, 2, block, block, seed=5)  # (1, 1, m, b, b)
    raw = torch.cat((base, -0.7 * base), dim=1)  # (1, 2, m, b, b): axis 1 = −0.7·axis 0
    generators = gens("liere", make_params("liere", {"block_size": block}, generators=raw), dim)
    q, k = randn(1, 1, 6, dim, seed=6), randn(1, 1, 6, dim, seed=7)
    positions = grid_positions(2, 3)
    moved = positions + torch.tensor([4, 1])
    torch.testing.assert_close(
        scores(q, k, generators, moved, moved), scores(q, k, generators, positions, positions), rtol=0, atol=1e-10
    )


def test_comrope_transposed_rotations_compose_to_the_offset() -> None:
    """R(p)ᵀ R(p') = R(p' − p) for ComRoPE-LD with 4x4 blocks (matrix_exp path), without a grid."""
    generators = gens("comrope", make_params("comrope", {"variant": "ld", "block_size": 4, "seed": 6}), 8, 2)
    p, p_prime = torch.tensor([[1, 4], [3, 2]]), torch.tensor([[5, 0], [2, 7]])
    r_p, r_q = block_rotations(generators, p, torch.float64), block_rotations(generators, p_prime, torch.float64)
    r_offset = block_rotations(generators, p_prime - p, torch.float64)
    torch.testing.assert_close(r_p.transpose(-1, -2) @ r_q, r_offset, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------- LieRE
def test_t21_liere_2x2_generator_is_the_rotation_by_its_angle() -> None:
    """U[0, 1] = −0.3 gives G = [[0, −0.3], [0.3, 0]]; at u = 2 on that axis: the rotation by 0.6 (T21)."""
    raw = torch.zeros(1, 2, 1, 2, 2, dtype=torch.float64)  # (Hg, A, m, b, b), d = 2
    raw[0, 0, 0, 0, 1] = -0.3
    generators = gens("liere", make_params("liere", {"block_size": 2}, generators=raw), 2)
    rotation = block_rotations(generators, torch.tensor([[2, 5]]), torch.float64)[0, 0, 0]  # (2, 2)
    torch.testing.assert_close(rotation, torch.tensor(T21, dtype=torch.float64), rtol=0, atol=1e-10)

    raw[0, 0, 0, 0, 1] = 0.3  # the reference orientation (§7b): a positive raw u turns by −u·p
    generators = gens("liere", make_params("liere", {"block_size": 2}, generators=raw), 2)
    rotation = block_rotations(generators, torch.tensor([[2, 5]]), torch.float64)[0, 0, 0]
    torch.testing.assert_close(rotation, torch.tensor(T21, dtype=torch.float64).T, rtol=0, atol=1e-10)


def test_t21_through_the_matrix_exponential() -> None:
    """The same 2x2 generator inside a 4x4 block: top-left is T21, the rest the identity."""
    raw = torch.zeros(1, 2, 1, 4, 4, dtype=torch.float64)
    raw[0, 1, 0, 0, 1] = -0.3  # axis 1 (column)
    generators = gens("liere", make_params("liere", {"block_size": 4}, generators=raw), 4)
    rotation = block_rotations(generators, torch.tensor([[9, 2]]), torch.float64)[0, 0, 0]  # (4, 4)
    expected = torch.eye(4, dtype=torch.float64)
    expected[:2, :2] = torch.tensor(T21, dtype=torch.float64)
    torch.testing.assert_close(rotation, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("per_head", [False, True])
def test_liere_matches_the_dense_exponential(per_head: bool) -> None:
    dim, block, heads = 12, 4, 2
    train, current = (5, 9), (10, 18)
    raw = randn(heads if per_head else 1, 2, dim // block, block, block, seed=11) * 0.5
    params = make_params(
        "liere", {"block_size": block, "per_head": per_head, "train_grid": train, "grid": current}, generators=raw
    )
    positions = grid_positions(3, 4) * torch.tensor([3, 4])  # spread over the grid
    x = randn(1, heads, 12, dim, seed=12)
    got = rotate(x, gens("liere", params, dim, heads), positions)

    # linspace(0, s/n, s) per axis: step (s/n)/(s − 1)
    coords = torch.stack(
        [positions[:, a].double() * (current[a] / train[a]) / (current[a] - 1) for a in range(2)], dim=-1
    )  # (N, 2)
    expected = dense_reference(x, skew_from_upper(raw), coords)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_liere_position_scale() -> None:
    assert liere_position_scale(LiereParams()) == (1.0, 1.0)
    # at the training resolution, linspace(0, 1, n): u = p/(n − 1)
    assert liere_position_scale(LiereParams(train_grid=(5, 9))) == pytest.approx((1 / 4, 1 / 8))
    assert liere_position_scale(LiereParams(train_grid=(5, 9), grid=(1, 18))) == pytest.approx((0.0, 18 / (9 * 17)))
    generators = gens("liere", make_params("liere", {"block_size": 2, "train_grid": [5, 9]}), 4)
    torch.testing.assert_close(generators.position_scale, torch.tensor([0.25, 0.125], dtype=torch.float64))
    assert torch.equal(generators.position_offset, torch.zeros(2, dtype=torch.float64))


def test_liere_shared_and_per_head_generators() -> None:
    shared = gens("liere", make_params("liere", {"block_size": 4}), 8, 3).generators
    per_head = gens("liere", make_params("liere", {"block_size": 4, "per_head": True}), 8, 3).generators
    assert shared.shape == (1, 2, 2, 4, 4)
    assert per_head.shape == (3, 2, 2, 4, 4)
    assert not torch.equal(per_head[0], per_head[1])
    torch.testing.assert_close(per_head, -per_head.transpose(-1, -2), rtol=0, atol=0)


# -------------------------------------------------------------------------------------------- ComRoPE
@pytest.mark.parametrize("variant", ["ap", "ld"])
@pytest.mark.parametrize("grid", [None, (3, 5)])
def test_comrope_matches_the_dense_exponential(variant: str, grid: tuple[int, int] | None) -> None:
    dim, block, heads = 16, 4, 2
    blocks = dim // block
    raw_p = randn(heads, blocks, block, block, seed=21)  # P (H, m, b, b)
    tensors = {"blocks": raw_p}
    if variant == "ld":
        tensors["multiplier"] = randn(2, blocks, seed=22)
    raw: dict[str, Any] = {"variant": variant, "block_size": block, "grid": grid}
    params = make_params("comrope", raw, **tensors)
    positions = grid_positions(3, 5)
    x = randn(1, heads, 15, dim, seed=23)
    got = rotate(x, gens("comrope", params, dim, heads), positions)

    expected_gens = torch.zeros(heads, 2, blocks, block, block, dtype=torch.float64)
    for h in range(heads):
        for a in range(2):
            for j in range(blocks):
                skew = raw_p[h, j] - raw_p[h, j].T
                if variant == "ap":
                    expected_gens[h, a, j] = skew if j % 2 == a else 0
                else:
                    expected_gens[h, a, j] = tensors["multiplier"][a, j] * skew
    if grid is None:
        coords = positions.double()
    else:
        coords = (positions.double() + 0.5) / torch.tensor(grid, dtype=torch.float64)  # (N, 2)
    torch.testing.assert_close(got, dense_reference(x, expected_gens, coords), rtol=0, atol=1e-12)


def test_comrope_position_scale() -> None:
    generators = gens("comrope", make_params("comrope", {"grid": [4, 8]}), 8)
    torch.testing.assert_close(generators.position_scale, torch.tensor([0.25, 0.125], dtype=torch.float64))
    torch.testing.assert_close(generators.position_offset, torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert generators.commuting
    plain = gens("comrope", make_params("comrope"), 8)
    assert torch.equal(plain.position_scale, torch.ones(2, dtype=torch.float64))
    assert torch.equal(plain.position_offset, torch.zeros(2, dtype=torch.float64))


def test_comrope_init() -> None:
    spec = get_method("comrope")
    assert spec.learned_init is not None
    ap = spec.learned_init(make_params("comrope", {"block_size": 4, "init_std": 0.5, "seed": 3}), context(16, 2))
    assert set(ap) == {"blocks"}
    expected = torch.randn(2, 4, 4, 4, generator=torch.Generator().manual_seed(3)) * 0.5
    torch.testing.assert_close(ap["blocks"], expected, rtol=0, atol=0)
    ld = spec.learned_init(make_params("comrope", {"variant": "ld", "seed": 3}), context(16, 2))
    assert ld["blocks"].shape == (2, 8, 2, 2)
    assert ld["multiplier"].shape == (2, 8)
    assert ld["blocks"].dtype == ld["multiplier"].dtype == torch.float32


# ------------------------------------------------------------------------------------------ all methods
@pytest.mark.parametrize(
    ("name", "raw"),
    [*RELATIVE, ("liere", {"block_size": 4}), ("liere", {"block_size": 8, "per_head": True, "train_grid": [4, 4]})],
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_rotations_are_orthogonal(name: str, raw: dict[str, Any], dtype: torch.dtype) -> None:
    dim, heads = 16, 2
    generators = gens(name, make_params(name, raw), dim, heads, dtype)
    positions = grid_positions(4, 5)
    rotations = block_rotations(generators, positions, dtype)  # (Hg, N, m, b, b)
    eye = torch.eye(rotations.shape[-1], dtype=dtype).expand_as(rotations)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(rotations @ rotations.transpose(-1, -2), eye, rtol=0, atol=tol)
    x = randn(1, heads, 20, dim, seed=31, dtype=dtype)
    torch.testing.assert_close(rotate(x, generators, positions).norm(dim=-1), x.norm(dim=-1), rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("rope_mixed", {"seed": 2}),
        ("liere", {"block_size": 4, "per_head": True, "seed": 2}),
        ("comrope", {"seed": 2}),
        ("comrope", {"variant": "ld", "block_size": 4, "seed": 2}),
    ],
)
def test_seeded_tensors_are_the_learned_init(name: str, raw: dict[str, Any]) -> None:
    dim, heads = 16, 3
    spec = get_method(name)
    assert spec.learned_init is not None
    params = make_params(name, raw)
    init = spec.learned_init(params, context(dim, heads))
    again = spec.learned_init(params, context(dim, heads))
    assert all(torch.equal(init[n], again[n]) for n in init)
    other = spec.learned_init(make_params(name, {**raw, "seed": 3}), context(dim, heads))
    assert not any(torch.equal(init[n], other[n]) for n in init)

    seeded = gens(name, params, dim, heads).generators
    supplied = gens(name, make_params(name, raw, **{n: t.double() for n, t in init.items()}), dim, heads).generators
    torch.testing.assert_close(seeded, supplied, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("rope_mixed", {}),
        ("liere", {"block_size": 4, "train_grid": [4, 4]}),
        ("comrope", {"block_size": 4, "grid": [4, 4]}),
        ("comrope", {"variant": "ld"}),
    ],
)
def test_gradients_reach_the_learned_tensors(name: str, raw: dict[str, Any]) -> None:
    dim, heads = 8, 2
    spec = get_method(name)
    assert spec.learned_init is not None
    params0 = make_params(name, raw)
    learned = {n: torch.nn.Parameter(t) for n, t in spec.learned_init(params0, context(dim, heads)).items()}
    generators = gens(name, params0.model_copy(update=learned), dim, heads, torch.float32)
    q, k = (
        randn(1, heads, 12, dim, seed=41, dtype=torch.float32),
        randn(1, heads, 12, dim, seed=42, dtype=torch.float32),
    )
    positions = grid_positions(3, 4)
    torch.autograd.backward(scores(q, k, generators, positions, positions).square().sum())
    for n, tensor in learned.items():
        assert tensor.grad is not None, n
        assert bool(tensor.grad.abs().sum() > 0), n
    if name == "liere":
        grad = learned["generators"].grad
        assert grad is not None
        upper = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
        assert bool((grad[..., ~upper] == 0).all())  # only the strict upper triangle is a parameter
        assert bool((grad[..., upper] != 0).any())


# --------------------------------------------------------------------------------------------------- errors
def test_rope_mixed_rotary_dim_not_divisible_by_four() -> None:
    with pytest.raises(InvalidInput) as caught:
        gens("rope_mixed", make_params("rope_mixed"), 18)
    assert caught.value.loc == ("rotary_dim",)
    spec = get_method("rope_mixed")
    assert spec.learned_init is not None
    with pytest.raises(InvalidInput) as caught:
        spec.learned_init(make_params("rope_mixed"), context(10))
    assert caught.value.loc == ("rotary_dim",)


@pytest.mark.parametrize(
    ("name", "raw", "field", "shape", "heads"),
    [
        ("rope_mixed", {}, "freqs", (2, 2, 4), 3),
        ("rope_mixed", {}, "freqs", (2, 3, 8), 3),
        ("liere", {"block_size": 4, "per_head": True}, "generators", (1, 2, 2, 4, 4), 3),
        ("liere", {"block_size": 4}, "generators", (1, 2, 2, 2, 2), 3),
        ("comrope", {}, "blocks", (1, 4, 2, 2), 3),
        ("comrope", {"variant": "ld"}, "multiplier", (3, 4), 3),
    ],
)
def test_wrong_tensor_shapes(name: str, raw: dict[str, Any], field: str, shape: tuple[int, ...], heads: int) -> None:
    with pytest.raises(InvalidInput) as caught:
        gens(name, make_params(name, raw, **{field: torch.zeros(shape)}), 8, heads)
    assert caught.value.loc == ("params", field, "shape")


@pytest.mark.parametrize(
    ("name", "raw", "dim", "loc"),
    [
        ("liere", {}, 32, ("params", "block_size")),  # default 64 > 32
        ("liere", {"block_size": 6}, 16, ("params", "block_size")),
        ("comrope", {"block_size": 4}, 18, ("params", "block_size")),
        ("comrope", {"block_size": 4}, 12, ("rotary_dim",)),  # AP: 12 blocks of 4 do not split over 2 axes
        ("comrope", {}, 6, ("rotary_dim",)),
    ],
)
def test_block_size_that_does_not_fit(name: str, raw: dict[str, Any], dim: int, loc: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput) as caught:
        gens(name, make_params(name, raw), dim)
    assert caught.value.loc == loc


def test_comrope_ld_needs_only_the_block_size_to_divide() -> None:
    assert gens("comrope", make_params("comrope", {"variant": "ld", "block_size": 4}), 12).generators.shape == (
        1,
        2,
        3,
        4,
        4,
    )


@pytest.mark.parametrize(
    ("name", "raw", "loc"),
    [
        ("liere", {"block_size": 1}, ("block_size",)),
        ("liere", {"block_size": 512}, ("block_size",)),
        ("liere", {"grid": [4, 4]}, ("grid",)),
        ("liere", {"train_grid": [4, 0]}, ("train_grid", 1)),
        ("liere", {"train_grid": [4, 4, 4]}, ("train_grid",)),
        ("rope_mixed", {"base": 1.0}, ("base",)),
        ("comrope", {"variant": "xy"}, ("variant",)),
        ("comrope", {"init_std": 0}, ("init_std",)),
        ("comrope", {"multiplier": {"dtype": "float32", "shape": [2, 4], "data": [0.0] * 8}}, ("multiplier",)),
    ],
)
def test_invalid_params_are_refused_by_the_schema(name: str, raw: dict[str, Any], loc: tuple[Any, ...]) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        get_method(name).parse_params(raw)
    assert caught.value.errors()[0]["loc"] == loc


def test_comrope_multiplier_on_ap_is_invalid_input() -> None:
    params = make_params("comrope", multiplier=torch.zeros(2, 4))  # model_copy skips the field validator
    with pytest.raises(InvalidInput) as caught:
        gens("comrope", params, 8)
    assert caught.value.loc == ("params", "multiplier")


def test_oversized_seeded_tensors_are_refused_before_drawing() -> None:
    params = make_params("liere", {"block_size": 256, "per_head": True})
    with pytest.raises(InvalidInput) as caught:
        gens("liere", params, 256, 1024)
    assert caught.value.loc == ("params", "generators")
