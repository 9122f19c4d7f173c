"""The model: every kind of PE applied, at lengths past training, with the PE as the only variable."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import get_method
from posenc.training import model as model_module
from posenc.training.graph_task import GraphModelConfig, GraphTransformer
from posenc.training.model import Block, ModelConfig, TinyTransformer, count_parameters, pe_init_seed
from posenc.training.vit import VisionTransformer, ViTConfig

VOCAB = 11


def tiny_config(method: str, **params: object) -> ModelConfig:
    return ModelConfig(vocab_size=VOCAB, layers=2, dim=16, heads=2, method=method, params=dict(params), train_length=8)


@pytest.mark.parametrize("method", ["nope", "sinusoidal", "alibi", "rope"])
@pytest.mark.parametrize("length", [8, 37])
def test_logits_shape_at_and_past_the_training_length(method: str, length: int) -> None:
    model = TinyTransformer(tiny_config(method), seed=0)
    ids = torch.randint(0, VOCAB, (3, length))
    logits = model(ids)
    assert logits.shape == (3, length, VOCAB)
    assert torch.isfinite(logits).all()


def test_lm_x_model_has_the_published_parameter_count() -> None:
    config = ModelConfig(vocab_size=65, layers=2, dim=128, heads=4, method="rope")
    assert count_parameters(TinyTransformer(config)) == 413_440  # the LM-X text benchmark's model


def test_same_seed_gives_identical_non_pe_weights_for_every_method() -> None:
    states = [TinyTransformer(tiny_config(m), seed=3).state_dict() for m in ("nope", "sinusoidal", "alibi", "rope")]
    reference = states[0]
    for state in states[1:]:
        assert state.keys() == reference.keys()  # fixed PEs add no state
        for name, tensor in reference.items():
            assert torch.equal(state[name], tensor), name
    other_seed = TinyTransformer(tiny_config("rope"), seed=4).state_dict()
    assert not torch.equal(other_seed["token_embedding.weight"], reference["token_embedding.weight"])


def test_causality_future_tokens_do_not_change_past_logits() -> None:
    for method in ("sinusoidal", "alibi", "rope"):
        model = TinyTransformer(tiny_config(method), seed=0)
        ids = torch.randint(0, VOCAB, (1, 12))
        changed = ids.clone()
        changed[0, 8:] = (changed[0, 8:] + 1) % VOCAB
        assert torch.allclose(model(ids)[0, :8], model(changed)[0, :8], atol=1e-6), method


def test_a_fixed_bias_is_built_once_per_length_and_is_causal() -> None:
    model = TinyTransformer(tiny_config("alibi"), seed=0)
    model(torch.zeros(1, 9, dtype=torch.int64))
    cached = list(model.pe._cache.values())
    assert len(cached) == 1
    mask = cached[0]
    assert mask.shape == (2, 9, 9)
    model(torch.ones(2, 9, dtype=torch.int64))
    assert next(iter(model.pe._cache.values())) is mask  # built once per length
    assert torch.isinf(mask[:, 0, 1:]).all()  # causal −inf above the diagonal


def test_pairing_reaches_the_rotation() -> None:
    ids = torch.randint(0, VOCAB, (1, 12))
    half = TinyTransformer(tiny_config("rope"), seed=0)
    interleaved = TinyTransformer(dataclasses.replace(tiny_config("rope"), pairing="interleaved"), seed=0)
    assert not torch.allclose(half(ids), interleaved(ids))


def _learned_absolute_with_init(max_positions: int) -> object:
    """learned_absolute with a learned_init (the family may not define one yet): the real method function."""

    def init(params: object, ctx: object) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        return {"table": 0.02 * torch.randn(max_positions, 16, generator=generator)}

    return dataclasses.replace(get_method("learned_absolute"), learned_init=init)


def test_learned_pe_is_a_trained_parameter_and_never_extrapolates(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _learned_absolute_with_init(max_positions=10)
    monkeypatch.setattr(model_module, "get_method", lambda name: spec)
    model = TinyTransformer(tiny_config("learned_absolute", max_positions=10), seed=0)
    table = model.pe.learned["table"]
    assert "pe.learned.table" in model.state_dict()
    model(torch.randint(0, VOCAB, (2, 10))).sum().backward()
    assert table.grad is not None
    assert table.grad.abs().sum() > 0
    with pytest.raises(InvalidInput, match="learned"):
        model(torch.randint(0, VOCAB, (2, 11)))


def test_a_learned_method_without_learned_init_cannot_be_built(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = dataclasses.replace(get_method("learned_absolute"), learned_init=None)
    monkeypatch.setattr(model_module, "get_method", lambda name: spec)
    with pytest.raises(ValueError, match="learned_init"):
        TinyTransformer(tiny_config("learned_absolute"), seed=0)


def test_per_layer_methods_get_one_instance_per_layer_and_shared_ones_one() -> None:
    per_layer = TinyTransformer(tiny_config("transformer_xl"), seed=0)
    state = per_layer.state_dict()
    first, second = state["blocks.0.pe.learned.w_r"], state["blocks.1.pe.learned.w_r"]
    assert first.shape == second.shape == (16, 16)  # W_R: Linear(D, H·d_head)
    assert not torch.equal(first, second)  # layer l draws from pe_init_seed(run seed, params.seed, l)
    ids = torch.randint(0, VOCAB, (2, 9))
    per_layer(ids).sum().backward()
    for block in per_layer.blocks:
        assert isinstance(block, Block)
        assert block.pe is not None
        assert block.pe.learned["w_r"].grad is not None
    assert not [name for name in state if name.startswith("pe.")], "the shared instance holds no unused weights"
    shared = TinyTransformer(tiny_config("t5"), seed=0)
    assert [name for name in shared.state_dict() if ".pe." in name or name.startswith("pe.")] == ["pe.learned.table"]


@pytest.mark.parametrize("method", ["shaw", "transformer_xl", "tener", "huang", "cape", "fox", "cope", "tape"])
def test_content_methods_train_and_stay_causal(method: str) -> None:
    model = TinyTransformer(tiny_config(method), seed=0)
    ids = torch.randint(0, VOCAB, (1, 12))
    changed = ids.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % VOCAB
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[0, :8], model(changed)[0, :8], atol=1e-5, rtol=1e-5)
    loss = model(ids).logsumexp(-1).mean()
    loss.backward()
    learned = [p for name, p in model.named_parameters() if "pe.learned" in name]
    assert learned, "the method's weights are model parameters"
    assert all(torch.isfinite(p.grad).all() for p in learned if p.grad is not None)


# ------------------------------------------------------------------------------------------ seeds
def pe_tables(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The learned PE tensors of a model by state-dict name: the shared instance's and every layer's."""
    return {name: tensor for name, tensor in model.state_dict().items() if "pe.learned." in name}


# the tensors each method draws at random (the others are fixed inits: zeros, FoX's decay-time b_f)
DRAWN = {
    "fox": ("w_f",),
    "t5": ("table",),
    "tape": ("w_x", "w_down"),
    "transformer_xl": ("w_r",),
    "fire": ("mlp_w1", "mlp_b1", "mlp_w2", "mlp_b2"),
    "axial": ("tables__0", "tables__1"),
}


def test_a_list_of_learned_tables_trains_as_one_parameter_each() -> None:
    """Axial's init is a list of tables (one per factor): each is a parameter of its own that the gradient
    reaches and a checkpoint restores (it failed to build: a list is not one tensor)."""
    model = TinyTransformer(tiny_config("axial"), seed=0)
    tables = [model.pe.learned["tables__0"], model.pe.learned["tables__1"]]
    model(torch.randint(0, VOCAB, (2, 8))).sum().backward()
    assert all(table.grad is not None and table.grad.abs().sum() > 0 for table in tables)
    restored = TinyTransformer(tiny_config("axial"), seed=1)
    restored.load_state_dict(model.state_dict())
    ids = torch.randint(0, VOCAB, (2, 8))
    assert torch.equal(restored(ids), model(ids))


@pytest.mark.parametrize("method", sorted(DRAWN))
def test_the_run_seed_changes_every_drawn_pe_table(method: str) -> None:
    """Two runs with different seeds start from different PE tables, the same seed from identical ones, and the
    method's own params.seed still changes them."""
    first, again, other = (pe_tables(TinyTransformer(tiny_config(method), seed=seed)) for seed in (0, 0, 1))
    own_seed = pe_tables(TinyTransformer(tiny_config(method, seed=7), seed=0))
    drawn = [name for name in first if name.rsplit(".", 1)[-1] in DRAWN[method]]
    assert drawn, sorted(first)
    assert first.keys() == again.keys() == other.keys() == own_seed.keys()
    for name, tensor in first.items():
        assert torch.equal(tensor, again[name]), name
    for name in drawn:
        assert not torch.equal(first[name], other[name]), name
        assert not torch.equal(first[name], own_seed[name]), name


def test_pe_init_seeds_mix_run_seed_params_seed_and_layer() -> None:
    seeds = {pe_init_seed(run, own, layer) for run in (0, 1, -1) for own in (0, 1) for layer in (0, 1)}
    assert len(seeds) == 12  # no sum-like collisions (run 0 at params.seed 1 vs run 1 at params.seed 0)
    assert all(0 <= seed < 2**63 for seed in seeds)
    assert pe_init_seed(2**63 - 1, 2**63 - 1, 47) < 2**63
    assert pe_init_seed(3, 4, 5) == pe_init_seed(3, 4, 5)


def test_vit_and_graph_models_follow_the_run_seed() -> None:
    """Models that attach their PE without passing the seed take the one init_weights drew their blocks from."""
    vit = ViTConfig(num_classes=3, image_size=16, patch_size=4, layers=2, dim=16, heads=2, method="vit_learned")
    graph = GraphModelConfig(layers=2, dim=16, heads=2, method="graphormer", train_nodes=8)
    for build in (lambda seed: VisionTransformer(vit, seed), lambda seed: GraphTransformer(graph, seed)):
        first, again, other = (pe_tables(build(seed)) for seed in (0, 0, 1))
        assert first
        for name, tensor in first.items():
            assert torch.equal(tensor, again[name]), name
        assert any(not torch.equal(tensor, other[name]) for name, tensor in first.items())
