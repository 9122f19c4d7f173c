"""FoX (Lin et al., ICLR 2025): the T20 golden decay bias, constant gates giving (i − j)·log f, causality in x,
a float64 loop reference of q·k/√d + Σ_{l=j+1}^{i} log σ(w_f·x_l + b_f), the gate types, the init and errors."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest
import torch

import posenc.pe.fox
from posenc.errors import InvalidInput
from posenc.pe.appliers import Layer, build_applier, future_mask
from posenc.pe.fox import FoxParams, decay_bias_init, fox_learned_init
from posenc.pe.registry import get_method
from posenc.pe.types import LayerInputs, ScoreContext
from posenc.schemas.methods import Kind
from posenc.training.model import Block, ModelConfig, TinyTransformer

SPEC = get_method("fox")
HEADS, HEAD_DIM = 2, 3


def context(
    q_len: int, k_len: int, *, heads: int = HEADS, model_dim: int = 4, dtype: torch.dtype = torch.float64
) -> ScoreContext:
    return ScoreContext(
        num_heads=heads,
        query_length=q_len,
        key_length=k_len,
        head_dim=HEAD_DIM,
        causal=True,
        model_dim=model_dim,
        dtype=dtype,
        query_offset=k_len - q_len,
    )


def layer_inputs(q: torch.Tensor, k: torch.Tensor, x: torch.Tensor | None) -> LayerInputs:
    q_len, k_len = q.shape[2], k.shape[2]
    q_pos, k_pos = torch.arange(q_len) + k_len - q_len, torch.arange(k_len)
    return LayerInputs(q=q, k=k, q_pos=q_pos, k_pos=k_pos, mask=future_mask(q_pos, k_pos), x=x)


def run(q: torch.Tensor, k: torch.Tensor, x: torch.Tensor | None, **params: Any) -> torch.Tensor:
    ctx = context(q.shape[2], k.shape[2], heads=q.shape[1], model_dim=4 if x is None else x.shape[-1], dtype=q.dtype)
    model = FoxParams(**{name: value for name, value in params.items() if not isinstance(value, torch.Tensor)})
    model = model.model_copy(update={name: value for name, value in params.items() if isinstance(value, torch.Tensor)})
    logits: torch.Tensor = SPEC.fn(model, layer_inputs(q, k, x), ctx).logits
    return logits


def lower(q_len: int, k_len: int) -> torch.Tensor:
    """(Nq, Nk) True where key j is at or before query i (query i at position i + Nk − Nq)."""
    return ~future_mask(torch.arange(q_len) + k_len - q_len, torch.arange(k_len))[0, 0]


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def test_registry_entry() -> None:
    assert SPEC.kind is Kind.SCORE_MOD
    assert SPEC.learned
    assert SPEC.per_layer
    assert SPEC.causal_only
    assert SPEC.needs == frozenset({"x"})
    assert "zhixuan-lin/forgetting-transformer" in (posenc.pe.fox.__doc__ or "")


def test_golden_t20_decay_bias() -> None:
    """Golden T20: f = [0.9, 0.8, 0.7, 0.6] per position, q = k = 0, so the logits are D itself."""
    gates = [0.9, 0.8, 0.7, 0.6]
    x = torch.tensor([[[logit(f)] for f in gates]], dtype=torch.float64)  # (1, 4, 1): w_f = 1, b_f = 0
    zeros = torch.zeros(1, 1, 4, HEAD_DIM, dtype=torch.float64)
    got = run(zeros, zeros, x, w_f=torch.ones(1, 1, dtype=torch.float64), b_f=torch.zeros(1, dtype=torch.float64))
    expected = [  # the lower triangle j <= i
        [0.0],
        [-0.2231435513, 0.0],
        [-0.5798184953, -0.3566749439, 0.0],
        [-1.0906441190, -0.8675005677, -0.5108256238, 0.0],
    ]
    for i in range(4):
        for j in range(i + 1):
            assert got[0, 0, i, j].item() == pytest.approx(expected[i][j], abs=1e-9)
    assert bool(torch.isfinite(got).all())  # the future is unmasked and finite; the applier masks it


def test_constant_gates_give_distance_times_log_f() -> None:
    """σ(b) = f for every position: D_ij = (i − j)·log f, 'full' (w_f = 0, cumulative sums) and 'bias_only'."""
    q_len = k_len = 6
    fs = [0.9, 0.35]
    b_f = torch.tensor([logit(f) for f in fs], dtype=torch.float64)
    zeros = torch.zeros(1, HEADS, k_len, HEAD_DIM, dtype=torch.float64)
    x = torch.randn(1, k_len, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    full = run(zeros, zeros, x, w_f=torch.zeros(HEADS, 4, dtype=torch.float64), b_f=b_f)[0]
    bias_only = run(zeros, zeros, None, fgate_type="bias_only", b_f=b_f)[0]
    expected = torch.tensor(
        [[[(i - j) * math.log(f) for j in range(k_len)] for i in range(q_len)] for f in fs], dtype=torch.float64
    )
    keep = lower(q_len, k_len)
    torch.testing.assert_close(full[:, keep], expected[:, keep], rtol=0, atol=1e-12)
    torch.testing.assert_close(bias_only, expected, rtol=0, atol=1e-13)
    assert bool((full.diagonal(dim1=-2, dim2=-1) == 0).all())  # D_ii = c_i − c_i, exactly


def test_fixed_bias_init_gives_the_decay_times() -> None:
    """fgate_bias_init: σ(b_h) = exp(−1/τ_h), τ log-spaced over [T_min, T_max]: D_{i, i−1} = −1/τ_h."""
    heads, t_min, t_max = 3, 2.0, 50.0
    zeros = torch.zeros(1, heads, 4, HEAD_DIM, dtype=torch.float64)
    got = run(zeros, zeros, None, fgate_type="fixed", fgate_bias_init=True, decay_time_min=t_min, decay_time_max=t_max)
    taus = [t_min * (t_max / t_min) ** (h / (heads - 1)) for h in range(heads)]
    for h, tau in enumerate(taus):
        assert got[0, h, 3, 2].item() == pytest.approx(-1.0 / tau, abs=1e-12)
        assert got[0, h, 3, 0].item() == pytest.approx(-3.0 / tau, abs=1e-12)
    # the stable form agrees with the reference's −log(expm1(1/τ)) where that does not overflow
    direct = torch.tensor([-math.log(math.expm1(1.0 / tau)) for tau in taus], dtype=torch.float64)
    torch.testing.assert_close(decay_bias_init(heads, t_min, t_max), direct, rtol=0, atol=1e-12)
    assert bool(torch.isfinite(decay_bias_init(2, 1e-4, 1e-3)).all())  # expm1(1e4) would overflow


def test_none_is_the_scaled_dot_product() -> None:
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, HEADS, 3, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(2, HEADS, 5, HEAD_DIM, generator=generator, dtype=torch.float64)
    got = run(q, k, None, fgate_type="none")
    torch.testing.assert_close(got, q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM), rtol=0, atol=1e-14)


def reference_logits(
    q: torch.Tensor, k: torch.Tensor, x: torch.Tensor, w_f: torch.Tensor, b_f: torch.Tensor
) -> torch.Tensor:
    """q_i·k_j/√d + Σ_{l=j+1}^{i} log σ(w_f·x_l + b_f) with loops (query i at position i + Nk − Nq), j <= i."""
    batch, heads, q_len, _ = q.shape
    k_len, model_dim = k.shape[2], x.shape[-1]
    out = torch.full((batch, heads, q_len, k_len), float("nan"), dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            log_f = []
            for t in range(k_len):
                z = sum(w_f[h, m].item() * x[b, t, m].item() for m in range(model_dim)) + b_f[h].item()
                log_f.append(-math.log1p(math.exp(-z)))
            for i in range(q_len):
                position = i + k_len - q_len
                for j in range(position + 1):
                    dot = sum(q[b, h, i, c].item() * k[b, h, j, c].item() for c in range(HEAD_DIM))
                    out[b, h, i, j] = dot / math.sqrt(HEAD_DIM) + sum(log_f[j + 1 : position + 1])
    return out


@pytest.mark.parametrize(("q_len", "k_len"), [(5, 5), (2, 6), (1, 4)])
def test_matches_the_loop_reference(q_len: int, k_len: int) -> None:
    generator = torch.Generator().manual_seed(q_len * 10 + k_len)
    q = torch.randn(2, HEADS, q_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    k = torch.randn(2, HEADS, k_len, HEAD_DIM, generator=generator, dtype=torch.float64)
    x = torch.randn(2, k_len, 4, generator=generator, dtype=torch.float64)
    w_f = torch.randn(HEADS, 4, generator=generator, dtype=torch.float64)
    b_f = torch.randn(HEADS, generator=generator, dtype=torch.float64)
    got = run(q, k, x, w_f=w_f, b_f=b_f)
    keep = lower(q_len, k_len)
    torch.testing.assert_close(got[..., keep], reference_logits(q, k, x, w_f, b_f)[..., keep], rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_future_inputs_do_not_reach_the_past(dtype: torch.dtype) -> None:
    """Changing x after position i leaves row i unchanged at j <= i, bit for bit."""
    n = 7
    generator = torch.Generator().manual_seed(5)
    q = torch.randn(1, HEADS, n, HEAD_DIM, generator=generator).to(dtype)
    k = torch.randn(1, HEADS, n, HEAD_DIM, generator=generator).to(dtype)
    x = torch.randn(1, n, 4, generator=generator).to(dtype)
    w_f = torch.randn(HEADS, 4, generator=generator).to(dtype)
    b_f = torch.randn(HEADS, generator=generator).to(dtype)
    before = run(q, k, x, w_f=w_f, b_f=b_f)
    for i in range(n - 1):
        changed = x.clone()
        changed[:, i + 1 :] = torch.randn(1, n - i - 1, 4, generator=generator).to(dtype)
        after = run(q, k, changed, w_f=w_f, b_f=b_f)
        assert torch.equal(after[..., i, : i + 1], before[..., i, : i + 1])
        assert not torch.equal(after[..., i + 1, : i + 2], before[..., i + 1, : i + 2])  # the change is seen later


def test_decay_depends_only_on_the_gates_between_key_and_query() -> None:
    """D_ij = Σ_{l=j+1}^{i} log f_l: changing x_0..x_j does not move D_ij (up to float64 rounding)."""
    n = 6
    generator = torch.Generator().manual_seed(8)
    zeros = torch.zeros(1, HEADS, n, HEAD_DIM, dtype=torch.float64)
    x = torch.randn(1, n, 4, generator=generator, dtype=torch.float64)
    w_f = torch.randn(HEADS, 4, generator=generator, dtype=torch.float64)
    b_f = torch.randn(HEADS, generator=generator, dtype=torch.float64)
    before = run(zeros, zeros, x, w_f=w_f, b_f=b_f)
    for j in range(n):
        changed = x.clone()
        changed[:, : j + 1] += 3.0
        after = run(zeros, zeros, changed, w_f=w_f, b_f=b_f)
        torch.testing.assert_close(after[..., j:, j], before[..., j:, j], rtol=0, atol=1e-12)


def test_seeded_init_and_gradients() -> None:
    assert SPEC.learned_init is fox_learned_init
    ctx = context(4, 4, model_dim=8)
    full = fox_learned_init(FoxParams(seed=3), ctx)
    assert set(full) == {"w_f", "b_f"}
    assert full["w_f"].shape == (HEADS, 8)
    assert bool((full["b_f"] == 0).all())
    assert 0.005 < float(full["w_f"].std()) < 0.05
    assert torch.equal(full["w_f"], fox_learned_init(FoxParams(seed=3), ctx)["w_f"])
    assert not torch.equal(full["w_f"], fox_learned_init(FoxParams(seed=4), ctx)["w_f"])
    assert set(fox_learned_init(FoxParams(fgate_type="bias_only"), ctx)) == {"b_f"}
    assert fox_learned_init(FoxParams(fgate_type="none"), ctx) == {}
    fixed = FoxParams(fgate_type="fixed", fgate_bias_init=True, decay_time_min=1.0, decay_time_max=9.0)
    assert fox_learned_init(fixed, ctx) == {}  # fixed gates are not trained

    # training substitutes parameters: the gradient reaches w_f and b_f through the method
    w_f = torch.nn.Parameter(full["w_f"].clone())
    b_f = torch.nn.Parameter(full["b_f"].clone())
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, HEADS, 4, HEAD_DIM, generator=generator)
    x = torch.randn(1, 4, 8, generator=generator)
    params = FoxParams().model_copy(update={"w_f": w_f, "b_f": b_f})
    logits = SPEC.fn(params, layer_inputs(q, q, x), context(4, 4, model_dim=8, dtype=torch.float32)).logits
    logits.masked_fill(future_mask(torch.arange(4), torch.arange(4)), 0.0).sum().backward()
    for weight in (w_f, b_f):
        assert weight.grad is not None
        assert bool(weight.grad.abs().sum() > 0)


def test_float32_sums_and_output_dtype() -> None:
    """A bfloat16 layer: the decay is summed in float32 and rounded once (D_ii exactly 0, D_10 = log f_1)."""
    gates = [0.9, 0.8, 0.7, 0.6]
    x = torch.tensor([[[logit(f)] for f in gates]], dtype=torch.bfloat16)
    zeros = torch.zeros(1, 1, 4, HEAD_DIM, dtype=torch.bfloat16)
    ctx = context(4, 4, heads=1, model_dim=1, dtype=torch.bfloat16)
    params = FoxParams().model_copy(update={"w_f": torch.ones(1, 1), "b_f": torch.zeros(1)})
    got = SPEC.fn(params, layer_inputs(zeros, zeros, x), ctx).logits
    assert got.dtype == torch.bfloat16
    assert bool((got[0, 0].diagonal() == 0).all())
    assert got[0, 0, 1, 0].item() == pytest.approx(math.log(0.8), rel=1e-2)


def test_applier_attends_with_the_decay() -> None:
    """Through the score_mod applier: masked keys get weight 0 and rows sum to 1; non-causal layers refused."""
    layer = Layer(num_heads=HEADS, head_dim=HEAD_DIM, causal=True, model_dim=4, dtype=torch.float64)
    applier = build_applier(SPEC, FoxParams(), layer)
    applier.check()
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(1, HEADS, 5, HEAD_DIM, generator=generator, dtype=torch.float64)
    x = torch.randn(1, 5, 4, generator=generator, dtype=torch.float64)
    pos = torch.arange(5)
    out = applier.attend(q, q, q, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos), x=x)
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(1, HEADS, 5, dtype=torch.float64))
    assert bool((out.weights[..., ~lower(5, 5)] == 0).all())
    with pytest.raises(InvalidInput) as excinfo:
        build_applier(SPEC, FoxParams(), Layer(num_heads=HEADS, head_dim=HEAD_DIM, causal=False)).check()
    assert excinfo.value.loc == ("causal",)


W_F_DATA = {"shape": [1, 1], "data": [0.0]}


def test_errors() -> None:
    q = torch.zeros(1, HEADS, 4, HEAD_DIM, dtype=torch.float64)
    with pytest.raises(InvalidInput) as excinfo:
        run(q, q, None)
    assert excinfo.value.loc == ("x",)
    with pytest.raises(InvalidInput) as excinfo:
        run(q, q, torch.zeros(1, 3, 4, dtype=torch.float64))
    assert excinfo.value.loc == ("x", "shape")
    with pytest.raises(InvalidInput) as excinfo:
        run(q, q, torch.zeros(1, 4, 4, dtype=torch.float64), w_f=torch.zeros(HEADS, 5, dtype=torch.float64))
    assert excinfo.value.loc == ("params", "w_f", "shape")
    with pytest.raises(InvalidInput) as excinfo:
        run(q, q, None, fgate_type="bias_only", b_f=torch.zeros(3, dtype=torch.float64))
    assert excinfo.value.loc == ("params", "b_f", "shape")
    run(q, q, None, fgate_type="bias_only")  # gates that do not read x need no x
    SPEC.parse_params({"w_f": W_F_DATA})  # the tensor itself is well formed: the errors below are the rules
    for bad in (
        {"fgate_type": "fixed"},
        {"fgate_bias_init": True, "decay_time_min": 1.0},
        {"decay_time_min": 1.0, "decay_time_max": 2.0},
        {"fgate_type": "bias_only", "w_f": W_F_DATA},
        {"fgate_type": "none", "b_f": {"shape": [2], "data": [0.0, 0.0]}},
        {"fgate_type": "sometimes"},
        {"fgate_bias_init": True, "decay_time_min": 0.0, "decay_time_max": 2.0},
    ):
        with pytest.raises(pydantic.ValidationError):
            SPEC.parse_params(bad)


# ------------------------------------------------------------------------------------- training defaults
def test_training_defaults_fill_only_the_keys_a_job_leaves_out() -> None:
    assert SPEC.training_defaults == {"fgate_bias_init": True, "decay_time_min": 4.0, "decay_time_max": 64.0}
    assert "posenc's training default" in SPEC.training_note
    shown = SPEC.info().conventions["training_defaults"]  # GET /v1/methods
    assert SPEC.training_note in shown
    assert "fgate_bias_init=true" in shown
    paper_defaults = SPEC.parse_params({})
    assert isinstance(paper_defaults, FoxParams)
    assert paper_defaults.fgate_bias_init is False  # compute routes keep the authors' defaults

    assert SPEC.training_params({}) == SPEC.training_defaults
    assert SPEC.training_params(None) == SPEC.training_defaults
    assert SPEC.training_params_note({}) == SPEC.training_note
    # the job's keys win; the authors' init drops the default decay times (they are read only with the init)
    assert SPEC.training_params({"fgate_bias_init": False}) == {"fgate_bias_init": False}
    assert SPEC.training_params_note({"fgate_bias_init": False}) is None
    assert SPEC.training_params({"decay_time_max": 128.0, "seed": 5}) == {
        "decay_time_max": 128.0,
        "seed": 5,
        "fgate_bias_init": True,
        "decay_time_min": 4.0,
    }
    assert SPEC.training_params({"fgate_type": "none"}) == {"fgate_type": "none"}  # 'none' has no gate bias
    given = {"fgate_bias_init": True, "decay_time_min": 2.0, "decay_time_max": 8.0}
    assert SPEC.training_params(given) == given
    assert SPEC.training_params_note(given) is None
    assert get_method("t5").training_params({"seed": 1}) == {"seed": 1}  # no training defaults
    raw = {"seed": 2}
    SPEC.training_params(raw)
    assert raw == {"seed": 2}  # the job's params are not changed


def fox_model(**params: Any) -> TinyTransformer:
    config = ModelConfig(vocab_size=11, layers=2, dim=16, heads=4, method="fox", params=params, train_length=8)
    return TinyTransformer(config, seed=0)


def test_a_training_model_starts_from_the_decay_time_init_unless_told_otherwise() -> None:
    for block in fox_model().blocks:
        assert isinstance(block, Block)
        assert block.pe is not None
        expected = decay_bias_init(4, 4.0, 64.0).to(torch.float32)
        torch.testing.assert_close(block.pe.learned["b_f"].detach(), expected, rtol=0, atol=0)
    for block in fox_model(fgate_bias_init=False).blocks:  # the authors' init: fgate_proj.bias = 0
        assert isinstance(block, Block)
        assert block.pe is not None
        assert torch.equal(block.pe.learned["b_f"].detach(), torch.zeros(4))
    for block in fox_model(decay_time_max=16.0).blocks:
        assert isinstance(block, Block)
        assert block.pe is not None
        expected = decay_bias_init(4, 4.0, 16.0).to(torch.float32)
        torch.testing.assert_close(block.pe.learned["b_f"].detach(), expected, rtol=0, atol=0)
