"""What a job spec must satisfy beyond its schema: checked by the gateway before a job is queued (so an
unknown method is a 404 and a bad value a 422 naming the field, not a failed job minutes later) and again by
the trainer (or, for a compute job, by ``posenc.compute.run_compute_job``). Needs the method registry, never
the training code: the gateway may not import ``posenc.training``.

Also the length arithmetic both sides share: task sizes, default evaluation lengths.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from posenc.compute import check_job_budget, prepare_job
from posenc.errors import InvalidInput
from posenc.pe import (
    AbsoluteContext,
    BiasContext,
    RotaryContext,
    bias_dense,
    encoding,
    get_method,
    rotary_frequencies,
)
from posenc.schemas.jobs import ComputeJobSpec, JobCreate, JobKind, JobSpec, MethodRef, SyntheticTask
from posenc.schemas.methods import Kind

MULTI_AXIS_METHODS = frozenset({"sinusoidal_2d", "sinusoidal_3d", "alibi_2d", "rope_2d_axial"})
CHECKPOINT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
SPEC = ("body", "spec")


def task_sequence_length(task: SyntheticTask, size: int) -> int:
    """The longest ``BOS prompt SEP target EOS`` sequence of a task instance of size n."""
    return 3 * size + 5 if task == "addition" else 2 * size + 3


def max_task_size(task: SyntheticTask, train_length: int) -> int:
    """n_train: the largest size whose longest sequence fits in ``train_length`` tokens (0 if none does)."""
    return (train_length - 5) // 3 if task == "addition" else (train_length - 3) // 2


def validate_job(create: JobCreate, *, max_compute_bytes: int | None = None) -> None:
    """The gateway's check of ``POST /v1/jobs``: :func:`validate_spec` for train, extrapolate and benchmark;
    for compute, the request's prepare step (as its route would run it; errors name ``body.spec.request``) and,
    with ``max_compute_bytes``, the job's memory budget (``BudgetExceeded``, a 413)."""
    if isinstance(create.spec, ComputeJobSpec):
        prepared = prepare_job(create.spec)
        if max_compute_bytes is not None:
            check_job_budget(prepared, max_compute_bytes)
        return
    validate_spec(create.kind, create.spec)


# ------------------------------------------------------------------------------------------------ lengths
def train_task_size(spec: JobSpec) -> int:
    """Tasks: the largest training size n_train for ``spec.train.length`` (see ``posenc.training.data``)."""
    assert spec.data.task is not None
    return max_task_size(spec.data.task, spec.train.length)


def in_distribution_length(spec: JobSpec) -> int:
    """L for text (tokens), n_train for tasks (task size): the x of 'in distribution' in results and plots."""
    return spec.train.length if spec.data.task is None else train_task_size(spec)


def eval_lengths(spec: JobSpec) -> list[int]:
    """``spec.eval.lengths``, default [L, 2L, 4L, 8L] (text) or [n, 2n, 4n, 8n] task sizes."""
    if spec.eval.lengths is not None:
        return list(spec.eval.lengths)
    base = in_distribution_length(spec)
    return [base, 2 * base, 4 * base, 8 * base]


def model_sequence_lengths(spec: JobSpec) -> list[int]:
    """The longest sequence the model sees at each evaluation length (tokens)."""
    if spec.data.task is None:
        return eval_lengths(spec)
    return [task_sequence_length(spec.data.task, size) for size in eval_lengths(spec)]


# --------------------------------------------------------------------------------------------- validation
def validate_spec(kind: JobKind, spec: JobSpec) -> None:
    """Raise for what the schema cannot check. Unknown methods raise ``UnknownMethodError``, bad params
    ``pydantic.ValidationError``, everything else ``InvalidInput`` naming the field."""
    if kind != "benchmark" and len(spec.methods) != 1:
        raise InvalidInput((*SPEC, "methods"), f"a {kind} job takes exactly one method; use 'benchmark' for several")
    if spec.checkpoint is not None:
        if kind != "extrapolate":
            raise InvalidInput((*SPEC, "checkpoint"), "only an extrapolate job evaluates an existing checkpoint")
        if not CHECKPOINT_ID.match(spec.checkpoint):
            raise InvalidInput((*SPEC, "checkpoint"), "must be the id of a finished train job")
    if spec.data.task is not None and train_task_size(spec) < 1:
        minimum = task_sequence_length(spec.data.task, 1)
        raise InvalidInput(
            (*SPEC, "train", "length"),
            f"task {spec.data.task!r} needs train.length >= {minimum} (one instance of size 1)",
        )
    lengths = eval_lengths(spec)
    if not lengths:
        raise InvalidInput((*SPEC, "eval", "lengths"), "give at least one length, or leave it out")
    if spec.eval.protocol == "sliding" and spec.eval.stride is not None and spec.eval.stride > min(lengths):
        raise InvalidInput(
            (*SPEC, "eval", "stride"), f"stride {spec.eval.stride} is longer than eval length {min(lengths)}"
        )
    longest = max([spec.train.length, *model_sequence_lengths(spec)])
    for index, ref in enumerate(spec.methods):
        _validate_method(ref, (*SPEC, "methods", index), spec, longest)


def _validate_method(ref: MethodRef, loc: tuple[str | int, ...], spec: JobSpec, longest: int) -> None:
    method = get_method(ref.method)
    try:
        params = method.parse_params(ref.params)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput((*loc, "params", *first["loc"]), first["msg"]) from None
    if method.name in MULTI_AXIS_METHODS:
        raise InvalidInput(
            (*loc, "method"),
            f"{method.name!r} encodes 2D/3D positions; the job models are 1D sequence models",
        )
    if method.kind not in (Kind.ABSOLUTE, Kind.BIAS, Kind.ROTARY):
        raise InvalidInput((*loc, "method"), f"{method.kind.value} methods are not trainable in jobs yet")
    if method.learned and method.learned_init is None:
        raise InvalidInput(
            (*loc, "method"),
            f"{method.name!r} is learned but has no initialisation for training (learned_init)",
        )
    dim, heads = spec.model.dim, spec.model.heads
    try:
        if method.kind is Kind.ABSOLUTE:
            # cheap (T, D): also proves a learned table covers the longest evaluation sequence
            encoding(method, params, AbsoluteContext(grid=(longest,), dim=dim))
        elif method.kind is Kind.BIAS:
            probe = min(spec.train.length, 16)
            bias_dense(
                method,
                params,
                BiasContext(num_heads=heads, query_length=probe, key_length=probe, causal=True),
            )
        else:
            freqs = rotary_frequencies(
                method, params, RotaryContext(rotary_dim=dim // heads, seq_len=spec.train.length)
            )
            if freqs.num_axes != 1:
                raise InvalidInput((*loc, "method"), f"{method.name!r} rotates by {freqs.num_axes}D positions")
    except InvalidInput as exc:
        if exc.loc[:2] == SPEC:
            raise
        raise InvalidInput((*loc, "params"), f"{method.name!r} cannot run this job: {exc.msg}") from None
