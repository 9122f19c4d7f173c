"""What a job spec must satisfy beyond its schema, checked by the gateway before a job is queued (an unknown
method is a 404 and a bad value a 422 naming the field, not a failed job minutes later) and again by the trainer.

Here: the rules of the job kinds (one method unless a benchmark, a checkpoint only for extrapolate, a suite only
for a benchmark), the compute job's prepare step and budget, and the job's cost. Everything about the data (its
sizes, units, fields and which methods it takes) is its task family's (``posenc.tasks``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from posenc.compute import check_job_budget, prepare_job
from posenc.compute.cost import Budgets, Meter
from posenc.errors import InvalidInput
from posenc.extension import arm_ref, arms, finetune_job_spec
from posenc.schemas.jobs import ComputeJobSpec, JobCreate, JobKind, JobSpec
from posenc.tasks import Family, family_of
from posenc.tasks.base import SPEC
from posenc.tasks.suites import suite_specs

CHECKPOINT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def validate_job(
    create: JobCreate,
    *,
    max_compute_bytes: int | None = None,
    data_dirs: Sequence[Path] | None = None,
    budgets: Budgets | None = None,
) -> None:
    """The gateway's check of ``POST /v1/jobs``: :func:`validate_spec` for train, extrapolate and benchmark
    (``data_dirs``: the gateway's data directories; ``budgets``: the gateway's per-request budgets, which the
    checks' own work is charged against); for compute, the request's prepare step (as its route would run it;
    errors name ``body.spec.request``) and, with ``max_compute_bytes``, the job's memory budget
    (``BudgetExceeded``, a 413)."""
    if isinstance(create.spec, ComputeJobSpec):
        prepared = prepare_job(create.spec)
        if max_compute_bytes is not None:
            check_job_budget(prepared, max_compute_bytes)
        return
    validate_spec(create.kind, create.spec, data_dirs=data_dirs, budgets=budgets)


def validate_spec(
    kind: JobKind, spec: JobSpec, *, data_dirs: Sequence[Path] | None = None, budgets: Budgets | None = None
) -> Family:
    """Raise for what the schema cannot check; returns the spec's family. Unknown methods raise
    ``UnknownMethodError``, ``BudgetExceeded`` (a 413) the checks whose own work (every method entry's dry run
    and seeded tables, charged before each runs) would go over ``budgets``, everything else ``InvalidInput``
    naming the field."""
    meter = Meter(budgets, "give the methods smaller tables (their params), or fewer method entries")
    if kind != "benchmark" and len(spec.methods) != 1:
        raise InvalidInput((*SPEC, "methods"), f"a {kind} job takes exactly one method; use 'benchmark' for several")
    if spec.checkpoint is not None:
        if kind != "extrapolate":
            raise InvalidInput((*SPEC, "checkpoint"), "only an extrapolate job evaluates an existing checkpoint")
        if not CHECKPOINT_ID.match(spec.checkpoint):
            raise InvalidInput((*SPEC, "checkpoint"), "must be the id of a finished train job")
        if spec.train.until is not None:
            raise InvalidInput(
                (*SPEC, "train", "until"), "an extrapolate job from a checkpoint trains nothing; leave train.until out"
            )
    if spec.suite is not None and kind != "benchmark":
        raise InvalidInput((*SPEC, "suite"), "a suite is a benchmark: submit it with kind 'benchmark'")
    families = []
    for task_spec in suite_specs(spec):  # the spec itself, or each task of its suite
        family = family_of(task_spec)
        family.meter = meter
        family.validate(kind, data_dirs)
        family.validate_until()
        for index, ref in enumerate(task_spec.methods):
            # a study's rules are checked with the params the study fills in (posenc.extension.arm_ref)
            family.validate_method(ref if spec.extension is None else arm_ref(spec, ref), (*SPEC, "methods", index))
        families.append(family)
    if spec.extension is not None:
        _validate_study(kind, spec, families[0])
    return families[0]


def _validate_study(kind: JobKind, spec: JobSpec, family: Family) -> None:
    """A context-extension study: a benchmark without a suite, on text or probes (whose size is a length in
    tokens), a rotary base model and rotary rules (no layer patterns), each rule named once, and every arm able
    to run at the fine-tune's length."""
    loc = (*SPEC, "extension")
    if kind != "benchmark":
        raise InvalidInput(loc, "a context-extension study is a benchmark: submit it with kind 'benchmark'")
    if spec.suite is not None:
        raise InvalidInput((*SPEC, "suite"), "a context-extension study takes no suite: its arms are its methods")
    if not family.reads_train_length:
        raise InvalidInput(
            loc,
            f"a study extends a context measured in tokens (text or the probes); {family.task!r} is sized in "
            f"{family.unit}",
        )
    assert spec.extension is not None
    if spec.train.until is not None:
        raise InvalidInput(
            (*SPEC, "train", "until"),
            "a context-extension study trains its base model and fine-tunes for their full steps; leave train.until "
            "out",
        )
    family.validate_method(spec.extension.base, (*loc, "base"))
    family.require_rotary(spec.extension.base, (*loc, "base"))
    seen: dict[str, int] = {}
    for index, ref in enumerate(spec.methods):
        family.require_rotary(arm_ref(spec, ref), (*SPEC, "methods", index))
        if ref.name in seen or ref.name == "base":
            raise InvalidInput(
                (*SPEC, "methods", index, "label"),
                f"an arm named {ref.name!r} is already in the study (the base model is 'base'); give it a label",
            )
        seen[ref.name] = index
    if spec.extension.finetune_steps:
        tuned = family_of(finetune_job_spec(spec, arms(spec)[0]))
        tuned.meter = family.meter
        tuned.validate(kind)
        for arm in arms(spec):
            tuned.validate_method(arm.ref, (*SPEC, "extension", "finetune_length"))


# --------------------------------------------------------------------------------------------------- cost
def model_macs_per_token(spec: JobSpec, length: int, family: Family | None = None) -> int:
    """Multiply-adds of one token's forward pass through the job's model in a sequence of ``length`` tokens:
    every layer's weights (attention 4·D², feed-forward 2·m·D²) and its attention over the sequence (2·length·D:
    q·k and the weighted sum of v), and the output head (the family's output classes x D)."""
    family = family if family is not None else family_of(spec)
    dim, layers, mult = spec.model.dim, spec.model.layers, spec.model.ffn_mult
    return layers * ((4 + 2 * mult) * dim * dim + 2 * length * dim) + family.output_classes() * dim


def job_cost(create: JobCreate) -> int:
    """The work a job asks for, in multiply-adds, capped by the gateway (``max_job_cost``, 413) before anything
    else is done: it is arithmetic on the spec.

    Per (method, seed) run: training is 3 forward passes' worth (forward and backward) of every token it reads,
    train steps x batch_size x the family's training tokens, each ``model_macs_per_token`` at that length;
    evaluation is one forward pass of every token it reads at each evaluation size (the family's
    ``eval_tokens``; a train job at its training size only), and with ``train.until`` one forward pass of the
    held-out examples of every check up to the cap (``until_tokens``). So the cap covers methods x seeds x steps
    x tokens, evaluation sizes x samples, and the model's size together. An extrapolate job from a checkpoint trains
    nothing and evaluates one model. A compute job counts 1: its size is capped by ``max_job_output_bytes``."""
    if not isinstance(create.spec, JobSpec):
        return 1
    return _job_work(create, lambda spec, family, length: model_macs_per_token(spec, length, family), backward=3)


def job_tokens(create: JobCreate) -> int:
    """The tokens a job's models read, training and evaluation together (see :func:`job_cost`)."""
    return _job_work(create, lambda spec, family, length: 1, backward=1)


def _job_work(create: JobCreate, per_token: Callable[[JobSpec, Family, int], int], *, backward: int) -> int:
    """Every token a job's models read, each weighted by ``per_token(spec, family, its sequence length)`` and a
    training token ``backward`` times more (forward and backward passes); 0 for a compute job."""
    if not isinstance(create.spec, JobSpec):
        return 0
    if create.spec.suite is not None:
        return sum(_job_work(JobCreate(kind=create.kind, spec=spec), per_token, backward=backward)
                   for spec in suite_specs(create.spec))  # fmt: skip
    spec = create.spec
    family = family_of(spec)
    sizes = [family.train_size()] if create.kind == "train" else family.eval_sizes()
    evaluation = sum(family.eval_tokens(size) * per_token(spec, family, family.tokens(size)) for size in sizes)
    if create.kind == "extrapolate" and spec.checkpoint is not None:
        return evaluation
    length = family.train_tokens()
    training = backward * spec.train.steps * spec.train.batch_size * length * per_token(spec, family, length)
    training += until_tokens(spec, family) * per_token(spec, family, family.tokens(family.train_size()))
    if spec.extension is None:
        return len(spec.methods) * len(spec.seeds) * (training + evaluation)
    # a study: the base model once per seed, every arm evaluated, the fine-tuned arms trained further
    study = arms(spec)
    tuned_runs = sum(1 for arm in study if arm.finetune)
    tuned_spec = finetune_job_spec(spec, study[0])
    tuned_family = family_of(tuned_spec)
    tuned_length = tuned_family.train_tokens()
    tuning = (backward * tuned_spec.train.steps * tuned_spec.train.batch_size * tuned_length
              * per_token(tuned_spec, tuned_family, tuned_length)) if tuned_runs else 0  # fmt: skip
    return len(spec.seeds) * (training + len(study) * evaluation + tuned_runs * tuning)


def until_tokens(spec: JobSpec, family: Family, steps: int | None = None) -> int:
    """The tokens ``train.until``'s checks read in one run that goes to the cap (``steps``, default
    ``train.steps``): one check every ``every`` steps, each its held-out examples at the training size
    (``Family.held_out``); 0 without ``until``."""
    until = spec.train.until
    if until is None:
        return 0
    held_out = family.held_out(until.samples, 0)
    cap = spec.train.steps if steps is None else steps
    return cap // until.every * held_out.eval_tokens(family.train_size())


def run_own_spec(spec: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """The spec a run of a fanned-out benchmark reports as its own (``GET /v1/jobs/{id}`` of a child job): the
    benchmark's spec narrowed to that run, so a reader sees its method and seed rather than every run's.

    ``run`` is the child's run record (``index``, ``seed``, and for a suite's run its ``position``). The spec is
    the suite task's (a suite's run) with ``methods`` the run's one entry and ``seeds`` its one seed; a study's
    run is one of its arms (the base model, a rule, fine-tuned or not: ``posenc.extension.arms``), shown as that
    arm's method with the params the study fills in, labelled with the arm's name, the study's ``extension``
    kept. The worker still runs from the benchmark's whole spec, which its record keeps."""
    whole = JobSpec.model_validate(spec)
    position = run.get("position")
    part = whole if position is None else suite_specs(whole)[int(position)]
    index, seed = int(run["index"]), int(run["seed"])
    if part.extension is not None:
        arm = arms(part)[index]
        entry = arm.ref.model_copy(update={"label": arm.label})
    else:
        entry = part.methods[index]
    narrowed = part.model_copy(update={"methods": [entry], "seeds": [seed], "suite": None})
    own: dict[str, Any] = narrowed.model_dump(mode="json")
    return own
