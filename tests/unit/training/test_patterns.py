"""Layer patterns: each named pattern builds exactly the per-layer setup its model ships, a
written-out unit tiles over the layers, windows and chunks equal a dense masked reference, Llama 4's temperature
acts where its formula says, and what a pattern cannot honour is refused naming the field."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from posenc.errors import FieldErrors, InvalidInput
from posenc.jobspec import validate_spec
from posenc.patterns import PATTERNS, local_span
from posenc.pe import get_method
from posenc.pe.appliers import Layer, build_applier, positions
from posenc.schemas.jobs import JobSpec
from posenc.tasks import family_of
from posenc.training.families import trainer_for
from posenc.training.model import Block, ModelConfig, TinyTransformer

COPY_SIZE = 14  # a copy instance of n items is 2n + 3 tokens: training length 31, local span 7


def job(entry: dict[str, Any], layers: int = 12, **model: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "methods": [entry],
            "data": {"task": "copy", "size": COPY_SIZE},
            "model": {"layers": layers, "dim": 32, "heads": 2, **model},
            "train": {"steps": 4, "batch_size": 2, "checkpoint_every": 4},
            "eval": {"samples": 2, "sizes": [COPY_SIZE, 2 * COPY_SIZE]},
        }
    )


def built(spec: JobSpec) -> TinyTransformer:
    """The model a job trains for its first method entry, as the trainer configures it."""
    validate_spec("benchmark", spec)
    config = trainer_for(family_of(spec)).model_config(spec.methods[0], vocab_size=16)
    assert isinstance(config, ModelConfig)
    return TinyTransformer(config, seed=0)


def layer_table(model: TinyTransformer) -> list[tuple[Any, ...]]:
    """Per block: (method, base θ or None, rotated features, window, chunk, temperature)."""
    rows = []
    for block in model.blocks:
        assert isinstance(block, Block)
        assert block.pe is not None
        layer, params = block.pe.layer, block.pe.params
        rows.append(
            (
                block.pe.spec.name,
                getattr(params, "base", None),
                layer.rotary_dim if layer.rotary_dim is not None else layer.head_dim,
                layer.window,
                layer.chunk,
                block.temperature,
            )
        )
    return rows


SPAN = local_span(2 * COPY_SIZE + 3)
ROPE, NOPE = ("rope", 10_000.0), ("nope", None)
# what each model ships, written out layer by layer from its config (not from posenc.patterns): 12 layers
EXPECTED: dict[str, list[tuple[Any, ...]]] = {
    "llama4": [(*ROPE, 16, None, SPAN, None)] * 3 + [(*NOPE, 16, None, None, (SPAN, 0.1, 1.0))],
    "gemma3": [("rope", 10_000.0, 16, SPAN, None, None)] * 5 + [("rope", 1_000_000.0, 16, None, None, None)],
    "gemma4": [("rope", 10_000.0, 16, SPAN, None, None)] * 5
    + [("rope_proportional", 1_000_000.0, 16, None, None, None)],
    "command_a": [(*ROPE, 16, SPAN, None, None)] * 3 + [(*NOPE, 16, None, None, None)],
    "smollm3": [(*ROPE, 16, None, None, None)] * 3 + [(*NOPE, 16, None, None, None)],
    "partial_0.25": [(*ROPE, 4, None, None, None)],
    "partial_0.5": [(*ROPE, 8, None, None, None)],
    "qwen3_next": [("rope", 10_000_000.0, 4, None, None, None)],
}


def test_every_named_pattern_is_checked_here() -> None:
    assert sorted(EXPECTED) == sorted(PATTERNS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_named_pattern_builds_the_layers_its_model_ships(name: str) -> None:
    unit = EXPECTED[name]
    model = built(job({"method": "rope", "pattern": name}))
    assert layer_table(model) == [unit[index % len(unit)] for index in range(12)]
    if name == "gemma4":  # p-RoPE rotates a quarter of the pairs of the whole head: the rest have ω = 0
        params = model.blocks[5].pe.params  # type: ignore[union-attr]
        assert params.rotated_fraction == 0.25  # type: ignore[union-attr]


def test_a_written_unit_tiles_over_the_layers_and_inherits_the_entry() -> None:
    entry = {
        "method": "rope",
        "params": {"base": 500.0},
        "layers": [{"window": 3}, {"method": "alibi"}, {"rotary_fraction": 0.5, "params": {"base": 20.0}}],
    }
    model = built(job(entry, layers=5))
    assert [(row[0], row[1], row[2], row[3]) for row in layer_table(model)] == [
        ("rope", 500.0, 16, 3),
        ("alibi", None, 16, None),
        ("rope", 20.0, 8, None),
        ("rope", 500.0, 16, 3),
        ("alibi", None, 16, None),
    ]


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """softmax(q·kᵀ/√d over the visible keys)·v in float64: (B, H, T, d), ``visible`` (T, T) bool."""
    scores = torch.matmul(q.double(), k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    return torch.matmul(weights, v.double())


def visible_keys(length: int, window: int | None, chunk: int | None) -> torch.Tensor:
    """(T, T): query i sees key j iff j <= i, and i − j < w (window) or ⌊i/c⌋ = ⌊j/c⌋ (chunk); from the
    definitions, loop by loop."""
    visible = torch.zeros(length, length, dtype=torch.bool)
    for i in range(length):
        for j in range(i + 1):
            in_window = window is None or i - j < window
            in_chunk = chunk is None or i // chunk == j // chunk
            visible[i, j] = in_window and in_chunk
    return visible


@pytest.mark.parametrize(("window", "chunk"), [(1, None), (3, None), (5, None), (None, 4), (None, 1), (None, 32)])
def test_nope_with_a_window_or_chunk_equals_the_dense_masked_reference(window: int | None, chunk: int | None) -> None:
    applier = build_applier(
        get_method("nope"), get_method("nope").parse_params({}), Layer(2, 8, True, window=window, chunk=chunk)
    )
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 11, 8, generator=generator) for _ in range(3))  # (B, H, T, d)
    out, _ = applier.layer_attend(q, k, v)
    expected = reference_attention(q, k, v, visible_keys(11, window, chunk))
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "transformer_xl", "fox", "stick_breaking"])
@pytest.mark.parametrize(("window", "chunk"), [(4, None), (None, 3)])
def test_every_kind_with_a_span_equals_its_materialised_attention_under_the_span_mask(
    name: str, window: int | None, chunk: int | None
) -> None:
    """Each kind's span path (fused where it has one) against the method's own materialised attention given
    the reference mask, and the span changing the answer (a span that does nothing would pass the first)."""
    spec = get_method(name)
    params = spec.parse_params({})
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 12, 8, generator=generator) for _ in range(3))  # (B, H, T, d)
    x = torch.randn(2, 12, 16, generator=generator)  # (B, T, D_model)
    limited = build_applier(spec, params, Layer(2, 8, True, model_dim=16, window=window, chunk=chunk))
    full = build_applier(spec, params, Layer(2, 8, True, model_dim=16))
    out, _ = limited.layer_attend(q, k, v, x=x)
    pos = positions(12, torch.device("cpu"))
    mask = ~visible_keys(12, window, chunk)[None, None]  # (1, 1, T, T) True = masked
    reference = full.attend(q, k, v, q_pos=pos, k_pos=pos, mask=mask, x=x, embedded=True).output
    assert reference is not None
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    unlimited, _ = full.layer_attend(q, k, v, x=x)
    assert not torch.allclose(out, unlimited, atol=1e-4)


def test_llama4_temperature_scales_queries_only_from_floor_scale_on() -> None:
    """τ(n) = log(1 + ⌊(n + 1)/s⌋)·a + 1 is 1 while n + 1 < s: the logits there equal the model without the
    temperature, and later positions differ."""
    entry = {"method": "rope", "layers": [{"method": "nope", "temperature": {"floor_scale": 6, "attn_scale": 2.0}}]}
    with_temperature = built(job(entry, layers=1))
    without = built(job({"method": "rope", "layers": [{"method": "nope"}]}, layers=1))
    without.load_state_dict(with_temperature.state_dict())
    ids = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        a, b = with_temperature(ids), without(ids)
    torch.testing.assert_close(a[:, :5], b[:, :5])  # n + 1 < 6: τ = 1
    assert not torch.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize(
    ("entry", "layers", "loc", "words"),
    [
        ({"method": "rope", "pattern": "llama5"}, 12, ("pattern",), "unknown pattern"),
        ({"method": "rope", "pattern": "gemma3"}, 4, ("pattern",), "model.layers >= 6"),
        ({"method": "rope", "params": {"base": 500.0}, "pattern": "gemma3"}, 6, ("params", "base"), "sets ['base']"),
        ({"method": "alibi", "layers": [{"rotary_fraction": 0.5}]}, 2, ("layers", 0, "rotary_fraction"), "not rotary"),
        ({"method": "rope", "layers": [{"rotary_fraction": 0.01}]}, 2, ("layers", 0, "rotary_fraction"), "one pair"),
        ({"method": "rope", "layers": [{}, {"method": "sinusoidal"}]}, 2, ("layers", 1, "method"), "embeddings"),
        ({"method": "rope", "layers": [{"method": "tape"}]}, 2, ("layers", 0, "method"), "state"),
        ({"method": "rope", "layers": [{"params": {"base": -1}}]}, 2, ("layers", 0, "params", "base"), "greater"),
    ],
)
def test_what_a_pattern_cannot_honour_is_refused_naming_the_field(
    entry: dict[str, Any], layers: int, loc: tuple[Any, ...], words: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        validate_spec("benchmark", job(entry, layers=layers))
    assert raised.value.loc == ("body", "spec", "methods", 0, *loc)
    assert words in raised.value.msg


@pytest.mark.parametrize(
    "entry",
    [
        {"method": "rope", "pattern": "gemma3", "layers": [{}]},
        {"method": "rope", "layers": [{"window": 4, "chunk": 4}]},
        {"method": "rope", "layers": []},
        {"method": "rope", "layers": [{"window": 0}]},
        {"method": "rope", "label": "has space"},
    ],
)
def test_the_schema_refuses_malformed_patterns(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        job(entry)


def test_image_and_graph_jobs_refuse_patterns() -> None:
    spec = JobSpec.model_validate(
        {
            "methods": [{"method": "rope_2d_axial", "pattern": "partial_0.5"}],
            "data": {"task": "shapes"},
            "model": {"layers": 2, "dim": 32, "heads": 2},
        }
    )
    with pytest.raises(InvalidInput) as raised:
        validate_spec("benchmark", spec)
    assert raised.value.loc[-1] == "pattern"


# ------------------------------------------------------------------------------------------ from a real config
TRAIN_TOKENS = 2 * COPY_SIZE + 3
# each preset's layers as its published config has them (written out here from the config, not from posenc),
# at this job's scale: context lengths scaled to the training length, spans a quarter of it
FROM_CONFIG: dict[str, list[tuple[Any, ...]]] = {
    # Llama 3.1: rope_type llama3, θ 500,000, factor 8 over 8192 tokens: every layer the same
    "llama-3.1-8b": [("rope_llama3", 500_000.0, 16, None, None, None)],
    # Gemma 3: 5 sliding layers at rope_local_base_freq 10,000 : 1 global at 1,000,000 with its linear factor 8
    "gemma-3-4b": [("rope", 10_000.0, 16, SPAN, None, None)] * 5 + [("rope_linear", 1_000_000.0, 16, None, None, None)],
    # Llama 4 Scout: 3 chunked Llama 3-scaled layers : 1 NoPE layer with the query temperature (attn_scale 0.1)
    "llama-4-scout-17b-16e": [("rope_llama3", 500_000.0, 16, None, SPAN, None)] * 3
    + [(*NOPE, 16, None, None, (float(SPAN), 0.1, 1.0))],
    # SmolLM3: no_rope_layers every 4th layer, θ 5,000,000
    "smollm3-3b": [("rope", 5_000_000.0, 16, None, None, None)] * 3 + [(*NOPE, 16, None, None, None)],
}


@pytest.mark.parametrize("preset", sorted(FROM_CONFIG))
def test_a_config_builds_the_layers_its_model_ships_scaled_to_the_job(preset: str) -> None:
    unit = FROM_CONFIG[preset]
    table = layer_table(built(job({"config": preset})))
    assert table == [unit[index % len(unit)] for index in range(12)]


def test_a_config_s_context_lengths_follow_the_training_length_and_its_unit_is_the_shortest_period() -> None:
    spec = job({"config": "llama-3.1-8b"})
    family = family_of(spec)
    (layer,) = family.layer_unit(spec.methods[0])
    assert layer["params"]["original_max_position_embeddings"] == TRAIN_TOKENS  # 8192 in the config
    assert layer["params"]["factor"] == 8.0
    yarn = {
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "hidden_size": 256,
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},
    }
    (layer,) = family_of(job({"config": yarn})).layer_unit(job({"config": yarn}).methods[0])
    assert layer["params"]["original_max_position_embeddings"] == TRAIN_TOKENS
    assert layer["params"]["factor"] == 32.0  # YaRN's band edges sit at the same fraction of the context


def test_a_config_and_the_named_pattern_of_the_same_model_build_the_same_layers() -> None:
    from_config = layer_table(built(job({"config": "smollm3-3b"})))
    named = layer_table(built(job({"method": "rope", "params": {"base": 5_000_000.0}, "pattern": "smollm3"})))
    assert from_config == named


def test_a_config_entry_is_named_after_its_source_in_results() -> None:
    assert job({"config": "gemma-3-4b"}).methods[0].name == "config-gemma-3-4b"
    assert job({"config": {"model_type": "llama", "num_hidden_layers": 2}}).methods[0].name == "config-llama"
    assert job({"config": "gemma-3-4b", "label": "g3"}).methods[0].name == "g3"


@pytest.mark.parametrize(
    ("entry", "layers", "loc", "words"),
    [
        ({"config": "gemma-3-4"}, 12, ("config",), "did you mean 'gemma-3-4b'"),
        ({"config": "gemma-3-4b"}, 4, ("config",), "model.layers >= 6"),
        ({"config": "qwen2.5-vl-7b"}, 2, ("config", "method"), "3D positions"),
        (
            {"config": {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 64, "rope_theta": 1e-300}},
            2,
            ("config", "rope_theta"),
            "",
        ),
    ],
)
def test_what_a_config_cannot_give_a_tiny_model_is_refused_naming_the_field(
    entry: dict[str, Any], layers: int, loc: tuple[Any, ...], words: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        validate_spec("benchmark", job(entry, layers=layers))
    assert raised.value.loc == ("body", "spec", "methods", 0, *loc)
    assert words in raised.value.msg


def test_a_config_s_own_errors_name_the_key_inside_it() -> None:
    bad = {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 64, "rope_theta": -1}
    with pytest.raises(FieldErrors) as raised:
        validate_spec("benchmark", job({"config": bad}, layers=2))
    assert raised.value.errors[0]["loc"] == ("body", "spec", "methods", 0, "config", "rope_theta")


@pytest.mark.parametrize(
    "entry",
    [
        {"config": "llama-3.1-8b", "method": "rope"},
        {"config": "llama-3.1-8b", "params": {"base": 1.0}},
        {"config": "llama-3.1-8b", "pattern": "smollm3"},
        {"config": "x" * 129},  # a preset's name is short: a long string is refused before any look-up
        {},
    ],
)
def test_the_schema_refuses_a_config_with_a_method_of_its_own(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        job(entry)


def test_a_benchmark_s_result_names_the_source_config_and_every_layer_it_trained(tmp_path: Any) -> None:
    from posenc.training.hooks import NoHooks
    from posenc.training.jobs import run_job

    spec = job({"config": "gemma-3-4b"}, layers=6).model_copy(update={"seeds": [0]})
    spec = spec.model_copy(update={"train": spec.train.model_copy(update={"steps": 2})})
    result = run_job("benchmark", spec, job_dir=tmp_path, artifact_root=tmp_path, hooks=NoHooks())
    setup = result["setups"]["config-gemma-3-4b"]
    assert (setup["config"]["source"], setup["config"]["preset"], setup["config"]["unit"]) == ("gemma-3-4b", True, 6)
    assert [(layer["method"], layer["window"]) for layer in setup["layers"]] == [("rope", SPAN)] * 5 + [
        ("rope_linear", None)
    ]
    assert result["training_params"][0]["config"] == "gemma-3-4b"
    assert result["findings"]
