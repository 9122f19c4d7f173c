"""TAPE (Zhu et al. 2025): layer 0 is RoPE, a float64 loop reference of one layer (attention, A·E update with
both ρ readings, feed-forward update), the per-frequency rotation equivariance, the code's init, errors, and
the full model (gradients, causality, a fresh model equal to the RoPE model)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import posenc.pe.tape
from posenc.errors import InvalidInput
from posenc.pe import get_method
from posenc.pe.appliers import Layer, build_applier, future_mask
from posenc.pe.tape import TapeParams, TapeState, tape_learned_init, tape_state_ffn
from posenc.pe.types import LayerInputs, ScoreContext
from posenc.schemas.methods import Kind
from posenc.training.model import Block, ModelConfig, PositionalEncoding, TinyTransformer

SPEC = get_method("tape")
B, H, D, WIDTH, P = 2, 3, 8, 5, 4  # batch, heads, head dim, model width, position_size


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


def context(q_len: int, k_len: int, dtype: torch.dtype = torch.float64) -> ScoreContext:
    return ScoreContext(
        num_heads=H,
        query_length=q_len,
        key_length=k_len,
        head_dim=D,
        causal=True,
        model_dim=WIDTH,
        dtype=dtype,
        query_offset=k_len - q_len,
    )


def inputs(q: torch.Tensor, k: torch.Tensor, state: Any = None) -> LayerInputs:
    q_len, k_len = q.shape[2], k.shape[2]
    q_pos, k_pos = torch.arange(q_len) + k_len - q_len, torch.arange(k_len)
    return LayerInputs(q=q, k=k, q_pos=q_pos, k_pos=k_pos, mask=future_mask(q_pos, k_pos), state=state)


def weights(seed: int, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """Non-zero learned tensors (the code's init has rho = w_up = 0, which would hide both updates)."""
    return {
        "rho": randn(H, H, seed=seed) * scale,
        "w_x": randn(WIDTH, P, seed=seed + 1) * scale,
        "w_up": randn(P, H, seed=seed + 2) * scale,
        "w_down": randn(H, P, seed=seed + 3) * scale,
    }


def params(tensors: dict[str, torch.Tensor] | None = None, **raw: Any) -> TapeParams:
    model = TapeParams(position_size=P, **raw)
    return model.model_copy(update=tensors or {})


def tape_layer(dtype: torch.dtype = torch.float64) -> Layer:
    return Layer(num_heads=H, head_dim=D, causal=True, model_dim=WIDTH, dtype=dtype)


def rope_logits(q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """scale·q·kᵀ after the registered RoPE's rotation at half pairing (the applier's ``rotate``)."""
    spec = get_method("rope")
    layer = Layer(num_heads=H, head_dim=D, causal=True, pairing="half", dtype=q.dtype)
    q_rot, k_rot = build_applier(spec, spec.parse_params({}), layer).rotate(q, k, q_pos, k_pos)
    return q_rot @ k_rot.transpose(-1, -2) / math.sqrt(D)


# ------------------------------------------------------------------------------------------ registry
def test_registry_entry() -> None:
    assert SPEC.kind is Kind.SCORE_MOD
    assert SPEC.learned
    assert SPEC.per_layer
    assert SPEC.causal_only
    assert SPEC.needs == frozenset()
    assert SPEC.state_init is not None
    assert SPEC.state_ffn is not None
    assert SPEC.info().model_coupled
    assert "VITA-Group/TAPE" in (posenc.pe.tape.__doc__ or "")
    assert {"rho_mode", "init", "decode", "ffn_update"} <= set(SPEC.conventions)


def test_learned_init_is_the_codes() -> None:
    """rho = 0 and w_up = 0 (the code's special zero init), w_x and w_down N(0, 0.02), seeded."""
    ctx = context(4, 4)
    first = tape_learned_init(params(), ctx)
    assert {name: tuple(t.shape) for name, t in first.items()} == {
        "rho": (H, H),
        "w_x": (WIDTH, P),
        "w_up": (P, H),
        "w_down": (H, P),
    }
    assert bool((first["rho"] == 0).all())
    assert bool((first["w_up"] == 0).all())
    assert 0.0 < float(first["w_x"].std()) < 0.05
    assert 0.0 < float(first["w_down"].std()) < 0.05
    again, other = tape_learned_init(params(), ctx), tape_learned_init(params(seed=1), ctx)
    assert torch.equal(first["w_x"], again["w_x"])
    assert not torch.equal(first["w_x"], other["w_x"])
    big = tape_learned_init(TapeParams(), ScoreContext(12, 8, 8, 64, True, 768))["w_x"]  # config/adape.json
    assert tuple(big.shape) == (768, 48)
    assert float(big.std()) == pytest.approx(0.02, rel=0.05)


# ------------------------------------------------------------------------------------- layer 0 is RoPE
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_first_layer_equals_rope(dtype: torch.dtype, tol: float) -> None:
    """Without a state, and with state_init's, the logits are RoPE's (half pairing); also for a decode step."""
    n = 7
    q, k = randn(B, H, n, D, seed=1, dtype=dtype), randn(B, H, n, D, seed=2, dtype=dtype)
    pos = torch.arange(n)
    expected = rope_logits(q, k, pos, pos)
    model = params(weights(3))  # the weights do not enter the logits
    no_state = SPEC.fn(model, inputs(q, k), context(n, n, dtype)).logits
    assert SPEC.state_init is not None
    initial = SPEC.state_init(model, context(n, n, dtype), B, n)
    assert isinstance(initial, TapeState)
    assert tuple(initial.cos.shape) == (B, H, n, D)
    with_state = SPEC.fn(model, inputs(q, k, initial), context(n, n, dtype)).logits
    torch.testing.assert_close(no_state, expected, rtol=0, atol=tol)
    torch.testing.assert_close(with_state, expected, rtol=0, atol=tol)
    # the last 2 queries over all keys (Nq < Nk): state rows of the queries are the last Nq
    decode = SPEC.fn(model, inputs(q[:, :, -2:], k, initial), context(2, n, dtype)).logits
    torch.testing.assert_close(decode, expected[:, :, -2:], rtol=0, atol=tol)
    # and the logits are not position-blind: they differ from the plain scaled dot product
    assert (no_state - q @ k.transpose(-1, -2) / math.sqrt(D)).abs().max() > 0.1


def test_state_init_values() -> None:
    """C[b, h, n, k] = cos(n·10000^(−2(k mod d/2)/d)), S likewise, for every head and batch row."""
    assert SPEC.state_init is not None
    state = SPEC.state_init(params(), context(6, 6), B, 6)
    for n in range(6):
        for f in range(D):
            angle = n * 10000.0 ** (-2 * (f % (D // 2)) / D)
            assert bool((state.cos[:, :, n, f] == state.cos[0, 0, n, f]).all())
            assert state.cos[1, 2, n, f].item() == pytest.approx(math.cos(angle), abs=1e-15)
            assert state.sin[1, 2, n, f].item() == pytest.approx(math.sin(angle), abs=1e-15)


# ---------------------------------------------------------------------------------- float64 reference
def silu(z: float) -> float:
    return z / (1.0 + math.exp(-z))


def reference_layer(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    x: torch.Tensor,
    w: dict[str, torch.Tensor],
    rho_mode: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Loops: logits, then E_q + ρ(A·E), then + W_down(SiLU(x W_x) ⊙ W_up E); queries the last Nq keys.

    Returns (logits (B, H, Nq, Nk) with NaN above the causal diagonal, C, S after the attention update, the
    pair (C, S) after the feed-forward update stacked as (2, B, H, Nq, d)).
    """
    batch, heads, q_len, dim = q.shape
    k_len, half = k.shape[2], dim // 2
    offset = k_len - q_len

    def rotated(t: torch.Tensor, b: int, h: int, n: int, row: int) -> list[float]:
        out = []
        for f in range(dim):
            partner = -t[b, h, n, f + half].item() if f < half else t[b, h, n, f - half].item()
            out.append(t[b, h, n, f].item() * cos[b, h, row, f].item() + partner * sin[b, h, row, f].item())
        return out

    logits = torch.full((batch, heads, q_len, k_len), float("nan"), dtype=torch.float64)
    attn = torch.zeros(batch, heads, q_len, k_len, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                qi = rotated(q, b, h, i, i + offset)
                row = []
                for j in range(i + offset + 1):
                    kj = rotated(k, b, h, j, j)
                    row.append(sum(a * c for a, c in zip(qi, kj, strict=True)) / math.sqrt(dim))
                    logits[b, h, i, j] = row[-1]
                top = max(row)
                total = sum(math.exp(s - top) for s in row)
                for j, s in enumerate(row):
                    attn[b, h, i, j] = math.exp(s - top) / total
    after_attn = []
    for e in (cos, sin):
        mixed = torch.zeros(batch, heads, q_len, dim, dtype=torch.float64)  # A·E
        for b in range(batch):
            for h in range(heads):
                for i in range(q_len):
                    for f in range(dim):
                        mixed[b, h, i, f] = sum(attn[b, h, i, j] * e[b, h, j, f] for j in range(k_len))
        new = e[:, :, offset:].clone()
        for b in range(batch):
            for h in range(heads):
                for i in range(q_len):
                    for f in range(dim):
                        if rho_mode == "code":
                            term = sum(w["rho"][h, g].item() for g in range(heads)) * mixed[b, h, i, f].item()
                        else:
                            term = sum(w["rho"][h, g].item() * mixed[b, g, i, f].item() for g in range(heads))
                        new[b, h, i, f] += term
        after_attn.append(new)
    size = w["w_up"].shape[0]
    gate = [
        [[silu(sum(x[b, n, m].item() * w["w_x"][m, p].item() for m in range(x.shape[-1]))) for p in range(size)]]
        for b in range(batch)
        for n in range(q_len)
    ]
    after_ffn = torch.zeros(2, batch, heads, q_len, dim, dtype=torch.float64)
    for idx, e in enumerate(after_attn):
        for b in range(batch):
            for n in range(q_len):
                g_bn = gate[b * q_len + n][0]
                for h in range(heads):
                    for f in range(dim):
                        total = e[b, h, n, f].item()
                        for p in range(size):
                            up = sum(w["w_up"][p, g].item() * e[b, g, n, f].item() for g in range(heads))
                            total += w["w_down"][h, p].item() * g_bn[p] * up
                        after_ffn[idx, b, h, n, f] = total
    return logits, after_attn[0], after_attn[1], after_ffn


@pytest.mark.parametrize("rho_mode", ["code", "mix"])
@pytest.mark.parametrize("q_len", [5, 2])
def test_one_layer_matches_the_loop_reference(rho_mode: str, q_len: int) -> None:
    """Through the applier (mask, softmax, next_state) and update_state, on a random non-RoPE state."""
    k_len = 5
    q, k = randn(B, H, q_len, D, seed=10), randn(B, H, k_len, D, seed=11)
    v = randn(B, H, k_len, D, seed=12)
    x = randn(B, q_len, WIDTH, seed=13)
    state = TapeState(randn(B, H, k_len, D, seed=14), randn(B, H, k_len, D, seed=15))
    w = weights(20)
    applier = build_applier(SPEC, params(w, rho_mode=rho_mode), tape_layer())
    q_pos, k_pos = torch.arange(q_len) + k_len - q_len, torch.arange(k_len)
    attended = applier.attend(q, k, v, q_pos=q_pos, k_pos=k_pos, mask=future_mask(q_pos, k_pos), state=state)
    after_ffn = applier.update_state(x, attended.state)
    ref_logits, ref_cos, ref_sin, ref_ffn = reference_layer(q, k, state.cos, state.sin, x, w, rho_mode)

    terms = SPEC.fn(applier.params, inputs(q, k, state), context(q_len, k_len))
    keep = ~torch.isnan(ref_logits)
    torch.testing.assert_close(terms.logits[keep], ref_logits[keep], rtol=0, atol=1e-12)
    assert isinstance(attended.state, TapeState)
    assert tuple(attended.state.cos.shape) == (B, H, q_len, D)
    torch.testing.assert_close(attended.state.cos, ref_cos, rtol=0, atol=1e-10)
    torch.testing.assert_close(attended.state.sin, ref_sin, rtol=0, atol=1e-10)
    torch.testing.assert_close(after_ffn.cos, ref_ffn[0], rtol=0, atol=1e-10)
    torch.testing.assert_close(after_ffn.sin, ref_ffn[1], rtol=0, atol=1e-10)


def test_code_mode_is_mix_with_the_row_sums_on_the_diagonal() -> None:
    """The code's einsum 'bqnd,qe->bqnd' is ρ' = diag(Σ_e ρ[h, e]) in the mixing reading, and differs from ρ."""
    n = 4
    q, k = randn(1, H, n, D, seed=30), randn(1, H, n, D, seed=31)
    state = TapeState(randn(1, H, n, D, seed=32), randn(1, H, n, D, seed=33))
    rho = randn(H, H, seed=34)
    attn = torch.softmax(randn(1, H, n, n, seed=35), dim=-1)

    def next_cos(mode: str, matrix: torch.Tensor) -> torch.Tensor:
        terms = SPEC.fn(params({"rho": matrix}, rho_mode=mode), inputs(q, k, state), context(n, n))
        assert terms.next_state is not None
        state_out: TapeState = terms.next_state(attn)
        return state_out.cos

    diagonal = torch.diag(rho.sum(dim=1))
    torch.testing.assert_close(next_cos("code", rho), next_cos("mix", diagonal), rtol=0, atol=1e-13)
    assert (next_cos("code", rho) - next_cos("mix", rho)).abs().max() > 1e-3


# ------------------------------------------------------------------------------------------ equivariance
def rotate_state(state: TapeState, theta: torch.Tensor) -> TapeState:
    """(C, S) -> (C cos θ − S sin θ, C sin θ + S cos θ) per feature, θ (d,) broadcast over (B, H, N)."""
    c, s = torch.cos(theta), torch.sin(theta)
    return TapeState(state.cos * c - state.sin * s, state.cos * s + state.sin * c)


def test_rotating_every_frequency_pair_is_a_symmetry() -> None:
    """For a state with C[..., k] = C[..., k + d/2] (what state_init gives and both updates keep), rotating each
    frequency's (C, S) by a fixed angle θ_k leaves the logits unchanged and commutes with both updates."""
    n = 6
    q, k = randn(B, H, n, D, seed=40), randn(B, H, n, D, seed=41)
    x = randn(B, n, WIDTH, seed=42)
    half_c, half_s = randn(B, H, n, D // 2, seed=43), randn(B, H, n, D // 2, seed=44)
    state = TapeState(torch.cat((half_c, half_c), -1), torch.cat((half_s, half_s), -1))
    theta_half = randn(D // 2, seed=45) * 3.0
    theta = torch.cat((theta_half, theta_half))  # (d,): one angle per frequency pair
    model = params(weights(46))
    attn = torch.softmax(
        randn(B, H, n, n, seed=47).masked_fill(future_mask(torch.arange(n), torch.arange(n)), -1e9), -1
    )

    terms = SPEC.fn(model, inputs(q, k, state), context(n, n))
    turned = SPEC.fn(model, inputs(q, k, rotate_state(state, theta)), context(n, n))
    torch.testing.assert_close(turned.logits, terms.logits, rtol=0, atol=1e-12)
    assert terms.next_state is not None
    assert turned.next_state is not None
    expected = rotate_state(terms.next_state(attn), theta)
    got = turned.next_state(attn)
    torch.testing.assert_close(got.cos, expected.cos, rtol=0, atol=1e-12)
    torch.testing.assert_close(got.sin, expected.sin, rtol=0, atol=1e-12)
    assert SPEC.state_ffn is not None
    ffn_expected = rotate_state(SPEC.state_ffn(model, x, state), theta)
    ffn_got = SPEC.state_ffn(model, x, rotate_state(state, theta))
    torch.testing.assert_close(ffn_got.cos, ffn_expected.cos, rtol=0, atol=1e-12)
    torch.testing.assert_close(ffn_got.sin, ffn_expected.sin, rtol=0, atol=1e-12)
    # the updates keep the pairing structure C[..., k] = C[..., k + d/2]
    torch.testing.assert_close(ffn_got.cos[..., : D // 2], ffn_got.cos[..., D // 2 :], rtol=0, atol=0)
    # not a tautology: different angles on the two members of a pair break the invariance
    skew = torch.cat((theta_half, theta_half + 1.0))
    broken = SPEC.fn(model, inputs(q, k, rotate_state(state, skew)), context(n, n))
    assert (broken.logits - terms.logits).abs().max() > 1e-3


# --------------------------------------------------------------------------------------------- errors
def test_errors_name_the_input() -> None:
    q = randn(1, H, 4, D, seed=50)
    good = TapeState(randn(1, H, 4, D, seed=51), randn(1, H, 4, D, seed=52))
    cases: list[tuple[Any, tuple[str, ...]]] = [
        (lambda: SPEC.fn(params(), inputs(q, q, (good.cos, good.sin)), context(4, 4)), ("state",)),
        (lambda: SPEC.fn(params(), inputs(q, q, TapeState(good.cos[:, :, :3], good.sin)), context(4, 4)),
         ("state", "cos", "shape")),
        (lambda: SPEC.fn(params(), inputs(q[..., :5], q[..., :5]), context(4, 4)), ("q", "shape")),
        (lambda: SPEC.fn(params({"rho": torch.zeros(H, H + 1)}), inputs(q, q), context(4, 4)),
         ("params", "rho", "shape")),
        (lambda: tape_state_ffn(params({"w_up": torch.zeros(P, H + 1)}), randn(1, 4, WIDTH, seed=53), good),
         ("params", "w_up", "shape")),
        (lambda: tape_state_ffn(params(), randn(1, 3, WIDTH, seed=54), good), ("state", "cos", "shape")),
    ]  # fmt: skip
    for call, loc in cases:
        with pytest.raises(InvalidInput) as error:
            call()
        assert error.value.loc == loc
    positions = torch.arange(2)  # with a state the queries must be the last keys
    bad = LayerInputs(
        q=q[:, :, :2],
        k=q,
        q_pos=positions,
        k_pos=torch.arange(4),
        mask=future_mask(positions, torch.arange(4)),
        state=good,
    )
    with pytest.raises(InvalidInput) as error:
        SPEC.fn(params(), bad, context(2, 4))
    assert error.value.loc == ("q_pos",)
    with pytest.raises(InvalidInput):  # a non-causal layer
        build_applier(SPEC, params(), Layer(num_heads=H, head_dim=D, causal=False)).check()


# ---------------------------------------------------------------------------------------- the model
def tiny(method: str) -> TinyTransformer:
    config = ModelConfig(vocab_size=11, layers=2, dim=16, heads=2, method=method, train_length=8)
    return TinyTransformer(config, seed=0)


def test_fresh_model_is_the_rope_model() -> None:
    """The code's init (rho = 0, w_up = 0) leaves the state at RoPE's in every layer (float32 models)."""
    ids = torch.randint(0, 11, (2, 8), generator=gen(60))
    with torch.no_grad():
        tape_logits, rope_logits_ = tiny("tape")(ids), tiny("rope")(ids)
    torch.testing.assert_close(tape_logits, rope_logits_, rtol=0, atol=1e-5)


def test_model_gradients_and_causality() -> None:
    model = tiny("tape")
    ids = torch.randint(0, 11, (2, 8), generator=gen(61))
    blocks: list[PositionalEncoding] = []
    for block in model.blocks:
        assert isinstance(block, Block)
        assert block.pe is not None  # per-layer: each block holds its own rho, w_x, w_up, w_down
        blocks.append(block.pe)
    first, last = blocks

    # at the code's init only rho and w_up of layer 0 move: w_x and w_down multiply W_up E = 0
    loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
    loss.backward()  # type: ignore[no-untyped-call]
    grads: dict[str, float] = {}
    for name, parameter in first.learned.items():
        assert parameter.grad is not None, name
        grads[name] = float(parameter.grad.abs().max())
    assert grads["rho"] > 0
    assert grads["w_up"] > 0
    assert grads["w_x"] == 0
    assert grads["w_down"] == 0

    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        for index, instance in enumerate(blocks):
            for offset, parameter in enumerate(instance.learned.values()):
                parameter.copy_(randn(*parameter.shape, seed=70 + 10 * index + offset) * 0.3)
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
    loss.backward()  # type: ignore[no-untyped-call]
    for name, parameter in first.learned.items():
        assert parameter.grad is not None, name
        assert float(parameter.grad.abs().max()) > 0, name
    # the state leaving the last layer is discarded (as in the code): its weights get no gradient
    assert all(p.grad is None or float(p.grad.abs().max()) == 0 for p in last.learned.values())

    with torch.no_grad():
        changed = ids.clone()
        changed[:, 5:] = (changed[:, 5:] + 1) % 11
        again = model(changed)
    torch.testing.assert_close(again[:, :5], logits.detach()[:, :5], rtol=0, atol=1e-6)
    assert (again[:, 5:] - logits.detach()[:, 5:]).abs().max() > 1e-6


class RecordingPE:
    """A block's ``LayerPE`` around a real applier that records the tensor the block hands to update_state."""

    def __init__(self, applier: Any) -> None:
        self.applier = applier
        self.handed: list[torch.Tensor] = []

    def layer_attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> Any:
        return self.applier.layer_attend(q, k, v, **kwargs)

    def update_state(self, x: torch.Tensor, state: Any) -> Any:
        self.handed.append(x.detach().clone())
        return self.applier.update_state(x, state)


def test_the_block_updates_the_state_from_the_ffn_output() -> None:
    """The code's decoder layer runs h = mlp(post_attention_layernorm(h)), then pe(h, E) ("this order is
    important"), then the residual adds: the state update reads the FFN's output before the residual add, not
    the FFN's normalised input."""
    model = tiny("tape")
    block = model.blocks[0]
    assert isinstance(block, Block)
    assert block.pe is not None
    with torch.no_grad():  # w_up != 0, so that the update depends on what it reads
        for offset, parameter in enumerate(block.pe.learned.values()):
            parameter.copy_(randn(*parameter.shape, seed=80 + offset) * 0.3)
    outputs: list[torch.Tensor] = []

    def record(module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        outputs.append(output.detach().clone())

    hook = block.ffn_out.register_forward_hook(record)
    recorder = RecordingPE(block.pe.applier())
    x = randn(2, 8, 16, seed=81, dtype=torch.float32)
    with torch.no_grad():
        out, state = block(x, recorder, model.pe.applier().initial_state(2, 8, x.device))
    hook.remove()
    (handed,) = recorder.handed
    (ffn,) = outputs  # (B, T, D): ffn_out(GELU(ffn_in(LN(h)))), h = x + Attn(LN(x))
    assert handed.shape == (2, 8, 16)
    assert torch.equal(handed, ffn)
    assert isinstance(state, TapeState)
    with torch.no_grad():
        normalised_input = block.ffn_norm(out - ffn)  # LN(h): what the update read before
    assert not torch.allclose(handed, normalised_input, atol=1e-3)
