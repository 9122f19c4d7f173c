"""The appliers (posenc.pe.appliers): one per kind, the fused training path equal to the materialised one, errors
named relative to the method's own inputs, and no kind branching outside posenc.pe."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.errors import InvalidInput, located
from posenc.pe import get_method, list_methods
from posenc.pe.appliers import (
    AbsoluteApplier,
    Applier,
    AttentionApplier,
    BiasApplier,
    Layer,
    RotaryApplier,
    ScoreModApplier,
    build_applier,
    future_mask,
    grid_positions,
    positions,
)
from posenc.pe.kinds import apply_rotary
from posenc.pe.types import LayerInputs
from posenc.schemas.methods import Kind

REPO = Path(__file__).resolve().parents[3]
ONE_DIMENSIONAL = [spec.name for spec in list_methods() if spec.axes == 1]


def _layer(**overrides: object) -> Layer:
    values: dict[str, object] = {"num_heads": 2, "head_dim": 8, "causal": True, "model_dim": 16}
    values.update(overrides)
    return Layer(**values)  # type: ignore[arg-type]


def test_every_kind_has_its_applier(example_params: Callable[..., dict[str, Any]]) -> None:
    expected: dict[Kind, type[Applier]] = {
        Kind.ABSOLUTE: AbsoluteApplier,
        Kind.BIAS: BiasApplier,
        Kind.ROTARY: RotaryApplier,
        Kind.SCORE_MOD: ScoreModApplier,
        Kind.ATTENTION: AttentionApplier,
    }
    for spec in list_methods():
        applier = build_applier(spec, spec.parse_params(example_params(spec.name)), _layer())
        assert type(applier) is expected[spec.kind], spec.name


@pytest.mark.parametrize("name", ONE_DIMENSIONAL)
def test_the_fused_training_path_equals_the_materialised_attention(
    name: str, example_params: Callable[..., dict[str, Any]]
) -> None:
    """fast_attend (scaled_dot_product_attention for absolute, bias and rotary kinds) against attend."""
    spec = get_method(name)
    applier = build_applier(spec, spec.parse_params(example_params(name)), _layer())
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 11, 8, generator=generator) for _ in range(3))  # (B, H, T, d)
    x = torch.randn(2, 11, 16, generator=generator)  # (B, T, D_model)
    pos = positions(11, torch.device("cpu"))
    # an absolute method enters through the embedding, before q and k exist: compare on embedded inputs
    embedded_q, embedded_k = applier.embed(q, pos), applier.embed(k, pos)
    fused = applier.fast_attend(embedded_q, embedded_k, v, x=x)
    plain = Applier(spec, applier.params, applier.layer) if spec.kind is Kind.ABSOLUTE else applier
    reference = plain.attend(embedded_q, embedded_k, v, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos), x=x)
    assert reference.output is not None
    torch.testing.assert_close(fused, reference.output, atol=2e-5, rtol=1e-5)


GRID_METHODS = [spec.name for spec in list_methods() if spec.axes == 2]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", [*GRID_METHODS, "rope", "alibi", "nope"])
def test_the_positional_path_equals_the_materialised_attention_on_a_grid_with_a_cls_token(
    name: str, causal: bool, example_params: Callable[..., dict[str, Any]]
) -> None:
    """layer_attend at grid positions (the ViT's call: SDPA for absolute, bias and rotary kinds) against attend
    with the same positions, the CLS token at −1; 1D methods take raster indices."""
    spec = get_method(name)
    applier = build_applier(spec, spec.parse_params(example_params(name)), _layer(causal=causal, head_dim=16))
    pos = grid_positions((3, 4), 1)  # (13, 2): CLS then a 3 x 4 grid
    if spec.axes == 1:
        pos = grid_positions((12,), 1)[:, 0]  # (13,): CLS at −1, then raster indices
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 13, 16, generator=generator) for _ in range(3))  # (B, H, N, d)
    fused, state = applier.layer_attend(q, k, v, pos=pos)
    assert state is None
    index = positions(13, torch.device("cpu"))
    mask = future_mask(index, index) if causal else torch.zeros(1, 1, 13, 13, dtype=torch.bool)
    reference = applier.attend(q, k, v, q_pos=pos, k_pos=pos, mask=mask, embedded=True)
    assert reference.output is not None
    torch.testing.assert_close(fused, reference.output, atol=2e-5, rtol=1e-5)


def test_rotary_odd_head_dim_is_named_relative_to_the_inputs_and_callers_add_their_prefix() -> None:
    spec = get_method("rope")
    applier = build_applier(spec, spec.parse_params({}), _layer(head_dim=7))
    with pytest.raises(InvalidInput) as plain:
        applier.check()
    assert plain.value.loc == ("q", "shape")
    with pytest.raises(InvalidInput) as prefixed, located(("body",)):
        applier.check()
    assert prefixed.value.loc == ("body", "q", "shape")


def test_causal_only_methods_refuse_bidirectional_layers(example_params: Callable[..., dict[str, Any]]) -> None:
    causal_only = [spec for spec in list_methods() if spec.causal_only]
    for spec in causal_only:
        with pytest.raises(InvalidInput, match="causal attention only") as refused:
            build_applier(spec, spec.parse_params(example_params(spec.name)), _layer(causal=False)).check()
        assert refused.value.loc == ("causal",)


def test_no_code_outside_posenc_pe_branches_on_a_methods_kind() -> None:
    """The design rule: only posenc.pe looks at a method's kind to decide what to do."""
    branching = re.compile(r"\.kind\s+(is|==|!=|is not|in|not in)\b|Kind\.(ABSOLUTE|BIAS|ROTARY|SCORE_MOD|ATTENTION)")
    offenders = []
    for folder in ("posenc", "service", "workers", "clients/python/src"):
        for path in (REPO / folder).rglob("*.py"):
            relative = path.relative_to(REPO).as_posix()
            if relative.startswith(("posenc/pe/", "posenc/schemas/")):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if branching.search(line):
                    offenders.append(f"{relative}:{number}: {line.strip()}")
    # the compute routes name the kinds they serve (a bias table exists for bias methods only): a declaration
    allowed = re.compile(r"resolve_method\([\w.]+, Kind\.")
    assert [line for line in offenders if not allowed.search(line)] == []


# Method names written as string literals outside posenc.pe, by file: each a known use or data (a named pattern's
# layers, a config's rope_type value). The real-model modules name none: their per-method facts are registry fields.
# A new literal fails the test below: put the fact in the method's @register instead.
METHOD_NAME_LITERALS = {
    "posenc/real_models/presets.py": {"mrope"},  # a config's rope_type value (Qwen2-VL's v4 spelling), not a method
    "posenc/real_models/model_types.py": {"mrope"},  # the rope_type value Qwen2-VL's config classes rename
    "posenc/patterns.py": {"nope", "rope_proportional"},  # the named patterns' layers: what those models ship
    "posenc/schemas/jobs.py": {"rope"},  # a context-extension study's default base model
    "posenc/tasks/suites.py": {"nope"},  # a placeholder entry to read a spec's defaults
    "posenc/training/model.py": {"nope"},  # a layer pattern's shared instance: nothing on the embeddings
}


def test_no_code_outside_posenc_pe_names_a_method_or_imports_a_method_module() -> None:
    """Per-method facts live in the registry: code outside posenc.pe neither compares against method names
    (beyond the known uses above) nor imports a method's module (posenc.pe.<family>)."""
    import ast

    names = {spec.name for spec in list_methods()}
    families = {spec.family for spec in list_methods()}
    found: dict[str, set[str]] = {}
    imports = []
    for path in sorted((REPO / "posenc").rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith("posenc/pe/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.setdefault(relative, set()).add(node.value)
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if module.startswith("posenc.pe.") and module.split(".")[2] in families:
                imports.append(f"{relative}:{node.lineno}: from {module} import ...")
    unexpected = {file: sorted(used - METHOD_NAME_LITERALS.get(file, set())) for file, used in found.items()}
    assert {file: used for file, used in unexpected.items() if used} == {}
    assert imports == []


FLEX_METHODS = [spec.name for spec in list_methods() if spec.axes == 1 and spec.kind in (Kind.BIAS, Kind.SCORE_MOD)]


@pytest.mark.parametrize("name", FLEX_METHODS)
def test_flex_attention_equals_the_materialised_attention(
    name: str, example_params: Callable[..., dict[str, Any]]
) -> None:
    """FlexAttention (the method's score term as score_mod, causality as the block mask), forward on the CPU:
    this torch has no FlexAttention backward there, so training on the CPU takes the other paths."""
    spec = get_method(name)
    applier = build_applier(spec, spec.parse_params(example_params(name)), _layer())
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 16, 8, generator=generator) for _ in range(3))  # (B, H, T, d)
    x = torch.randn(2, 16, 16, generator=generator)  # (B, T, D_model)
    pos = positions(16, torch.device("cpu"))
    with torch.no_grad():
        flex = applier.flex_attend(q, k, v, x=x)
        reference = applier.attend(q, k, v, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos), x=x).output
    if flex is None:  # a value-side term (Shaw) has no score_mod form
        assert spec.kind is Kind.SCORE_MOD
        return
    assert reference is not None
    torch.testing.assert_close(flex, reference, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["shaw", "cape"])
def test_methods_with_large_intermediates_count_them_in_the_workspace(name: str) -> None:
    """The gateway budgets what a method materialises: Shaw's gathered (Nq, Nk, d) value table and CAPE's MLP over
    every (i, j) are more than the two (B, H, Nq, Nk) maps every content method is charged."""
    spec = get_method(name)
    applier = build_applier(spec, spec.parse_params({}), _layer(head_dim=64))
    maps = 2 * 1 * 2 * 64 * 64
    plain = build_applier(get_method("fox"), get_method("fox").parse_params({}), _layer(head_dim=64))
    assert plain.extra_workspace_elements(1, 64, 64) == maps
    assert applier.extra_workspace_elements(1, 64, 64) >= maps + 64 * 64 * 32


LEARNED_CONTENT_METHODS = [
    spec.name for spec in list_methods() if spec.kind in (Kind.SCORE_MOD, Kind.ATTENTION) and spec.learned
]


@pytest.mark.parametrize("name", LEARNED_CONTENT_METHODS)
def test_a_model_moved_after_it_was_built_computes_where_its_inputs_are(
    name: str, example_params: Callable[..., dict[str, Any]]
) -> None:
    """Jobs build the model on the CPU and then ``model.to(device)``; the layer still says CPU. The learned
    tables must be used where the inputs are, not copied back to the layer's device (on CUDA that was a
    device-mismatch error in every Shaw, TENER, Transformer-XL and CAPE job, found by bench/gpu_check.py).
    The meta device stands in for CUDA: a meta tensor cannot be copied to the CPU, so such a copy raises."""
    from posenc.training.model import PositionalEncoding

    encoding = PositionalEncoding(name, example_params(name), _layer(), init_tokens=16).to("meta")
    assert encoding.learned, f"{name} has no learned tensors to move"
    applier = encoding.applier()
    meta = torch.device("meta")
    q, k = (torch.empty(2, 2, 16, 8, device=meta) for _ in range(2))  # (B, H, T, d)
    x = torch.empty(2, 16, 16, device=meta)  # (B, T, D_model)
    pos = positions(16, torch.device("cpu"))  # the offsets are read as integers: kept where they can be
    inputs = LayerInputs(q=q, k=k, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos).to(meta), x=x)
    if isinstance(applier, ScoreModApplier):
        logits = applier.score_terms(inputs, 1.0 / 8**0.5).logits
    else:
        assert isinstance(applier, AttentionApplier)
        logits = applier.normalise(torch.empty(2, 2, 16, 16, device=meta), inputs).weights
    assert logits.device == meta


def test_a_rotary_request_computes_its_frequencies_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """q, k, their tables and the attention scale of one ``/v1/rotary`` request read one computation of the
    method's frequencies (they were computed six times); a learned method's are recomputed on every call."""
    import posenc.pe.appliers as appliers
    from posenc.compute import prepare_rotary
    from posenc.schemas.compute import RotaryRequest

    calls: list[str] = []
    real = appliers.rotary_frequencies

    def counting(spec: Any, params: Any, ctx: Any) -> Any:
        calls.append(spec.name)
        return real(spec, params, ctx)

    monkeypatch.setattr(appliers, "rotary_frequencies", counting)
    shape = [1, 2, 16, 128]  # 64 pairs: the M-RoPE and N-d defaults' sections fit
    given = {"factor": 4.0, "original_max_position_embeddings": 8, "max_position_embeddings": 32, "alpha": 2.0,
             "train_length": 8, "short_factor": [1.0] * 64, "long_factor": [2.0] * 64}  # fmt: skip
    counted: dict[str, int] = {}
    for spec in list_methods():
        if spec.kind is not Kind.ROTARY or spec.learned:
            continue
        required = {name: given[name] for name, field in spec.params_model.model_fields.items() if field.is_required()}
        for grid in (None, [4, 4], [2, 2, 4]):  # one axis, or the grid a multi-axis method rotates over
            body = {"method": spec.name, "params": required, "grid": grid,
                    "q": {"random": {"shape": shape}}, "k": {"random": {"shape": shape}}}  # fmt: skip
            calls.clear()
            try:
                prepare_rotary(RotaryRequest.model_validate(body)).run()
            except InvalidInput:
                continue  # the wrong number of axes for this method
            counted[spec.name] = len(calls)
            break
    assert set(counted) == {s.name for s in list_methods() if s.kind is Kind.ROTARY and not s.learned}
    assert all(count == 1 for count in counted.values()), counted


def test_a_training_layer_rotates_bf16_inputs_in_bf16_with_rounded_tables() -> None:
    """Under bf16 autocast q and k arrive in bf16: they are rotated in it, the float32 tables rounded to it (as
    transformers' Llama does), not cast up to float32 and back; float32 inputs keep float32 tables."""
    spec = get_method("xpos")  # a scale too: the keys take its reciprocal
    applier = build_applier(spec, spec.parse_params({}), _layer(head_dim=16), cache={})
    generator = torch.Generator().manual_seed(4)
    q, k = (torch.randn(2, 2, 12, 16, generator=generator) for _ in range(2))  # (B, H, T, d)
    exact = applier.rotate_cached(q, k)
    rounded = applier.rotate_cached(q.bfloat16(), k.bfloat16())
    assert [t.dtype for t in rounded] == [torch.bfloat16, torch.bfloat16]
    cos, sin, scale = applier.tables(positions(12, torch.device("cpu")), 12)[:3]
    assert scale is not None
    # xPos's scale folded into the tables, then rounded: cos·ζ and sin·ζ for the queries
    folded = ((cos * scale).bfloat16(), (sin * scale).bfloat16())
    expected_q = apply_rotary(q.bfloat16(), *folded, pairing="half")
    torch.testing.assert_close(rounded[0], expected_q, rtol=0, atol=0)
    for got, reference in zip(rounded, exact, strict=True):
        torch.testing.assert_close(got.float(), reference, rtol=0.05, atol=0.05)  # bf16 keeps 8 bits
    assert {key[-1] for key in applier._cache if key[0] == "rotary"} == {None, torch.bfloat16}  # type: ignore[union-attr]
