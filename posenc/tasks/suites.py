"""Suites: named benchmark presets with a known cost. A suite bundles one or more tasks with their sizes, the
model, the training budget and the seeds; a benchmark spec names one (``"suite": "quick"``) with its methods and
gets every task of it, each a benchmark of its own within the job, and across tasks the NoPE paper's aggregate:
each method's mean reciprocal rank (MRR) over (task, seed), ranked by its mean score past the training size.

``quick``     under 5 minutes on 2 CPU cores for four methods: repeat-single-char copy (600 steps) and
              multi-char copy (2,000 steps: it fits slower) at sizes up to 8, a 2-layer d=64 model, one seed;
``standard``  under 30 minutes on 2 CPU cores with two job slots for five methods (estimated from the measured
              runs of its tasks): the two copy tasks at sizes up to 10 (1,500 and 2,500 steps) and the passkey
              probe with the common-words control at 64 tokens (3,000 steps), d=64, 3 seeds;
``paper``     the NoPE paper's task grid at tiny scale (every copy variant, reverse, addition, sort, parity at sizes
              up to 10; d=128, 2,000 steps, 3 seeds): hours on a CPU, minutes on a GPU;
``leaderboard`` every 1D method that trains in a job (:func:`leaderboard_methods`, what a spec without methods
              gets) on the two copy tasks at size 8 (caps 300 and 900 steps), the passkey probe with its control
              at 64 tokens (450) and stdlib perplexity at 32 tokens (400), d=64, 3 seeds, each run trained until
              learned (``train.until``, checked every 50 steps) with ``train.steps`` as the cap; its result adds
              the table of ``posenc.training.leaderboard``. Sized with ``bench/leaderboard_cost.py`` (measured per
              method and task) so that every run at its cap fits 90 minutes on 2 CPU cores with two job slots.

The durations are estimates from the counts of each run (``posenc.job_estimates.estimate_seconds``: set-ups,
steps, tokens, evaluation sizes, multiply-adds) scaled by what the workers measured; a suite's job says its own
estimate when it is submitted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from posenc.corpora import STDLIB
from posenc.errors import InvalidInput
from posenc.pe import get_method, list_methods
from posenc.pe.registry import MethodSpec
from posenc.schemas.jobs import JobSpec
from posenc.tasks import family_of
from posenc.tasks.base import SPEC


@dataclass(frozen=True)
class Suite:
    """A preset: what every task of it shares (model, train, seeds) and each task's data and eval."""

    description: str
    tasks: tuple[Mapping[str, Any], ...]  # each {"data": {...}, "eval": {...}} (and "train" overrides)
    model: Mapping[str, Any]
    train: Mapping[str, Any]
    seeds: tuple[int, ...] = (0,)
    budget: str = ""  # the duration it is sized for
    extra: Mapping[str, Any] = field(default_factory=dict)
    # The methods a spec that names none gets (None: the suite needs them given).
    default_methods: Callable[[], list[str]] | None = None
    leaderboard: bool = False  # its result adds the leaderboard table (``posenc.training.leaderboard``)


# A rotary rule that rescales a context trained elsewhere reads that context's length from this param (the one
# a context-extension study fills from train.length): Llama 3's, YaRN's, LongRoPE's, dynamic NTK's.
ORIGINAL_CONTEXT_PARAM = "original_max_position_embeddings"
# The training length a method is built for (FoPE's floor frequency 2π/L_train, ALiBi's): where a method requires
# it, a suite's default entry gives it the task's training tokens.
TRAIN_LENGTH_PARAM = "train_length"


def required_params(method: MethodSpec) -> set[str]:
    """The params a job must give ``method`` (no default, none among its ``training_defaults``)."""
    fields = method.params_model.model_fields
    return {name for name, info in fields.items() if info.is_required() and name not in method.training_defaults}


def trains_from_its_name(method: MethodSpec) -> bool:
    """Whether a 1D sequence job trains ``method`` given its name (and, where it requires one, the training
    length, ``TRAIN_LENGTH_PARAM``): 1D positions (``axes`` == 1), no graph input, a learned method with its
    initialisation (``learned_init``), and its training params valid so. A method that needs more (a scaling
    factor, NTK's α) is a setting of another method, not a method of its own."""
    if method.axes != 1 or "graph" in method.needs or (method.learned and method.learned_init is None):
        return False
    given = {TRAIN_LENGTH_PARAM: 1} if TRAIN_LENGTH_PARAM in required_params(method) else None
    try:
        method.parse_params(method.training_params(given))
    except ValidationError:
        return False
    return True


def is_scaling_rule(method: MethodSpec) -> bool:
    """A context-extension rule (position interpolation, NTK, YaRN, Llama 3, LongRoPE, dynamic NTK, NTK-α): a
    method that requires the scaling to be given (a required param besides the training length) or reads the
    length of the context it extends (``ORIGINAL_CONTEXT_PARAM``). It rescales a trained RoPE model; trained from
    scratch at one length it is RoPE with other frequencies, not a row of its own. p-RoPE (whose ``factor``
    defaults to 1) and FoPE (which requires only the training length) are methods, not rules. Read on the 1D
    methods (among them only rotary ones are so); it reads params, not kinds, as code outside ``posenc.pe``
    must."""
    fields = method.params_model.model_fields
    return ORIGINAL_CONTEXT_PARAM in fields or bool(required_params(method) - {TRAIN_LENGTH_PARAM})


def leaderboard_methods() -> list[str]:
    """Every registered method a 1D sequence job trains from its name, less the rotary scaling rules
    (:func:`trains_from_its_name`, :func:`is_scaling_rule`), in the registry's order (by kind, then name)."""
    return [m.name for m in list_methods() if trains_from_its_name(m) and not is_scaling_rule(m)]


def default_entry(name: str, train_tokens: int) -> dict[str, Any]:
    """A suite's default method entry: the method by name, with the training length where it requires one."""
    needs_length = TRAIN_LENGTH_PARAM in required_params(get_method(name))
    return {"method": name, **({"params": {TRAIN_LENGTH_PARAM: train_tokens}} if needs_length else {})}


COPY_TASKS = ("copy_single", "copy", "copy_replace", "reverse", "addition", "sort", "parity")

# The leaderboard's tasks: each run stops once learned (the family's rule; text: the perplexity LEADERBOARD_PPL at
# the training length), checked every 50 steps on held-out data; its train.steps is the cap. The caps are sized
# so that every run at its cap fits 90 minutes on 2 CPU cores with two job slots (bench/leaderboard_cost.py:
# measured per method and task; the probes' steps cost three times a copy step, so they get the smallest cap).
LEADERBOARD_UNTIL = {"every": 50, "samples": 50}
LEADERBOARD_PPL = 9.0
LEADERBOARD_TASKS: tuple[Mapping[str, Any], ...] = (
    {"data": {"task": "copy_single", "size": 8}, "train": {"until": LEADERBOARD_UNTIL}, "eval": {"samples": 50}},
    {
        "data": {"task": "copy", "size": 8},
        "train": {"steps": 900, "until": LEADERBOARD_UNTIL},
        "eval": {"samples": 50},
    },
    {
        "data": {"task": "probes", "probes": ["passkey", "common_words"]},
        "train": {"length": 64, "steps": 450, "until": {"every": 50, "samples": 20}},
        "eval": {"lengths": [48, 64, 96, 128], "samples": 20},
    },
    {
        "data": {"corpus": STDLIB},
        "train": {"length": 32, "steps": 400, "until": {"score": LEADERBOARD_PPL, "every": 50, "samples": 32}},
        "eval": {"lengths": [32, 64, 128], "max_tokens": 4096},
    },
)
LEADERBOARD_BUDGET = "under 90 minutes on 2 CPU cores with two job slots, every run at its cap (measured)"

SUITES: dict[str, Suite] = {
    "quick": Suite(
        description="repeat-single-char and multi-char copy (NoPE paper rsc and cmc) at sizes up to 8",
        tasks=(
            {"data": {"task": "copy_single", "size": 8}, "eval": {"samples": 50}},
            {"data": {"task": "copy", "size": 8}, "train": {"steps": 2000}, "eval": {"samples": 50}},
        ),
        model={"layers": 2, "dim": 64, "heads": 4},
        train={"steps": 600, "batch_size": 32, "lr": 1e-3, "warmup_steps": 60, "checkpoint_every": 200},
        seeds=(0,),
        budget="under 5 minutes on 2 CPU cores for four methods",
    ),
    "standard": Suite(
        description="the two copy tasks at sizes up to 10 and the passkey probe with its control at 64 tokens, 3 seeds",
        tasks=(
            {"data": {"task": "copy_single", "size": 10}, "eval": {"samples": 50}},
            {"data": {"task": "copy", "size": 10}, "train": {"steps": 2500}, "eval": {"samples": 50}},
            {
                "data": {"task": "probes", "probes": ["passkey", "common_words"]},
                "train": {"length": 64, "steps": 3000},
                "eval": {"lengths": [48, 64, 96, 128, 192, 256], "samples": 30},
            },
        ),
        model={"layers": 2, "dim": 64, "heads": 4},
        train={"steps": 1500, "batch_size": 32, "lr": 1e-3, "warmup_steps": 100, "checkpoint_every": 250},
        seeds=(0, 1, 2),
        budget="under 30 minutes on 2 CPU cores with two job slots for five methods (estimated from its runs)",
    ),
    "paper": Suite(
        description="the NoPE paper's task grid at tiny scale: every copy variant, reverse, addition, sort, parity",
        tasks=tuple({"data": {"task": task, "size": 10}, "eval": {"samples": 100}} for task in COPY_TASKS),
        model={"layers": 2, "dim": 128, "heads": 4},
        train={"steps": 2000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 100, "checkpoint_every": 250},
        seeds=(0, 1, 2),
        budget="hours on a CPU",
    ),
    "leaderboard": Suite(
        description="every 1D method that trains in a job: repeat-single-char and multi-char copy, the passkey "
        "probe with its common-words control, and stdlib perplexity past the training length; 3 seeds, each run "
        "trained until learned (train.steps is the cap)",
        tasks=LEADERBOARD_TASKS,
        model={"layers": 2, "dim": 64, "heads": 4},
        train={"steps": 300, "batch_size": 32, "lr": 2e-3, "warmup_steps": 50, "checkpoint_every": 250},
        seeds=(0, 1, 2),
        budget=LEADERBOARD_BUDGET,
        default_methods=leaderboard_methods,
        leaderboard=True,
    ),
}


def suite_specs(spec: JobSpec) -> list[JobSpec]:
    """The benchmark specs of a suite's tasks with the spec's methods (none given: the suite's
    ``default_methods``; a suite without them refuses) and its seeds and device, if given, or ``[spec]`` for a
    spec that names no suite. A suite sets data, model, train and eval itself: giving them too
    is refused, naming the field."""
    if spec.suite is None:
        return [spec]
    suite = SUITES.get(spec.suite)
    if suite is None:
        raise InvalidInput((*SPEC, "suite"), f"unknown suite {spec.suite!r}; known: {', '.join(SUITES)}")
    default = JobSpec.model_validate({"methods": [{"method": "nope"}]})
    for name in ("data", "model", "train", "eval"):
        if getattr(spec, name) != getattr(default, name):
            raise InvalidInput(
                (*SPEC, name), f"suite {spec.suite!r} sets data, model, train and eval; give methods and seeds only"
            )
    seeds = list(spec.seeds) if spec.seeds != default.seeds else list(suite.seeds)
    if not spec.methods and suite.default_methods is None:
        raise InvalidInput((*SPEC, "methods"), f"suite {spec.suite!r} takes the methods to compare: give methods")
    names = [] if spec.methods else suite.default_methods() if suite.default_methods is not None else []
    specs = []
    for task in suite.tasks:
        methods = [ref.model_dump() for ref in spec.methods]
        if names:  # the suite's own: each with the task's training length where it requires one
            tokens = family_of(task_spec_of(task, suite, seeds)).train_tokens()
            methods = [default_entry(name, tokens) for name in names]
        raw = {
            "methods": methods,
            "data": task["data"],
            "model": dict(suite.model),
            "train": {**suite.train, **task.get("train", {})},
            "eval": task.get("eval", {}),
            "seeds": seeds,
            "device": spec.device,
        }
        specs.append(JobSpec.model_validate(raw))
    return specs


def task_spec_of(task: Mapping[str, Any], suite: Suite, seeds: list[int]) -> JobSpec:
    """A suite task's spec with a placeholder method: what its family reads sizes from."""
    raw = {"data": task["data"], "model": dict(suite.model), "train": {**suite.train, **task.get("train", {})}}
    return JobSpec.model_validate({**raw, "eval": task.get("eval", {}), "seeds": seeds, "suite": "placeholder"})


def mean_reciprocal_rank(tasks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The NoPE paper's aggregate over a suite's task results: for each (task, seed), the methods ranked by their
    mean headline score at the sizes past the training size (best first; ties share the better rank); each
    method's reciprocal ranks averaged over (task, seed). Sorted best first."""
    ranks: dict[str, list[float]] = defaultdict(list)
    for result in tasks:
        data = result["data"]
        metric, train_size, better = data["metric"], data["train_size"], 1 if data["higher_is_better"] else -1
        scores: dict[tuple[int, str], list[float]] = defaultdict(list)
        for row in result["table"]:
            if row["metric"] == metric and row["size"] > train_size and row["value"] is not None:
                scores[(row["seed"], row["method"])].append(float(row["value"]))
        for seed in sorted({seed for seed, _ in scores}):
            means = {method: sum(v) / len(v) for (s, method), v in scores.items() if s == seed}
            for method, mean in means.items():
                rank = 1 + sum(1 for other in means.values() if better * other > better * mean)
                ranks[method].append(1.0 / rank)
    table = [{"method": method, "mrr": sum(values) / len(values), "entries": len(values)}
             for method, values in ranks.items()]  # fmt: skip
    return sorted(table, key=lambda entry: -entry["mrr"])
