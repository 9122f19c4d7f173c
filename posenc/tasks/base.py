"""A family of data, spec side: every fact about a kind of data that the gateway, the cost, the trainer and the
results need, in one class per family (``posenc.tasks.text``, ``sequence``, ``probes``, ``images``,
``graphs``).

A family knows its *unit* (tokens for text and probes, items for sequence tasks, pixels for images, nodes for
graphs) and where a spec gives the training size and the evaluation sizes in that unit; how many tokens the model
reads at a size; how a spec of its own is validated (fields of other families are refused, naming them); which
methods it accepts (dry-run at O(1) size); its metrics, the plot's title and chance line, and when a run counts
as having *learned* its training sizes. Nothing here builds a model: the torch half of each family (batches,
model, scoring loops) lives in ``posenc.training.families``, chosen by the family's ``model``.

Token families (``model = "tokens"``: sequence tasks and probes) also generate their instances here
(``TokenTask``): one token per symbol, ``BOS prompt SEP target EOS``, the loss and the score on the target; the
trainer's token half is generic, so a new token family is its module alone.
"""

from __future__ import annotations

import difflib
import statistics
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import torch
from pydantic import BaseModel, ValidationError

from posenc.compute.common import method_cost
from posenc.compute.cost import Cost, Meter
from posenc.errors import InvalidInput, Loc, located
from posenc.patterns import (
    MIN_LOCAL_SPAN,
    PATTERNS,
    LayerSetup,
    config_unit,
    local_span,
    resolve_layers,
    unit_overrides,
)
from posenc.pe import MethodParams, MethodSpec, get_method
from posenc.pe.appliers import DRY_RUN_KEYS, Layer, build_applier
from posenc.pe.types import Extent
from posenc.real_models.configs import resolve_config
from posenc.real_models.presets import PRESETS, UnknownPresetError, get_preset
from posenc.schemas.jobs import DataSpec, EvalSpec, JobKind, JobSpec, MethodRef

Unit = Literal["tokens", "items", "pixels", "nodes"]
ModelKind = Literal["text", "tokens", "images", "graphs"]
SPEC: Loc = ("body", "spec")
LEARNED_AT = 0.9  # a run whose in-distribution score is below this did not learn its training sizes

# the spec fields a family may read; any other one set in a spec is refused (it belongs to another family)
DATA_FIELDS = tuple(DataSpec.model_fields)
EVAL_FIELDS = tuple(EvalSpec.model_fields)


class Family(ABC):
    """The spec side of one kind of data; an instance wraps one job spec."""

    name: ClassVar[str]
    unit: ClassVar[Unit]
    model: ClassVar[ModelKind]  # which torch half trains it (posenc.training.families)
    metric: ClassVar[str]  # the headline metric of result rows and plots
    metrics: ClassVar[tuple[str, ...]]  # every metric a row may carry
    higher_is_better: ClassVar[bool] = True
    train_field: ClassVar[Loc]  # where a spec gives the training size
    eval_field: ClassVar[Loc]  # where a spec gives the evaluation sizes
    data_fields: ClassVar[tuple[str, ...]]  # the data fields it reads (besides task / corpus)
    eval_fields: ClassVar[tuple[str, ...]]  # the eval fields it reads
    reads_train_length: ClassVar[bool] = False  # whether train.length is its training size (tokens)
    group_tag: ClassVar[str | None] = None  # a result tag naming sub-tasks: heatmaps are drawn per value of it

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.meter = Meter()  # what the checks' work is charged to (the gateway's budgets: ``validate_spec``)
        self.held_out_seed: int | None = None  # ``held_out``'s draw; None: the evaluation's own

    # ---- which spec is this family's
    @classmethod
    @abstractmethod
    def task_names(cls) -> tuple[str, ...]:
        """The ``data.task`` names this family owns (text owns none: it is chosen by ``data.corpus``)."""

    @classmethod
    def about(cls, task: str) -> str:
        """One line on a task of this family (the README's tasks table): its source or what it asks."""
        return (cls.__doc__ or cls.name).strip().splitlines()[0]

    @property
    def task(self) -> str:
        """The task, or the corpus of a text spec."""
        return self.spec.data.task or self.spec.data.corpus or ""

    # ---- sizes, in the family's unit
    @abstractmethod
    def train_size(self) -> int:
        """The largest training size: what 'in distribution' means for results and plots."""

    @abstractmethod
    def default_eval_sizes(self) -> list[int]: ...

    @abstractmethod
    def given_eval_sizes(self) -> list[int] | None:
        """The evaluation sizes the spec gives (``eval_field``), or None."""

    def eval_sizes(self) -> list[int]:
        """The sizes evaluated: the given ones or the defaults, always with the training size among them, so a
        summary's reference is in distribution."""
        given = self.given_eval_sizes()
        sizes = given if given is not None else self.default_eval_sizes()
        return sorted({*sizes, self.train_size()})

    @abstractmethod
    def tokens(self, size: int) -> int:
        """Tokens the model reads for one example at ``size`` (its longest)."""

    @abstractmethod
    def eval_tokens(self, size: int) -> int:
        """Tokens read to score one evaluation size, at most."""

    def train_tokens(self) -> int:
        """Tokens of one training example, at most."""
        return self.tokens(self.train_size())

    def output_classes(self) -> int:
        """The model's output classes (a bound for the cost): its vocabulary or its labels."""
        return 256

    def input_parameters(self, dim: int) -> int:
        """The parameters that bring an input into the model's width ``dim``: a token embedding per symbol."""
        return self.output_classes() * dim

    # ---- validation
    def validate(self, kind: JobKind, data_dirs: Sequence[Path] | None = None) -> None:
        """The spec's fields for this family: the ones of other families are refused, its own checked
        (``data_dirs``: where a corpus may be read, for text)."""
        data, evaluation = self.spec.data, self.spec.eval
        for name in DATA_FIELDS:
            if name not in ("task", "corpus", *self.data_fields) and _given(data, name):
                raise InvalidInput((*SPEC, "data", name), self._foreign(name))
        for name in EVAL_FIELDS:
            if name not in self.eval_fields and _given(evaluation, name):
                raise InvalidInput((*SPEC, "eval", name), self._foreign(name))
        if not self.reads_train_length and _given(self.spec.train, "length"):
            raise InvalidInput(
                (*SPEC, "train", "length"),
                f"train.length is the training length in tokens of text and probes; {self.task!r} takes its "
                f"training size at {'.'.join(map(str, self.train_field))} ({self.unit})",
            )
        given = self.given_eval_sizes()
        if given is not None and not given:
            raise InvalidInput((*SPEC, *self.eval_field), "give at least one size, or leave it out")

    def _foreign(self, name: str) -> str:
        return (
            f"{name!r} is not read by {self.name} data ({self.task!r}); its sizes are "
            f"{'.'.join(map(str, self.train_field))} and {'.'.join(map(str, self.eval_field))}, in {self.unit}"
        )

    def layer_setups(self, ref: MethodRef) -> list[LayerSetup] | None:
        """A patterned entry's setup of every layer of the job's decoder (named patterns' local spans from the
        training length, ``posenc.patterns.local_span``; a config's layers by ``posenc.patterns.config_unit``);
        None for a plain entry."""
        if not ref.patterned:
            return None
        unit = self._unit(ref, ())
        method = ref.method if ref.method is not None else unit[0]["method"]
        return resolve_layers(method, ref.params, unit, self.spec.model.layers)

    def layer_unit(self, ref: MethodRef) -> list[dict[str, Any]]:
        """A patterned entry's unit of per-layer overrides (what tiles over the layers)."""
        return self._unit(ref, ())

    def _unit(self, ref: MethodRef, loc: Loc) -> list[dict[str, Any]]:
        """The entry's unit of per-layer overrides: its config's (resolved as ``/v1/models/resolve`` does; an
        error names the key inside ``config``), its named pattern's or its written-out layers."""
        if ref.config is None:
            return unit_overrides(ref.pattern, ref.overrides(), local_span(self.train_tokens()))
        if isinstance(ref.config, str):
            try:
                config = get_preset(ref.config)
            except UnknownPresetError:
                close = difflib.get_close_matches(ref.config, list(PRESETS), n=3, cutoff=0.5)
                hint = f"; did you mean {', '.join(repr(name) for name in close)}?" if close else ""
                raise InvalidInput(
                    (*loc, "config"), f"unknown preset {ref.config!r}{hint} GET /v1/models lists them"
                ) from None
        else:
            config = ref.config
        with located((*loc, "config")):
            resolved = resolve_config(config)
        return config_unit(resolved.layers, self.train_tokens())

    def validate_method(self, ref: MethodRef, loc: Loc) -> None:
        """A 1D sequence model's check of one method: 1D positions, trainable, its dry run at the longest
        sequence the job reads (O(1) in that length, ``Applier.dry_run``). A layer pattern's (or a config's)
        every layer is checked so, on the layer it gets (rotated share, window or chunk)."""
        if ref.pattern is not None and ref.pattern not in PATTERNS:
            raise InvalidInput((*loc, "pattern"), f"unknown pattern {ref.pattern!r}; one of {sorted(PATTERNS)}")
        if ref.patterned:
            if ref.method is not None:
                get_method(ref.method)  # the entry's method is a registered one (UnknownMethodError names it)
            overrides = self._unit(ref, loc)
            size = len(overrides)
            if self.spec.model.layers < size:
                raise InvalidInput(
                    (*loc, ref.unit_field),
                    f"the unit has {size} layers and the model {self.spec.model.layers}: it would never reach its "
                    f"last layers; give model.layers >= {size}",
                )
            if ref.pattern is not None:  # the entry's params would be overridden, not used: refused
                for layer in unit_overrides(ref.pattern, None, MIN_LOCAL_SPAN):
                    taken = set(ref.params) & set(layer.get("params") or {})
                    if taken and layer.get("method", ref.method) == ref.method:
                        raise InvalidInput(
                            (*loc, "params", sorted(taken)[0]),
                            f"pattern {ref.pattern!r} sets {sorted(taken)} in its layers; leave it out, or write the "
                            "layers out with 'layers'",
                        )
            setups = self.layer_setups(ref)
            assert setups is not None
            for index, setup in enumerate(setups):
                where = (*loc, "layers", index % size) if ref.layers is not None else (*loc, ref.unit_field)
                self._validate_layer(setup, where, in_pattern=True)
            return
        self._validate_layer(LayerSetup(ref.method_name, dict(ref.params)), loc, in_pattern=False)

    def charge_method(self, method: MethodSpec, params: MethodParams, loc: Loc, extent: Extent, times: int = 1) -> None:
        """Charge what ``params`` make ``method`` compute at ``extent`` (``times`` over: one per dry run) to the
        checks' meter before it runs: a seeded table as long as the gateway's budget allows is a 413 naming the
        param, not seconds of the gateway's time."""
        cost = method_cost(method, params, extent, (*loc, "params"))
        self.meter.charge(Cost(workspace_bytes=cost.workspace_bytes, work=times * cost.work, fields=cost.fields))

    def require_rotary(self, ref: MethodRef, loc: Loc) -> None:
        """A context-extension study's base model and rules: one rotary method in every layer (no pattern)."""
        if ref.patterned:
            raise InvalidInput(
                (*loc, ref.unit_field),
                "a context-extension study scales one rotation in every layer; it takes no layer pattern or config",
            )
        method = get_method(ref.method_name)
        model = self.spec.model
        layer = Layer(num_heads=model.heads, head_dim=model.dim // model.heads, causal=True)
        try:
            rotates = build_applier(method, parse_params(method, method.training_params(ref.params), loc), layer)
        except InvalidInput as exc:
            raise cannot_run(method, loc, exc) from None
        if not rotates.rotates:
            raise InvalidInput(
                (*loc, "method"),
                f"{method.name!r} is not rotary: a context-extension study scales a rotation (rope, rope_linear, "
                "rope_ntk, rope_dynamic_ntk, rope_yarn, rope_llama3, ...)",
            )

    def _validate_layer(self, setup: LayerSetup, loc: Loc, *, in_pattern: bool) -> None:
        """One method on one layer of the decoder: 1D positions, trainable, partial rotation only for rotary
        methods and at least one pair, its dry run on the layer it gets; in a pattern also acting inside
        attention (no absolute encoding but NoPE, no state threaded through the layers)."""
        method = get_method(setup.method)
        params = parse_params(method, method.training_params(setup.params), loc)
        if method.axes != 1:
            raise InvalidInput(
                (*loc, "method"), f"{method.name!r} encodes {method.axes}D positions; this job's model is 1D"
            )
        check_trainable(method, loc)
        model = self.spec.model
        head_dim = model.dim // model.heads
        keys = min(self.longest_tokens(), 2 * DRY_RUN_KEYS)  # a dry run's keys (``Applier.dry_run``), twice
        self.charge_method(method, params, loc, Extent(keys, keys, model.heads, head_dim, 1, model.dim), times=2)
        rotary_dim = None if setup.rotary_fraction >= 1.0 else 2 * int(setup.rotary_fraction * head_dim / 2)
        layer = Layer(
            num_heads=model.heads,
            head_dim=head_dim,
            causal=True,
            rotary_dim=rotary_dim,
            window=setup.window,
            chunk=setup.chunk,
        )
        try:
            applier = build_applier(method, params, layer)
        except InvalidInput as exc:
            raise cannot_run(method, loc, exc) from None
        if in_pattern and not applier.inside_attention:
            raise InvalidInput(
                (*loc, "method"),
                f"{method.name!r} acts on the embeddings or threads a state through the layers; a pattern's layers "
                "take methods that act inside attention (rotary, bias, score terms, NoPE)",
            )
        if rotary_dim is not None:
            if not applier.rotates:
                raise InvalidInput((*loc, "rotary_fraction"), f"{method.name!r} is not rotary: nothing to rotate")
            if rotary_dim < 2:
                raise InvalidInput(
                    (*loc, "rotary_fraction"),
                    f"{setup.rotary_fraction} of a {head_dim}-wide head is less than one pair of features",
                )
        try:
            applier.check()
            applier.dry_run(self.longest_tokens())
        except InvalidInput as exc:
            raise cannot_run(method, loc, exc) from None

    def longest_tokens(self) -> int:
        """The longest sequence the job's model reads, training or evaluation."""
        return max(self.train_tokens(), *(self.tokens(size) for size in self.eval_sizes()))

    # ---- results
    def protocol(self) -> str:
        return "greedy_exact_match"

    def title(self) -> str:
        return f"{self.task}: {self.metric} vs size ({self.unit}), trained up to {self.train_size()}"

    def chance(self) -> float | None:
        """The score of guessing, drawn on the plot; None where there is no such line."""
        return None

    def learned(self, in_distribution: Mapping[str, float | None]) -> bool | None:
        """Whether a run learned its training sizes, from its scores at the training size: the headline metric
        at least ``LEARNED_AT`` (accuracies); None where the family has no such threshold (perplexity)."""
        value = in_distribution.get(self.metric)
        return None if value is None or not self.higher_is_better else value >= LEARNED_AT

    # ---- train until learned (``train.until``)
    def validate_until(self) -> None:
        """``train.until`` where given: a threshold this family can reach (an accuracy in [0, 1]; a perplexity of
        at least 1), or none for a family with a learned rule (not text: perplexity has no threshold); at least
        one check before the cap."""
        until = self.spec.train.until
        if until is None:
            return
        loc = (*SPEC, "train", "until")
        if until.score is None and not self.higher_is_better:
            raise InvalidInput(
                (*loc, "score"),
                f"{self.name} is scored by {self.metric} (lower is better), which has no rule of having learned: give "
                f"train.until.score, the {self.metric} at the training size to stop at",
            )
        if until.score is not None and self.higher_is_better and not 0.0 <= until.score <= 1.0:
            raise InvalidInput((*loc, "score"), f"{self.metric} is a share in [0, 1]; got {until.score}")
        if until.score is not None and not self.higher_is_better and until.score < 1.0:
            raise InvalidInput((*loc, "score"), f"a perplexity is at least 1; got {until.score}")
        if until.every > self.spec.train.steps:
            raise InvalidInput(
                (*loc, "every"),
                f"no check would run before the cap (train.steps = {self.spec.train.steps}); give every <= steps",
            )

    def held_out(self, samples: int, seed: int) -> Self:
        """This family scoring ``samples`` held-out examples per size (as ``eval.samples``): what ``train.until``
        checks against, the same examples at every check, drawn from ``seed`` (a run's own, apart from its batch
        stream and from the evaluation's draw, so a run never stops on the test set)."""
        spec = self.spec.model_copy(update={"eval": self.spec.eval.model_copy(update={"samples": samples})})
        family = type(self)(spec)
        family.held_out_seed = seed
        return family

    def until_reached(self, cells: Sequence[Mapping[str, Any]], score: float | None) -> tuple[float | None, bool]:
        """One ``train.until`` check from the held-out cells of the training size: the headline metric's mean over
        the cells (as a run's in-distribution score) and whether it reached ``score`` (at least it; at most it
        when lower is better), or ``LEARNED_AT`` when None (the learned rule of ``learned``)."""
        values = [float(cell[self.metric]) for cell in cells if cell.get(self.metric) is not None]
        if not values:
            return None, False
        value = statistics.fmean(values)
        if self.higher_is_better:
            return value, value >= (LEARNED_AT if score is None else score)
        if score is None:
            raise InvalidInput((*SPEC, "train", "until", "score"), f"{self.metric} has no learned rule: give one")
        return value, value <= score

    def describe(self) -> dict[str, Any]:
        """What a result says about its data: the family, task, unit, training size, the sizes evaluated and
        the tokens the model reads at each."""
        sizes = self.eval_sizes()
        return {
            "family": self.name,
            "task": self.task,
            "unit": self.unit,
            "train_size": self.train_size(),
            "sizes": sizes,
            "tokens": {str(size): self.tokens(size) for size in sizes},
            "train_tokens": self.train_tokens(),
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "protocol": self.protocol(),
        }

    def extra_results(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Family-specific summaries of a benchmark's rows (the probes' effective length); {} by default."""
        return {}


# ------------------------------------------------------------------------------------------ token families
@dataclass(frozen=True)
class Instance:
    """One example of a token task: prompt and target token ids (indices into the family's vocabulary) and the
    tags that group its score (a probe's name and depth); ``parts`` splits the target into the pieces a recall
    metric counts (each [start, stop) into the target), None for one piece."""

    prompt: list[int]
    target: list[int]
    tags: Mapping[str, Any] = field(default_factory=dict)
    parts: list[tuple[int, int]] | None = None


PAD, BOS, SEP, EOS = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<bos>", "<sep>", "<eos>")


class TokenTask(Family):
    """A family whose examples are token sequences ``BOS prompt SEP target EOS`` scored on the target: the
    trainer's token half (``posenc.training.families.TokenTrainer``) needs only these methods."""

    model = "tokens"
    eval_seed: ClassVar[int] = 20240601  # every method and seed is scored on the same instances

    def eval_generator(self, size: int) -> torch.Generator:
        """The generator of one size's held-out instances: seeded by the size alone, so every model sees the same
        instances there and a size's instances do not depend on the other sizes evaluated (``held_out``: by its
        seed and the size)."""
        seed = self.eval_seed if self.held_out_seed is None else self.held_out_seed
        return torch.Generator().manual_seed(seed * 1_000_003 + size)

    @abstractmethod
    def vocab(self) -> tuple[str, ...]:
        """The token strings, the four specials first."""

    @abstractmethod
    def train_instances(self, count: int, generator: torch.Generator) -> list[Instance]:
        """``count`` training examples drawn from ``generator`` (every draw follows it)."""

    @abstractmethod
    def eval_instances(self, size: int, generator: torch.Generator) -> list[Instance]:
        """The held-out examples of one evaluation size (the same for every model: ``generator`` is seeded from
        the size alone); their tags group the score."""

    def score(self, correct_tokens: Sequence[bool], instance: Instance) -> dict[str, float]:
        """The metrics of one instance from the correctness of each target token (EOS last, teacher forced:
        greedy decoding reproduces the target iff every one is right): exact match, and per-token accuracy."""
        del instance
        right = sum(correct_tokens)
        return {"exact_match": float(right == len(correct_tokens)), "token_accuracy": right / len(correct_tokens)}

    def output_classes(self) -> int:
        return len(self.vocab())


def index_of(vocab: Sequence[str]) -> dict[str, int]:
    return {symbol: i for i, symbol in enumerate(vocab)}


def uniform(alphabet: str, count: int, generator: torch.Generator) -> str:
    """``count`` symbols drawn uniformly from ``alphabet``."""
    return "".join(alphabet[i] for i in torch.randint(0, len(alphabet), (count,), generator=generator).tolist())


# ------------------------------------------------------------------------------------------------ helpers
def _given(model: BaseModel, name: str) -> bool:
    """Whether a spec field holds something other than its default (a spec read back from a job record has
    every field set, at its default where the user gave none)."""
    value = getattr(model, name)
    return value is not None and value != type(model).model_fields[name].get_default(call_default_factory=True)


def parse_params(method: MethodSpec, raw: dict[str, Any], loc: Loc) -> MethodParams:
    try:
        return method.parse_params(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput((*loc, "params", *first["loc"]), first["msg"]) from None


def check_trainable(method: MethodSpec, loc: Loc) -> None:
    if method.learned and method.learned_init is None:
        raise InvalidInput(
            (*loc, "method"), f"{method.name!r} is learned but has no initialisation for training (learned_init)"
        )


def cannot_run(method: MethodSpec, loc: Loc, exc: InvalidInput) -> InvalidInput:
    where = exc.loc if exc.loc[:1] == ("params",) else ("params",)
    return InvalidInput((*loc, *where), f"{method.name!r} cannot run this job: {exc.msg}")


def scaled_sizes(base: int, factors: Sequence[float], *, least: int = 1) -> list[int]:
    """``round(base · f)`` for each factor, at least ``least``, without repeats."""
    return sorted({max(least, round(base * factor)) for factor in factors})
