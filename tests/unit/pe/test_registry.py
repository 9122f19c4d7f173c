"""The registry holds exactly the public method names of the issues so far, each fully described."""

from __future__ import annotations

import pydantic
import pytest

import posenc.pe as pe
from posenc.pe.registry import MethodParams, register
from posenc.schemas.methods import Kind, MethodInfo

PUBLIC_NAMES = {
    Kind.ABSOLUTE: {
        "sinusoidal",
        "nope",
        "learned_absolute",
        "axial",
        "sinusoidal_2d",
        "sinusoidal_3d",
        "vit_learned",
        "laplacian_pe",
        "graphormer_centrality",
    },
    Kind.BIAS: {"alibi", "alibi_2d", "t5", "kerple_log", "kerple_power", "sandwich", "fire", "swin", "graphormer"},
    Kind.ROTARY: {
        "rope",
        "rope_linear",
        "rope_ntk",
        "rope_dynamic_ntk",
        "rope_yarn",
        "rope_longrope",
        "rope_llama3",
        "xpos",
        "rope_2d_axial",
        "rope_mixed",
        "liere",
        "comrope",
        "rope_proportional",
        "rope_ntk_alpha",
        "fope",
        "mrope",
        "rope_nd",
    },
    Kind.SCORE_MOD: {"shaw", "transformer_xl", "tener", "huang", "cape", "fox", "cope", "tape"},
    Kind.ATTENTION: {"stick_breaking", "da_transformer"},
}
LEARNED = (
    {"learned_absolute", "axial", "t5", "kerple_log", "kerple_power", "fire"}
    | {
        "shaw",
        "transformer_xl",
        "tener",
        "huang",
        "cape",
        "fox",
        "cope",
        "tape",
        "da_transformer",
    }
    | {"vit_learned", "swin", "rope_mixed", "liere", "comrope", "graphormer", "graphormer_centrality"}
)


@pytest.mark.parametrize("kind", list(PUBLIC_NAMES))
def test_each_kind_has_exactly_the_public_names(kind: Kind) -> None:
    assert {spec.name for spec in pe.list_methods(kind)} == PUBLIC_NAMES[kind]


def test_declared_kinds_exist_for_later_methods() -> None:
    assert {k.value for k in Kind} == {"absolute", "bias", "rotary", "score_mod", "attention"}


@pytest.mark.parametrize("spec", pe.list_methods(), ids=lambda s: s.name)
def test_every_method_is_fully_described(spec: pe.MethodSpec) -> None:
    info = MethodInfo.model_validate(spec.info().model_dump())
    assert info.summary, "the docstring's first line is the summary"
    assert "http" in spec.paper, "the paper entry carries a URL"
    assert spec.conventions, "conventions papers disagree on are stated"
    assert spec.learned == (spec.name in LEARNED)
    assert spec.params_model.model_config.get("extra") == "forbid"
    # every field either has the paper's default or is required (no silent None for a needed value)
    required = [name for name, f in spec.params_model.model_fields.items() if f.is_required()]
    if not required:
        spec.parse_params({})
    schema = spec.params_model.model_json_schema()
    assert sorted(schema.get("required", [])) == sorted(required)
    # unknown keys are refused, naming the key
    with pytest.raises(pydantic.ValidationError, match="no_such_parameter"):
        spec.parse_params({"no_such_parameter": 1})
    if spec.learned:
        assert spec.learned_init is not None, "learned methods can be trained (registry learned_init hook)"
        # a random initialisation is drawn from params.seed (DA-Transformer's is a constant: no seed to take)
        assert "seed" in spec.params_model.model_fields or spec.name == "da_transformer"


def test_toeplitz_flag_only_on_bias_methods() -> None:
    for spec in pe.list_methods():
        assert not spec.toeplitz or spec.kind is Kind.BIAS


def test_duplicate_registration_is_refused() -> None:
    class P(MethodParams):
        pass

    def alibi(params: P) -> None:
        """A second alibi."""

    with pytest.raises(ValueError, match="already registered"):
        register("alibi", kind=Kind.BIAS, params=P, paper="x https://example.org")(alibi)


def test_unknown_method_is_a_keyerror_with_a_useful_message() -> None:
    with pytest.raises(pe.UnknownMethodError, match="unknown method 'nope_nope'"):
        pe.get_method("nope_nope")
