"""Properties every registered bias method must have, whatever its formula.

Parametrised over ``list_methods(kind="bias")`` so that a method registered later is covered without
editing this file. A method whose defaults cannot run on an arbitrary (Nq, Nk) gets its generic params
in ``GENERIC_PARAMS``.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import BiasContext, MethodSpec, bias_dense, bias_toeplitz, list_methods, toeplitz_to_dense
from posenc.schemas.tensors import TensorData

# alibi_2d's default (a square grid of side sqrt(Nk)) changes with the key length; fix the grid instead.
GENERIC_PARAMS: dict[str, dict[str, Any]] = {"alibi_2d": {"grid_width": 4}}

# Methods of token positions: the 1D ones, and alibi_2d, which reads 1D positions as a row-major grid's token
# indices. Grid (swin) and graph (graphormer) methods have their own properties in their own tests.
BIAS_METHODS = [spec for spec in list_methods(kind="bias") if spec.axes == 1 or spec.name in GENERIC_PARAMS]
TOEPLITZ_METHODS = [spec for spec in BIAS_METHODS if spec.toeplitz]
DENSE_ONLY_METHODS = [spec for spec in BIAS_METHODS if not spec.toeplitz]
LEARNED_METHODS = [spec for spec in BIAS_METHODS if spec.learned]
SHAPES = [(6, 6), (3, 7), (7, 3), (1, 5)]


def _ids(specs: list[MethodSpec]) -> list[str]:
    return [spec.name for spec in specs]


def _params(spec: MethodSpec, **overrides: Any) -> Any:
    return spec.parse_params({**GENERIC_PARAMS.get(spec.name, {}), **overrides})


def _ctx(heads: int, nq: int, nk: int, causal: bool, dtype: torch.dtype = torch.float32) -> BiasContext:
    return BiasContext(num_heads=heads, query_length=nq, key_length=nk, causal=causal, dtype=dtype)


def test_the_bias_catalogue_is_not_empty() -> None:
    names = {spec.name for spec in BIAS_METHODS}
    assert {"alibi", "alibi_2d", "t5", "kerple_log", "kerple_power", "sandwich", "fire"} <= names


@pytest.mark.parametrize("spec", TOEPLITZ_METHODS, ids=_ids(TOEPLITZ_METHODS))
@pytest.mark.parametrize(("nq", "nk"), SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_toeplitz_table_expands_to_the_dense_bias(spec: MethodSpec, nq: int, nk: int, causal: bool) -> None:
    ctx = _ctx(3, nq, nk, causal)
    params = _params(spec)
    table = bias_toeplitz(spec, params, ctx)
    assert table.shape == (3, nq + nk - 1)
    assert torch.equal(toeplitz_to_dense(table, nq, nk), bias_dense(spec, params, ctx))


@pytest.mark.parametrize("spec", DENSE_ONLY_METHODS, ids=_ids(DENSE_ONLY_METHODS))
def test_methods_not_toeplitz_refuse_the_table_form(spec: MethodSpec) -> None:
    with pytest.raises(InvalidInput) as info:
        bias_toeplitz(spec, _params(spec), _ctx(2, 4, 4, causal=True))
    assert info.value.loc == ("form",)


@pytest.mark.parametrize("spec", BIAS_METHODS, ids=_ids(BIAS_METHODS))
@pytest.mark.parametrize("nq", [6, 9])
def test_causal_rows_ignore_future_keys(spec: MethodSpec, nq: int) -> None:
    params = _params(spec)
    short = bias_dense(spec, params, _ctx(4, nq, 6, causal=True))
    longer = bias_dense(spec, params, _ctx(4, nq, 11, causal=True))
    future = torch.arange(6)[None, :] > torch.arange(nq)[:, None]  # (Nq, 6)
    assert bool(torch.isneginf(short[:, future]).all())
    assert bool(torch.isfinite(short[:, ~future]).all())
    # the extra keys are all in the future of every query that sees them: nothing visible changes
    assert torch.equal(longer[:, :, :6], short)
    assert bool(torch.isneginf(longer[:, :, 6:][:, torch.arange(5)[None, :] + 6 > torch.arange(nq)[:, None]]).all())


@pytest.mark.parametrize("spec", BIAS_METHODS, ids=_ids(BIAS_METHODS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("nq", "nk"), SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_shape_and_dtype(spec: MethodSpec, dtype: torch.dtype, nq: int, nk: int, causal: bool) -> None:
    bias = bias_dense(spec, _params(spec), _ctx(5, nq, nk, causal, dtype))
    assert bias.shape == (5, nq, nk)
    assert bias.dtype == dtype
    if not causal:
        assert bool(torch.isfinite(bias).all())


@pytest.mark.parametrize("spec", BIAS_METHODS, ids=_ids(BIAS_METHODS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_is_the_float32_bias_rounded_once(spec: MethodSpec, dtype: torch.dtype) -> None:
    # Distances past 256 are where bf16 stops holding integers.
    params = _params(spec)
    low = bias_dense(spec, params, _ctx(12, 300, 300, causal=False, dtype=dtype))
    full = bias_dense(spec, params, _ctx(12, 300, 300, causal=False, dtype=torch.float32))
    assert low.dtype == dtype
    assert torch.equal(low, full.to(dtype))


@pytest.mark.parametrize("spec", BIAS_METHODS, ids=_ids(BIAS_METHODS))
def test_float32_agrees_with_float64(spec: MethodSpec) -> None:
    params = _params(spec)
    single = bias_dense(spec, params, _ctx(4, 40, 50, causal=False, dtype=torch.float32))
    double = bias_dense(spec, params, _ctx(4, 40, 50, causal=False, dtype=torch.float64))
    torch.testing.assert_close(single.double(), double, rtol=1e-5, atol=1e-5)


# -------------------------------------------------------------------------------------------- learned
def _accepts_tensor_data(annotation: Any) -> bool:
    """Whether a params field's annotation admits an inline TensorData (else it is a plain list)."""
    if annotation is TensorData:
        return True
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return any(_accepts_tensor_data(arg) for arg in typing.get_args(annotation))
    return False


def _wire_value(spec: MethodSpec, field: str, tensor: torch.Tensor) -> Any:
    """How a client would send the tensor back: inline TensorData, or a plain list of floats."""
    annotation = spec.params_model.model_fields[field].annotation
    if _accepts_tensor_data(annotation):
        return {"dtype": "float32", "shape": list(tensor.shape), "data": tensor.reshape(-1).tolist()}
    return tensor.tolist()


@pytest.mark.parametrize("spec", LEARNED_METHODS, ids=_ids(LEARNED_METHODS))
def test_learned_methods_declare_their_initial_values(spec: MethodSpec) -> None:
    assert spec.learned_init is not None, "a learned method registers learned_init (see MethodSpec)"
    initial = spec.learned_init(_params(spec), _ctx(3, 4, 4, causal=True))
    assert initial
    for field, tensor in initial.items():
        assert field in spec.params_model.model_fields
        assert isinstance(tensor, torch.Tensor)
        assert bool(torch.isfinite(tensor).all())


@pytest.mark.parametrize("spec", LEARNED_METHODS, ids=_ids(LEARNED_METHODS))
def test_same_seed_same_bias_other_seed_other_bias(spec: MethodSpec) -> None:
    ctx = _ctx(3, 7, 7, causal=False)
    first = bias_dense(spec, _params(spec, seed=7), ctx)
    again = bias_dense(spec, _params(spec, seed=7), ctx)
    other = bias_dense(spec, _params(spec, seed=8), ctx)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


@pytest.mark.parametrize("spec", LEARNED_METHODS, ids=_ids(LEARNED_METHODS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_seeded_values_passed_back_reproduce_the_seeded_bias(spec: MethodSpec, dtype: torch.dtype) -> None:
    ctx = _ctx(3, 7, 5, causal=False, dtype=dtype)
    seeded_params = _params(spec, seed=11)
    seeded = bias_dense(spec, seeded_params, ctx)
    assert spec.learned_init is not None
    initial = spec.learned_init(seeded_params, ctx)
    # through the wire, as a client would send them (a different seed proves the values are used)
    wire = {field: _wire_value(spec, field, tensor) for field, tensor in initial.items()}
    supplied = bias_dense(spec, _params(spec, seed=12, **wire), ctx)
    assert torch.equal(supplied, seeded)
    # as training passes them (torch tensors substituted into the params, see MethodSpec.learned_init)
    substituted = _params(spec, seed=12).model_copy(update=initial)
    assert torch.equal(bias_dense(spec, substituted, ctx), seeded)
