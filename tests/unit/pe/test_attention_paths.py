"""The attention path table (``posenc.pe.paths``): what it chooses, that every path gives the materialised
attention's output (and, where it trains, its gradients) for every 1D method over causal, windowed and chunked
layers, and that a model takes and records the path the table names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from posenc.pe import get_method, list_methods
from posenc.pe import paths as path_table
from posenc.pe.appliers import Applier, Layer, ScoreModApplier, build_applier, positions, span_mask
from posenc.pe.paths import DENSE_MASK_MAX_LENGTH, PATHS, attention_path
from posenc.schemas.methods import Kind
from posenc.training.model import ModelConfig, TinyTransformer, attention_paths_of

ONE_DIMENSIONAL = [spec.name for spec in list_methods() if spec.axes == 1 and spec.state_init is None]
REACHES: dict[str, dict[str, int]] = {"causal": {}, "window 5": {"window": 5}, "chunk 6": {"chunk": 6}}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize("span", [False, True])
@pytest.mark.parametrize("length", [128, DENSE_MASK_MAX_LENGTH, DENSE_MASK_MAX_LENGTH + 1, 1 << 20])
def test_every_layer_has_a_path(device: str, kind: Kind, span: bool, length: int) -> None:
    path = attention_path(kind, device, length, span=span)
    assert path in PATHS
    if device == "cpu":
        assert path != "flex"  # no FlexAttention backward on the CPU
    if kind is Kind.ATTENTION:
        assert path == "materialised"  # the method returns the weights


def test_what_the_measurements_chose() -> None:
    assert attention_path(Kind.ROTARY, "cuda", 1024, span=False) == "sdpa_causal"
    assert attention_path(Kind.BIAS, "cuda", 1024, span=False) == "sdpa_mask"  # flex measured 2.0-4.2x slower
    assert attention_path(Kind.BIAS, "cuda", DENSE_MASK_MAX_LENGTH + 1, span=False) == "flex"  # no (H, T, T)
    assert attention_path(Kind.ROTARY, "cuda", 8192, span=True) == "flex"  # a window's block mask
    assert attention_path(Kind.SCORE_MOD, "cuda", 1024, span=False) == "sdpa_mask"  # flex measured 1.3-2.4x
    assert attention_path(Kind.SCORE_MOD, "cpu", 128, span=False) == "materialised"  # SDPA measured 1.2-1.4x
    assert attention_path(Kind.SCORE_MOD, "cuda", 1024, span=False, additive=False) == "materialised"  # Shaw


def test_a_value_term_keeps_a_method_materialised() -> None:
    shaw = get_method("shaw")
    assert shaw.value_term
    applier = build_applier(shaw, shaw.parse_params({}), _layer())
    assert applier.training_path(1024, torch.device("cuda")) == "materialised"


def _layer(**overrides: Any) -> Layer:
    values: dict[str, Any] = {"num_heads": 2, "head_dim": 8, "causal": True, "model_dim": 16}
    values.update(overrides)
    return Layer(**values)


def _inputs(requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 16, 8, generator=generator) for _ in range(3))  # (B, H, T, d)
    x = torch.randn(2, 16, 16, generator=generator)  # (B, T, D_model)
    for tensor in (q, k, v):
        tensor.requires_grad_(requires_grad)
    return q, k, v, x


def _materialised(applier: Applier, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> Any:
    pos = positions(q.shape[-2], q.device)
    if applier.spec.kind is Kind.ABSOLUTE:  # P is added to the tokens before q and k exist: compare on them
        applier = Applier(applier.spec, applier.params, applier.layer)
    out = applier.attend(q, k, v, q_pos=pos, k_pos=pos, mask=span_mask(applier.layer, pos, pos), x=x).output
    assert out is not None
    return out


def _paths(applier: Applier) -> dict[str, Callable[..., Any]]:
    """Each path this method can take, as a call (q, k, v, x) -> output."""
    plain = applier.spec.kind in (Kind.ABSOLUTE, Kind.ROTARY)
    spans = applier.layer.limited_span
    found: dict[str, Callable[..., Any]] = {
        "routed": lambda q, k, v, x: (applier.span_attend if spans else applier.fast_attend)(q, k, v, x=x)
    }
    if type(applier) is ScoreModApplier and not applier.spec.value_term:
        found["sdpa_mask"] = applier.dense_term_attend
    if plain or applier.spec.kind is Kind.BIAS or (found.get("sdpa_mask") is not None):
        found["flex"] = lambda q, k, v, x: applier.flex_attend(q, k, v, x=x)
    return found


@pytest.mark.parametrize("reach", list(REACHES))
@pytest.mark.parametrize("name", ONE_DIMENSIONAL)
def test_every_path_gives_the_materialised_output(
    name: str, reach: str, example_params: Callable[..., dict[str, Any]]
) -> None:
    spec = get_method(name)
    applier = build_applier(spec, spec.parse_params(example_params(name)), _layer(**REACHES[reach]))
    q, k, v, x = _inputs()
    with torch.no_grad():
        reference = _materialised(applier, q, k, v, x)
        for path, call in _paths(applier).items():
            out = call(q, k, v, x)
            assert out is not None, path
            torch.testing.assert_close(out, reference, atol=3e-5, rtol=1e-5, msg=lambda m, p=path: f"{p}: {m}")


CONTENT = [  # Shaw's value term has no dense-mask form: its layers stay materialised (tested above)
    spec.name for spec in list_methods() if spec.kind is Kind.SCORE_MOD and spec.axes == 1 and not spec.value_term
]


@pytest.mark.parametrize("reach", ["causal", "window 5"])
@pytest.mark.parametrize("name", CONTENT)
def test_the_dense_term_path_trains_as_the_materialised_one(
    name: str, reach: str, example_params: Callable[..., dict[str, Any]]
) -> None:
    """The path CUDA takes for content methods, its gradients against the materialised path's, on the CPU."""
    spec = get_method(name)
    applier = build_applier(spec, spec.parse_params(example_params(name)), _layer(**REACHES[reach]))
    grads = []
    for attend in (applier.dense_term_attend, lambda q, k, v, x: _materialised(applier, q, k, v, x)):
        q, k, v, x = _inputs(requires_grad=True)
        attend(q, k, v, x).square().sum().backward()
        grads.append([tensor.grad for tensor in (q, k, v)])
    for dense, reference in zip(*grads, strict=True):
        torch.testing.assert_close(dense, reference, atol=5e-5, rtol=1e-4)


def test_a_model_takes_and_records_the_path_the_table_names(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ModelConfig(vocab_size=16, layers=2, dim=16, heads=2, method="fox", train_length=12)
    model = TinyTransformer(config, 0)
    ids = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(0))
    assert attention_paths_of(model, "cpu") == ["materialised", "materialised"]
    taken: list[str] = []
    original = ScoreModApplier.dense_term_attend

    def spy(self: ScoreModApplier, *args: Any) -> torch.Tensor:
        taken.append(self.spec.name)
        return original(self, *args)

    monkeypatch.setattr(ScoreModApplier, "dense_term_attend", spy)
    eager = model(ids)
    assert taken == []
    rows = tuple(
        path_table.PathRow("cpu", frozenset({Kind.SCORE_MOD}), "any", None, "sdpa_mask", "a test's")
        if row.device == "cpu" and Kind.SCORE_MOD in row.kinds
        else row
        for row in path_table.PATH_TABLE
    )
    monkeypatch.setattr(path_table, "PATH_TABLE", rows)
    assert attention_paths_of(model, "cpu") == ["sdpa_mask", "sdpa_mask"]
    dense = model(ids)
    assert taken == ["fox", "fox"]
    torch.testing.assert_close(dense, eager, atol=3e-5, rtol=1e-5)
