"""The registry holds exactly the public method names of the issues so far, each fully described."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
import torch

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


def test_the_config_spellings_live_in_the_registry_and_the_config_resolver_reads_them_from_there() -> None:
    from posenc.real_models.configs import ROPE_TYPE_METHODS, method_keys

    # Hugging Face's rope_type values, each naming the method transformers' ROPE_INIT_FUNCTIONS runs for it
    assert ROPE_TYPE_METHODS == {
        "default": "rope", "mrope": "rope", "linear": "rope_linear", "dynamic": "rope_dynamic_ntk",
        "yarn": "rope_yarn", "deepseek_yarn": "rope_yarn", "longrope": "rope_longrope", "su": "rope_longrope",
        "llama3": "rope_llama3", "proportional": "rope_proportional",
    }  # fmt: skip
    for spec in pe.list_methods():
        assert set(spec.config_keys) <= set(spec.params_model.model_fields), spec.name
        assert method_keys(spec.name) == spec.config_keys
    assert method_keys("rope_llama3") == ("factor", "low_freq_factor", "high_freq_factor",
                                          "original_max_position_embeddings")  # fmt: skip


def test_a_registration_with_a_config_key_that_is_no_param_or_a_taken_spelling_is_refused() -> None:
    class P(MethodParams):
        factor: float = 1.0

    def fn(params: P, ctx: object) -> None:
        """A stand-in: refused before it is registered."""

    with pytest.raises(ValueError, match="not params"):
        register("test_config_keys", kind=Kind.ROTARY, params=P, paper="x", config_keys=("beta",))(fn)
    with pytest.raises(ValueError, match="already names 'rope_yarn'"):
        register("test_config_spelling", kind=Kind.ROTARY, params=P, paper="x", config_spellings=("yarn",))(fn)
    assert "test_config_keys" not in {spec.name for spec in pe.list_methods()}


def test_the_length_dependent_flag_is_what_the_frequencies_do(example_params: Any) -> None:
    """The config doctor's stale-cache warning reads the registry's flag; each config-nameable method's flag
    agrees with its frequencies at half its original length and at 16 times it."""
    from posenc.real_models.diagnostics import RotarySetup, rotation_changes

    named = [spec for spec in pe.list_methods() if spec.config_spellings]
    assert {spec.name for spec in named if spec.length_dependent} == {"rope_dynamic_ntk", "rope_longrope"}
    for spec in named:
        params = example_params(spec.name, 16)
        original = int(params.get("original_max_position_embeddings", 64))
        setup = RotarySetup(spec.name, params, rotary_dim=16)
        assert rotation_changes(setup, max(1, original // 2), 16 * original) is spec.length_dependent, spec.name


def test_band_methods_register_the_bands_their_frequencies_follow() -> None:
    from posenc.pe.rope_scaling import RopeLlama3Params, RopeYarnParams

    assert {spec.name for spec in pe.list_methods() if spec.bands is not None} == {"rope_yarn", "rope_llama3"}
    yarn = pe.get_method("rope_yarn")
    params = RopeYarnParams(factor=4.0, original_max_position_embeddings=64)
    assert yarn.bands is not None
    bands = yarn.bands(params, 32)
    frequencies = yarn.fn(params, pe.RotaryContext(rotary_dim=32, seq_len=64)).inv_freq
    original = 10000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    for (band, weight), omega, kept in zip(bands, frequencies.tolist(), original.tolist(), strict=True):
        assert omega == pytest.approx(kept * (1 - weight) + kept / 4.0 * weight, rel=1e-12), band
    assert bands[0][0] == "extrapolated"
    assert bands[-1][0] == "interpolated"
    llama = pe.get_method("rope_llama3")
    assert llama.bands is not None
    names = [band for band, _ in llama.bands(RopeLlama3Params(original_max_position_embeddings=64), 32)]
    assert names[0] == "high"
    assert names[-1] == "low"
    with pytest.raises(ValueError, match="rotary"):
        register("test_bands_on_bias", kind=Kind.BIAS, params=MethodParams, paper="x", length_dependent=True)(
            lambda params: None
        )
