"""Method registry: public name -> spec {kind, params model, function, paper, learned, conventions}.

Family modules register their methods with the :func:`register` decorator; ``posenc.pe`` imports every
family explicitly, so the registry is complete once ``posenc.pe`` is imported. Names are public API.
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from posenc.pe.types import Extent, ParamCost
from posenc.schemas.methods import Kind, MethodInfo
from posenc.schemas.tensors import INT64_MAX


class MethodParams(BaseModel):
    """Base of every params model: unknown keys are rejected, values validated once at the edge."""

    # allow_inf_nan=False: an infinite or NaN parameter (JSON NaN, Infinity, 1e400) is a 422, not a NaN result
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# A seed torch's generators take (they refuse past 2^64 - 1 with an error of their own, a 500 otherwise).
Seed = Annotated[int, Field(ge=0, le=INT64_MAX)]


class UnknownMethodError(KeyError):
    """No method is registered under that name (the gateway answers 404)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    @property
    def close_names(self) -> list[str]:
        """Registered names close to the one asked for (a typo's likely meaning), best first."""
        return difflib.get_close_matches(str(self.name), list(_REGISTRY), n=3, cutoff=0.6)

    def __str__(self) -> str:
        close = self.close_names
        hint = f" (did you mean {' or '.join(repr(name) for name in close)}?)" if close else ""
        return f"unknown method {self.name!r}{hint}; GET /v1/methods lists the {len(_REGISTRY)} registered ones"


@dataclass(frozen=True)
class MethodSpec:
    name: str
    kind: Kind
    family: str
    params_model: type[MethodParams]
    fn: Callable[..., Any]
    paper: str
    learned: bool = False
    toeplitz: bool = False
    conventions: dict[str, str] = field(default_factory=dict)
    # Learned methods: (params, ctx) -> {params field name: initial tensor}, the paper's init from params.seed.
    # Training turns these into nn.Parameters and passes them back through params.model_copy(update=...);
    # ``posenc.tensors.to_torch`` lets a torch tensor through unchanged, so the method stays differentiable.
    learned_init: Callable[..., dict[str, Any]] | None = None
    # Learned methods whose reference keeps a learned param in a range (KERPLE clamps r1, r2 on every forward):
    # {params field name: (low, high)}, None for an open side. A trainer clamps the parameter into it after
    # every optimizer step, which gives the reference's sequence of values (its clamp of ``.data`` before each
    # use), so an update never leaves the range the formula is defined on.
    learned_bounds: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    # How many coordinates a position has (2 for 2D grids, 3 for video): the 1D sequence models take axes == 1.
    # 0: the positions are node ids of a graph (or the features of a table), with no order or coordinates.
    axes: int = 1
    # A model holds one instance of the method's learned parameters per layer (the paper's choice) rather than
    # one shared by every layer.
    per_layer: bool = False
    # Inputs the method reads besides q and k: "x" (the layer input, for gates), "v" (the values), "graph".
    needs: frozenset[str] = frozenset()
    # Content methods that also add a per-(i, j) term to the values (Shaw's a^V): no kernel that takes an additive
    # score mask can run them, so their layers take the materialised path (posenc.pe.paths).
    value_term: bool = False
    # Defined for causal attention only (the method's cumulative sums or memory run over past keys).
    causal_only: bool = False
    # Model-coupled methods (TAPE): the position state of the first layer, and its feed-forward update.
    state_init: Callable[..., Any] | None = None
    state_ffn: Callable[..., Any] | None = None
    # Content methods whose intermediates outgrow two (B, H, Nq, Nk) maps: (params, ctx, batch) -> elements,
    # what the gateway counts against its budget before anything is allocated.
    workspace: Callable[..., int] | None = None
    # Methods that compute from a graph (shortest paths, degrees, eigenvectors): (nodes, edges) -> the work units
    # (about 1 ns of one core, posenc.compute.cost) its algorithm takes on such a graph, costed before any work.
    graph_work: Callable[[int, int], int] | None = None
    # Methods whose params drive work of their own (a table drawn from the seed, an MLP over the distances, angle
    # matrices): (params, Extent) -> ParamCost, charged by every route and job check before any work.
    param_cost: Callable[[Any, Extent], ParamCost] | None = None
    # Block rotations (R(p) = expm(Σ p_a G_a) on b adjacent features): (params, heads) -> (the heads their
    # generators have, b), read off the params without drawing anything (what the rotation matrices are sized by).
    block_rotation: Callable[[Any, int], tuple[int, int]] | None = None
    # Prefix tokens (negative positions, see posenc.pe.types): absolute methods with their own prefix rows
    # register prefix_encoding(params, ctx: AbsoluteContext, count) -> (count, D); bias methods with their own
    # prefix entries register prefix_bias(params, ctx: BiasContext) -> (H, 3), the per-head values of
    # prefix→token, token→prefix and prefix→prefix. Without them a prefix token gets zeros.
    prefix_encoding: Callable[..., Any] | None = None
    prefix_bias: Callable[..., Any] | None = None
    # posenc's own defaults for training jobs (not the paper's), raw params filled in for the keys a job leaves
    # out, all together or not at all (``MethodSpec.training_params``); ``training_note`` says what
    # they are and which params give the paper's behaviour. GET /v1/methods shows the note as the convention
    # ``training_defaults``.
    training_defaults: dict[str, Any] = field(default_factory=dict)
    training_note: str = ""
    # Real models' configs (posenc.real_models.configs): the rope_type spellings (Hugging Face's "yarn",
    # "deepseek_yarn", ...) that name this method, and the keys of a config's rope dict it reads, each one of its
    # own params. The config resolver derives its tables from these; no other table of spellings exists.
    config_spellings: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    # Rotary methods whose frequencies change with the sequence length (a KV cache filled before the length grew
    # holds keys rotated with other frequencies): what the config doctor warns about.
    length_dependent: bool = False
    # Rotary methods that treat pairs by band: (params, rotary_dim) -> per pair (band name, interpolation weight
    # w_k: 0 keeps ω_k, 1 divides it by the factor), as the method itself decides them (/v1/rope/frequencies).
    bands: Callable[..., list[tuple[str, float]]] | None = None
    # Context-extension rules: the rule's own criterion in rotations over the original context L (pair k turns
    # r_k = L·ω_k/2π times): filled params -> (kept above, interpolated below, the params they come from); a pair
    # turning more than the first keeps ω_k, fewer than the second is divided by the factor (inf, inf: PI, every
    # pair). What a study's regime report (posenc.extension_bands) reads.
    band_edges: Callable[[Mapping[str, Any]], tuple[float, float, tuple[str, str]]] | None = None
    # A method a config names by extending another's rope dict: (that method, the rope-dict key whose presence makes
    # it this one), e.g. M-RoPE: a default rope dict with mrope_section. ``config_values(given)`` -> params read
    # from the rope dict beyond ``config_keys`` (``given(key)``: the dict's value or None), e.g. M-RoPE's layout.
    config_extends: tuple[str, str] | None = None
    config_values: Callable[[Callable[[str], Any]], dict[str, Any]] | None = None
    # A method that extends any 1D rotary method's rope dict by the same key, taking that method and its params
    # under this param (M-RoPE: ``scaling``, so a YaRN dict with mrope_section turns YaRN's table by the sections).
    config_composes: str | None = None
    # Rotary methods whose length dependence depends on their params (M-RoPE over a dynamic table): raw params ->
    # whether the frequencies change with the length; ``depends_on_length`` reads it with ``length_dependent``.
    length_dependence: Callable[[Mapping[str, Any]], bool] | None = None
    # Diffusers transformer classes (a config's ``_class_name``) whose blocks this method rotates.
    config_classes: tuple[str, ...] = ()
    # What the config doctor says of the layers a config resolves to this method: (params, attention_scale) ->
    # (code, message, evidence) or None (YaRN's static scaling of short prompts).
    config_warning: Callable[[Mapping[str, Any], float], tuple[str, str, dict[str, Any]] | None] | None = None
    # Rotary methods: the pairings the method can rotate in, its own first (what a request that names none gets).
    # Block rotations (R(p) = expm(Σ p_a G_a) on b adjacent features) have one layout and refuse the other.
    pairings: tuple[str, ...] = ("half", "interleaved")

    def depends_on_length(self, raw_params: Mapping[str, Any]) -> bool:
        """Whether this method with ``raw_params`` changes its frequencies with the sequence length."""
        return self.length_dependent or (self.length_dependence is not None and self.length_dependence(raw_params))

    def training_params(self, raw_params: dict[str, Any] | None) -> dict[str, Any]:
        """The raw params a training model builds this method with: the job's own, plus ``training_defaults`` for
        the keys they leave out. The defaults apply all together or not at all: where a key the job gives
        conflicts with them (FoX's ``fgate_bias_init: false`` with the default decay times), the job's params are
        used as given, so its keys always win. Params that are invalid either way are returned as given (parsing
        then names the job's error)."""
        given = dict(raw_params or {})
        missing = {key: value for key, value in self.training_defaults.items() if key not in given}
        if not missing:
            return given
        filled = {**given, **missing}
        try:
            self.parse_params(filled)
        except ValidationError:
            return given
        return filled

    def training_params_note(self, raw_params: dict[str, Any] | None) -> str | None:
        """``training_note`` when ``training_params`` filled in the training defaults, else None (the job gave those
        keys itself, or one that conflicts): what a job reports next to the params it was given."""
        return self.training_note if self.training_params(raw_params) != dict(raw_params or {}) else None

    @property
    def summary(self) -> str:
        """The docstring's first paragraph, on one line."""
        doc = (inspect.getdoc(self.fn) or "").strip()
        return " ".join(doc.split("\n\n", 1)[0].split())

    def parse_params(self, raw: dict[str, Any] | None) -> MethodParams:
        """Validate raw params; raises pydantic.ValidationError naming the field."""
        return self.params_model.model_validate(raw or {})

    def cost_of(self, params: MethodParams, extent: Extent) -> ParamCost:
        """What ``params`` make this method compute at ``extent`` (nothing for a method without ``param_cost``)."""
        return self.param_cost(params, extent) if self.param_cost is not None else ParamCost()

    def info(self) -> MethodInfo:
        """The catalogue entry (``GET /v1/methods``): built once per method, since the JSON schema of the params
        is the costly part and never changes. A copy, so a caller cannot alter the cached one."""
        if self.name not in _INFO:
            _INFO[self.name] = _method_info(self)
        return _INFO[self.name].model_copy(deep=True)


_INFO: dict[str, MethodInfo] = {}  # the catalogue entries, by method name


def _method_info(self: MethodSpec) -> MethodInfo:
    return MethodInfo(
        name=self.name,
        kind=self.kind,
        family=self.family,
        paper=self.paper,
        summary=self.summary,
        learned=self.learned,
        toeplitz=self.toeplitz,
        axes=self.axes,
        per_layer=self.per_layer,
        needs=sorted(self.needs),
        causal_only=self.causal_only,
        model_coupled=self.state_init is not None,
        config_spellings=list(self.config_spellings),
        config_keys=list(self.config_keys),
        pairings=list(self.pairings) if self.kind is Kind.ROTARY else [],
        params_schema=self.params_model.model_json_schema(),
        conventions=dict(self.conventions),
    )


_REGISTRY: dict[str, MethodSpec] = {}
# What a method may read besides q and k: the layer input, the values, a graph (graph methods' structure).
LAYER_INPUTS = frozenset({"x", "v", "graph"})
F = TypeVar("F", bound=Callable[..., Any])


def register(
    name: str,
    *,
    kind: Kind,
    params: type[MethodParams],
    paper: str,
    learned: bool = False,
    toeplitz: bool = False,
    conventions: dict[str, str] | None = None,
    learned_init: Callable[..., dict[str, Any]] | None = None,
    learned_bounds: dict[str, tuple[float | None, float | None]] | None = None,
    axes: int = 1,
    per_layer: bool = False,
    needs: frozenset[str] = frozenset(),
    value_term: bool = False,
    causal_only: bool = False,
    state_init: Callable[..., Any] | None = None,
    state_ffn: Callable[..., Any] | None = None,
    workspace: Callable[..., int] | None = None,
    graph_work: Callable[[int, int], int] | None = None,
    param_cost: Callable[[Any, Extent], ParamCost] | None = None,
    block_rotation: Callable[[Any, int], tuple[int, int]] | None = None,
    prefix_encoding: Callable[..., Any] | None = None,
    prefix_bias: Callable[..., Any] | None = None,
    training_defaults: dict[str, Any] | None = None,
    training_note: str = "",
    config_spellings: tuple[str, ...] = (),
    config_keys: tuple[str, ...] = (),
    length_dependent: bool = False,
    bands: Callable[..., list[tuple[str, float]]] | None = None,
    band_edges: Callable[[Mapping[str, Any]], tuple[float, float, tuple[str, str]]] | None = None,
    pairings: tuple[str, ...] = ("half", "interleaved"),
    config_extends: tuple[str, str] | None = None,
    config_values: Callable[[Callable[[str], Any]], dict[str, Any]] | None = None,
    config_composes: str | None = None,
    length_dependence: Callable[[Mapping[str, Any]], bool] | None = None,
    config_classes: tuple[str, ...] = (),
    config_warning: Callable[[Mapping[str, Any], float], tuple[str, str, dict[str, Any]] | None] | None = None,
) -> Callable[[F], F]:
    """Register ``fn`` under ``name``; a second registration of the same name is an error.

    ``training_defaults`` must be valid params on their own and come with a ``training_note``; the note is added
    to the conventions as ``training_defaults``."""

    def decorator(fn: F) -> F:
        if name in _REGISTRY:
            raise ValueError(f"method {name!r} is already registered by {_REGISTRY[name].family}")
        if needs - LAYER_INPUTS:
            raise ValueError(f"{name}: unknown layer inputs {sorted(needs - LAYER_INPUTS)}")
        if (state_init is None) != (state_ffn is None):
            raise ValueError(f"{name}: a model-coupled method registers both state_init and state_ffn")
        if value_term and kind is not Kind.SCORE_MOD:
            raise ValueError(f"{name}: only content (score_mod) methods add a value term")
        if toeplitz and kind is not Kind.BIAS:
            raise ValueError(f"{name}: only bias methods can be Toeplitz")
        unknown_keys = set(config_keys) - set(params.model_fields)
        if unknown_keys:
            raise ValueError(f"{name}: config_keys {sorted(unknown_keys)} are not params of the method")
        taken = {spelling: spec.name for spec in _REGISTRY.values() for spelling in spec.config_spellings}
        if set(config_spellings) & set(taken):
            clash = sorted(set(config_spellings) & set(taken))[0]
            raise ValueError(f"{name}: config spelling {clash!r} already names {taken[clash]!r}")
        if learned_bounds and (not learned or set(learned_bounds) - set(params.model_fields)):
            raise ValueError(f"{name}: learned_bounds name learned params of the method")
        if not pairings or set(pairings) - {"half", "interleaved"}:
            raise ValueError(f"{name}: pairings are some of 'half' and 'interleaved', got {pairings}")
        if config_composes is not None and (config_extends is None or config_composes not in params.model_fields):
            raise ValueError(f"{name}: config_composes names a param of a method that extends a rope dict")
        if (length_dependent or bands is not None or length_dependence is not None) and kind is not Kind.ROTARY:
            raise ValueError(f"{name}: length_dependent and bands describe rotary frequencies")
        if not (inspect.getdoc(fn) or "").strip():
            raise ValueError(f"{name}: a registered method needs a docstring with its formula and paper")
        stated = dict(conventions or {})
        if training_defaults:
            if not training_note or "training_defaults" in stated:
                raise ValueError(f"{name}: training_defaults need a training_note (and no such convention)")
            params.model_validate(training_defaults)  # the defaults alone are valid params
            shown = ", ".join(f"{key}={json.dumps(value)}" for key, value in training_defaults.items())
            stated["training_defaults"] = (
                f"{training_note}. Training jobs fill in {shown} for the keys their params leave out "
                "(all of them or, where a given key conflicts, none); /v1 compute routes keep the paper's defaults"
            )
        family = fn.__module__.rsplit(".", 1)[-1]
        _REGISTRY[name] = MethodSpec(
            name=name,
            kind=kind,
            family=family,
            params_model=params,
            fn=fn,
            paper=paper,
            learned=learned,
            toeplitz=toeplitz,
            conventions=stated,
            learned_init=learned_init,
            learned_bounds=dict(learned_bounds or {}),
            value_term=value_term,
            axes=axes,
            per_layer=per_layer,
            needs=needs,
            causal_only=causal_only,
            state_init=state_init,
            state_ffn=state_ffn,
            workspace=workspace,
            graph_work=graph_work,
            param_cost=param_cost,
            block_rotation=block_rotation,
            prefix_encoding=prefix_encoding,
            prefix_bias=prefix_bias,
            training_defaults=dict(training_defaults or {}),
            training_note=training_note,
            config_spellings=tuple(config_spellings),
            config_keys=tuple(config_keys),
            length_dependent=length_dependent,
            bands=bands,
            band_edges=band_edges,
            pairings=tuple(pairings),
            config_extends=config_extends,
            config_values=config_values,
            config_composes=config_composes,
            length_dependence=length_dependence,
            config_classes=tuple(config_classes),
            config_warning=config_warning,
        )
        return fn

    return decorator


def get_method(name: str) -> MethodSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMethodError(name) from None


def list_methods(kind: Kind | str | None = None) -> list[MethodSpec]:
    specs = sorted(_REGISTRY.values(), key=lambda s: (s.kind.value, s.name))
    if kind is None:
        return specs
    return [s for s in specs if s.kind == Kind(kind)]
