"""What a training job will take before it runs: its peak memory per run and its duration, pure functions of the
spec, checked by the gateway at submission (``service.routers.jobs``: a 413 naming the spec field that drives
either past its limit) and shown as the job's ``estimate_s``.

Memory (:func:`run_memory`), per (method, seed) run, in bytes of float32:

- the model's weights, their gradients and AdamW's two moments: 4 x the parameters;
- the training batch's activations kept for the backward pass: per layer and token ``ACTIVATION_FLOATS_PER_DIM``
  x the width (q, k, v, the norms, the feed-forward's 4d in and out, the residuals, the grads in flight), the
  logits three times (logits, log-softmax, their gradient) and, for a method that materialises its attention
  scores (score_mod and attention kinds; bias methods through their (H, N, N) mask), ``TRAIN_SCORE_MAPS`` maps
  (B, H, N, N) per layer and the method's own workspace (``Applier.extra_workspace_elements``);
- the evaluation at its largest batch of its longest size (no gradients: one layer's working set at a time,
  ``EVAL_SCORE_MAPS`` maps for the materialising methods);
- the method's tables: a bias method's (H, N, N), kept per length evaluated (the fixed ones are cached), an
  absolute method's (N, D), a rotary method's cos/sin (N, d).

Peak = a base every run allocates (``RUN_BASE_BYTES``), the weights and optimizer state, the larger of training
and evaluation, and the tables. Against the peak resident memory of runs in one process (torch 2.13, CPU), from
a 97 MiB quickstart run to a 4.8 GiB probes evaluation at 2048 tokens with ALiBi, the estimate was 0.8x to 2.7x
the measured (``bench/estimate_accuracy.py --memory``).

Duration (:func:`estimate_seconds`): a linear model in counts read off the spec (:func:`time_features`): per
worker process (a job, and each run of a benchmark that fans out: the fork, the claim, the data set-up), per
run (the model built, checkpoints and the record written), per training step, per token read in training and in
evaluation (data drawn in Python, the elementwise work), per evaluation size, per multiply-add (the model's
matrix work, forward and backward; a materialising method's scores counted as ``SCORE_MACS`` per element), and
for a benchmark its assembly (the table and plots). The default seconds per unit (``SECONDS_PER``) were
measured on 2 CPU cores; every worker folds what its fresh runs took, as a factor over the defaults, into a
moving average per (queue, task family, attention path) (``speed_key``), and the gateway multiplies by it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from posenc.errors import BudgetExceeded, Loc
from posenc.extension import arms, finetune_job_spec
from posenc.pe import get_method
from posenc.pe.appliers import Layer, build_applier
from posenc.schemas.jobs import JobCreate, JobKind, JobSpec, MethodRef
from posenc.tasks import Family, family_of
from posenc.tasks.base import SPEC
from posenc.tasks.suites import suite_specs

FLOAT_BYTES = 4
RUN_BASE_BYTES = 128 * 1024 * 1024  # what any run allocates: data set-up, imports on first use, allocator pools
ACTIVATION_FLOATS = 16  # per layer and token, x the width, besides the feed-forward's (4 x ffn_mult)
TRAIN_SCORE_MAPS = 4  # (B, H, N, N) maps a materialising layer keeps for backward: logits, masked, weights, grad
EVAL_SCORE_MAPS = 3  # the same without gradients, one layer at a time
FUSED_MASK_MAPS = 1  # torch's CPU attention kernel still builds one (N, N) float mask per call (measured)
BIAS_SCORE_MAPS = 2  # a bias method: its mask expanded over the batch, and the scores
EVAL_TOKENS_PER_BATCH = 8192  # text: windows per forward pass (posenc.training.evaluate)
EVAL_PIXELS_PER_BATCH = 2**18  # images per forward pass = this // S^2
TOKEN_EVAL_BATCH = 50  # token tasks: instances per forward pass
GRAPH_EVAL_BATCH = 64
MATERIALISING_KINDS = frozenset({"score_mod", "attention"})

Path_ = str  # "fused" (a kernel that never holds the scores) or "materialised"


# --------------------------------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class MemoryEstimate:
    """A run's peak in bytes, its parts, and the spec field that drives it (the loc a 413 names)."""

    peak: int
    weights: int  # weights, gradients and optimizer state
    train: int  # training activations at the batch
    eval: int  # evaluation activations at the longest size
    tables: int  # the method's tables
    loc: Loc


def _method_kind(family: Family, ref: MethodRef) -> tuple[str, bool]:
    """The kind of attention a run's method takes (the worst of a pattern's layers) and whether any is per layer."""
    names = [ref.method_name] if not ref.patterned else [setup.method for setup in family.layer_setups(ref) or []]
    specs = [get_method(name) for name in names if name != "config"]
    if not specs:
        return "rotary", False
    kinds = [spec.kind.value for spec in specs]
    kind = next((k for k in ("attention", "score_mod", "bias", "absolute", "rotary") if k in kinds), kinds[0])
    return kind, any(spec.per_layer for spec in specs)


def attention_path(family: Family, ref: MethodRef) -> Path_:
    """'materialised' for a method whose layers hold (B, H, N, N) scores (score_mod and attention kinds), else
    'fused'."""
    return "materialised" if _method_kind(family, ref)[0] in MATERIALISING_KINDS else "fused"


def _workspace(family: Family, ref: MethodRef, batch: int, length: int) -> int:
    """Elements a materialising method allocates beyond its score maps (``Applier.extra_workspace_elements``)."""
    if ref.patterned:
        return 0
    method = get_method(ref.method_name)
    if method.kind.value not in MATERIALISING_KINDS:
        return 0
    model = family.spec.model
    layer = Layer(num_heads=model.heads, head_dim=model.dim // model.heads, causal=True, model_dim=model.dim)
    try:
        applier = build_applier(method, method.parse_params(method.training_params(ref.params)), layer)
        maps = 2 * batch * model.heads * length * length  # what the base class counts: two maps
        return max(0, applier.extra_workspace_elements(batch, length, length) - maps)
    except Exception:  # the spec's own checks report a method that cannot be built
        return 0


def parameters(family: Family) -> int:
    """The model's parameters: embeddings (or the patch projection), every block, the head."""
    model = family.spec.model
    dim, layers, mult = model.dim, model.layers, model.ffn_mult
    classes = family.output_classes()
    block = (4 + 2 * mult) * dim * dim + (3 + 1 + mult + 1 + 4) * dim
    return family.input_parameters(dim) + layers * block + 2 * dim + classes * dim + classes


def eval_batch(family: Family, size: int) -> int:
    """Examples per evaluation forward pass at ``size``."""
    if family.model == "text":
        return max(1, EVAL_TOKENS_PER_BATCH // size)
    if family.model == "images":
        return min(family.spec.eval.samples, max(1, EVAL_PIXELS_PER_BATCH // (size * size)))
    if family.model == "graphs":
        return min(family.spec.eval.samples, GRAPH_EVAL_BATCH)
    return min(TOKEN_EVAL_BATCH, max(1, family.eval_tokens(size) // family.tokens(size)))


def _activations(family: Family, ref: MethodRef, kind: str, batch: int, length: int, *, training: bool) -> int:
    """Bytes of one forward pass's activations (training: every layer's, kept for backward; else one layer's)."""
    model = family.spec.model
    dim, heads, layers = model.dim, model.heads, model.layers
    per_token = (ACTIVATION_FLOATS + 4 * model.ffn_mult) * dim
    score_map = batch * heads * length * length
    if kind in MATERIALISING_KINDS:
        maps = (TRAIN_SCORE_MAPS if training else EVAL_SCORE_MAPS) * score_map
        maps += _workspace(family, ref, batch, length)
    elif kind == "bias":
        maps = BIAS_SCORE_MAPS * score_map
    else:
        maps = FUSED_MASK_MAPS * length * length
    logits = (3 if training else 2) * batch * (length if family.model in ("text", "tokens") else 1)
    logits *= family.output_classes()
    held = layers if training else 1
    return FLOAT_BYTES * (held * (batch * length * per_token + maps) + logits)


def _tables(family: Family, kind: str, per_layer: bool, lengths: Iterable[int]) -> int:
    """Bytes of the method's tables over the lengths a run reads (a bias table cached per length)."""
    model = family.spec.model
    lengths = list(lengths)
    longest = max(lengths)
    if kind == "bias":
        size = sum(model.heads * n * n for n in lengths)
    elif kind == "absolute":
        size = longest * model.dim
    elif kind == "rotary":
        size = 2 * longest * (model.dim // model.heads)
    else:
        size = 0
    return FLOAT_BYTES * size * (model.layers if per_layer else 1)


def run_memory(kind: JobKind, spec: JobSpec, ref: MethodRef | None = None) -> MemoryEstimate:
    """The peak memory of one run of ``spec`` with method ``ref`` (default its first): see the module's text.
    ``loc`` names the field to change: ``train.batch_size`` when training drives it, the largest evaluation
    size (or the training size the default evaluation sizes scale from) when evaluation does."""
    family = family_of(spec)
    ref = ref if ref is not None else spec.methods[0]
    method_kind, per_layer = _method_kind(family, ref)
    weights = FLOAT_BYTES * 4 * parameters(family)
    trains = not (kind == "extrapolate" and spec.checkpoint is not None)
    train_length = family.train_tokens()
    train = _activations(family, ref, method_kind, spec.train.batch_size, train_length, training=True) if trains else 0
    sizes = [family.train_size()] if kind == "train" else family.eval_sizes()
    largest = max(sizes, key=lambda size: _activations(family, ref, method_kind, eval_batch(family, size),
                                                       family.tokens(size), training=False))  # fmt: skip
    evaluation = _activations(family, ref, method_kind, eval_batch(family, largest), family.tokens(largest),
                              training=False)  # fmt: skip
    lengths = {train_length, *(family.tokens(size) for size in sizes)}
    tables = _tables(family, method_kind, per_layer, lengths)
    if train >= evaluation:
        loc: Loc = (*SPEC, "train", "batch_size")
    else:
        given = family.given_eval_sizes()
        loc = (*SPEC, *family.eval_field, given.index(largest)) if given and largest in given else (
            *SPEC, *family.train_field)  # fmt: skip
    peak = RUN_BASE_BYTES + weights + max(train, evaluation) + tables
    return MemoryEstimate(peak, weights, train, evaluation, tables, loc)


def job_memory(create: JobCreate) -> MemoryEstimate | None:
    """The largest run's peak memory over every run of a training job (every method, every task of a suite, a
    study's fine-tunes); None for a compute job (its own budget is ``max_job_output_bytes``)."""
    if not isinstance(create.spec, JobSpec):
        return None
    estimates = []
    for part in suite_specs(create.spec):
        for ref in part.methods:
            estimates.append(run_memory(create.kind, part, ref))
        if part.extension is not None and part.extension.finetune_steps:
            tuned = finetune_job_spec(part, arms(part)[0])
            estimates.append(run_memory("benchmark", tuned))
    return max(estimates, key=lambda estimate: estimate.peak)


# ------------------------------------------------------------------------------------------------- duration
# Seconds per unit of each count of ``job_groups`` on one worker of the cpu queue (2 torch threads), measured on
# this repository's 2-core CPU machine with nothing else running, with
#     .venv/bin/python bench/estimate_accuracy.py --calibrate
# which times 18 small jobs in one process (run_job) and fits these by non-negative least squares on the relative
# error (17 of its 18 jobs within 0.79x to 1.14x). Its jobs are too small to tell some counts apart; those are
# set by other measurements: ``macs`` is the multiply-add rate of the whole quick suite on the same machine (9.4e11
# in 120 s, 8e9 a second); ``process``, ``setup``, ``run`` and ``step`` are what a worker of a fresh `posenc serve`
# takes (bench/estimate_accuracy.py: 64 one-step runs in 13.1 s, about 0.2 s each; 300 steps of a tiny model in
# 3.7 s, twice the in-process step: the worker's progress and checkpoint writes). A loaded machine runs slower
# (a tiny model's step took 0.4 s at load 8 instead of 5 ms): the workers' measurements scale these up after their
# first runs.
SECONDS_PER: dict[str, float] = {
    "process": 0.05,  # one job's attempt outside its code: the fork, the claim, the result and finish writes
    "setup": 0.05,  # inside it: the spec validated again, the data set up
    "setup:text": 0.41,  # text's corpus read and split, per process
    "run": 0.05,  # one run: the model built, final checkpoint and record written
    "step": 0.01,  # one training step: optimizer, clipping, checkpoint and progress bookkeeping
    "train_tokens:text": 1.4e-5,
    "train_tokens:tokens": 1.4e-5,  # token tasks draw their instances in Python
    "train_tokens:images": 9.1e-6,  # scenes rendered per step
    "train_tokens:graphs": 1.0e-4,  # graphs and their BFS distances in Python
    "eval_size": 0.018,
    "eval_tokens:text": 3.2e-6,  # fit 0: set to the token tasks' rate
    "eval_tokens:tokens": 3.2e-6,
    "eval_tokens:images": 2.8e-4,
    "eval_tokens:graphs": 1.9e-4,
    "macs": 1.25e-10,  # training: forward and backward, counted as 3 forward passes (8e9 a second)
    "eval_macs": 1.7e-10,
    "assemble": 1.5,  # a benchmark's table, findings and plots
}
# A run with train.compile on: its first compiled step, tracing and compiling the model, seconds of the host's
# CPU whatever the device (12-13 s measured on 2 cores for a 1-layer model, quiet; more under load and for deeper
# models); not scaled by a queue's speed. An upper bound once Inductor's cache holds the model (1.5 s then).
COMPILE_S = 15.0
SCORE_MACS = 16  # multiply-add equivalents per (query, key) score element of a materialising method, per layer
GPU_SPEED = 0.2  # a GPU worker's default factor over the CPU seconds, before any run was measured there
SPEED_BOUNDS = (0.02, 50.0)  # a measured factor is clipped to this: one odd run cannot wreck every estimate


def speed_key(queue: str, family: str, path: Path_) -> str:
    """The job store's field for the measured factor of (queue, family, attention path)."""
    return f"speed:{queue}:{family}:{path}"


def overhead_key(queue: str) -> str:
    """The job store's field for the measured seconds one attempt on ``queue`` spends outside its work (claim,
    imports on first use, result and terminal writes): counted once per process in place of the default."""
    return f"overhead:{queue}"


@dataclass(frozen=True)
class RunGroup:
    """Runs of one (family, attention path), with the counts their duration is read from."""

    family: str
    path: Path_
    features: dict[str, float]


def _add(features: dict[str, float], key: str, value: float) -> None:
    features[key] = features.get(key, 0.0) + value


def _macs_per_token(spec: JobSpec, family: Family, length: int, path: Path_) -> float:
    from posenc.jobspec import model_macs_per_token

    macs = float(model_macs_per_token(spec, length, family))
    if path == "materialised":
        macs += SCORE_MACS * spec.model.layers * spec.model.heads * length
    return macs


def _run_features(
    kind: JobKind, spec: JobSpec, family: Family, path: Path_, *, steps: int, evaluates: bool = True
) -> dict[str, float]:
    """The counts of one run: ``steps`` training steps of the spec's batch, then its evaluation sizes. With
    ``train.until`` the checks' held-out evaluation counts as evaluation tokens, every check up to the cap: the
    estimate is an upper bound on a run that stops early."""
    model = family.model
    features: dict[str, float] = {"run": 1.0}
    if steps and spec.train.compile != "off":  # "auto" compiles on a GPU queue only (estimate_seconds)
        _add(features, f"compile:{spec.train.compile}", 1.0)
    if steps:
        length = family.train_tokens()
        tokens = float(steps * spec.train.batch_size * length)
        _add(features, "step", steps)
        _add(features, f"train_tokens:{model}", tokens)
        _add(features, "macs", 3 * tokens * _macs_per_token(spec, family, length, path))
        from posenc.jobspec import until_tokens

        checked = float(until_tokens(spec, family, steps))
        if checked:
            size = family.tokens(family.train_size())
            _add(features, f"eval_tokens:{model}", checked)
            _add(features, "eval_macs", checked * _macs_per_token(spec, family, size, path))
    if evaluates:
        sizes = [family.train_size()] if kind == "train" else family.eval_sizes()
        for size in sizes:
            tokens = float(family.eval_tokens(size))
            _add(features, "eval_size", 1)
            _add(features, f"eval_tokens:{model}", tokens)
            _add(features, "eval_macs", tokens * _macs_per_token(spec, family, family.tokens(size), path))
    return features


def _process(features: dict[str, float], family: Family, count: float) -> None:
    _add(features, "process", count)
    _add(features, "setup", count)
    if family.model == "text":
        _add(features, "setup:text", count)


def job_groups(create: JobCreate) -> list[RunGroup]:
    """Every run of a training job as counts, grouped by (family, attention path); a benchmark of several runs
    fans out, so each run also counts a process of its own and the benchmark its assembly. [] for compute."""
    spec = create.spec
    if not isinstance(spec, JobSpec):
        return []
    kind = create.kind
    parts = suite_specs(spec)
    runs = sum(len(part.methods) * len(set(part.seeds)) for part in parts)
    fans_out = kind == "benchmark" and (runs > 1 or spec.extension is not None)
    groups: dict[tuple[str, Path_], dict[str, float]] = {}
    first = True
    for part in parts:
        family = family_of(part)
        seeds = len(set(part.seeds))
        for ref in part.methods if part.extension is None else [part.extension.base]:
            path = attention_path(family, ref)
            features = groups.setdefault((family.name, path), {})
            if first:
                _process(features, family, 1)
                if kind == "benchmark" and fans_out:
                    _add(features, "assemble", 1)
                first = False
            if part.extension is not None:
                _study_features(features, part, family, path)
                continue
            trains = not (kind == "extrapolate" and part.checkpoint is not None)
            one = _run_features(kind, part, family, path, steps=part.train.steps if trains else 0)
            for key, value in one.items():
                _add(features, key, seeds * value)
            if fans_out:
                _process(features, family, seeds)
    return [RunGroup(family, path, features) for (family, path), features in groups.items()]


def _study_features(features: dict[str, float], spec: JobSpec, family: Family, path: Path_) -> None:
    """A context-extension study: the base model trained once per seed, every arm evaluated (each a process),
    the fine-tuned arms trained further."""
    seeds = len(set(spec.seeds))
    study = arms(spec)
    tuned = sum(1 for arm in study if arm.finetune)
    for key, value in _run_features("benchmark", spec, family, path, steps=spec.train.steps, evaluates=False).items():
        _add(features, key, seeds * value)
    for key, value in _run_features("benchmark", spec, family, path, steps=0).items():
        _add(features, key, seeds * len(study) * value)
    _process(features, family, seeds * len(study))
    if tuned:
        tuned_spec = finetune_job_spec(spec, study[0])
        steps = tuned_spec.train.steps
        one = _run_features("benchmark", tuned_spec, family_of(tuned_spec), path, steps=steps, evaluates=False)
        for key, value in one.items():
            _add(features, key, seeds * tuned * value)


def seconds_of(features: Mapping[str, float]) -> float:
    """The default seconds of some counts (``SECONDS_PER``)."""
    return sum(SECONDS_PER.get(key, 0.0) * value for key, value in features.items())


def default_speed(queue: str) -> float:
    return GPU_SPEED if queue == "gpu" else 1.0


def estimate_seconds(groups: Iterable[RunGroup], queue: str, speeds: Mapping[str, float | None]) -> float:
    """Seconds a job should take on one worker of ``queue``: each group's default seconds times the factor
    measured for its (queue, family, path) (``speeds``, by ``speed_key``; the queue's default before any), and
    each process's time outside its work as the queue's workers measured it (``overhead_key``) once they have,
    and ``COMPILE_S`` per run that compiles (``train.compile`` on; auto on the gpu queue)."""
    overhead = speeds.get(overhead_key(queue))
    total = 0.0
    for group in groups:
        measured = speeds.get(speed_key(queue, group.family, group.path))
        speed = measured if measured is not None and measured > 0 else default_speed(queue)
        features = dict(group.features)
        if overhead is not None and overhead > 0:
            total += overhead * features.pop("process", 0.0)
        compiled = features.pop("compile:on", 0.0) + features.pop("compile:auto", 0.0) * (queue == "gpu")
        total += COMPILE_S * compiled + speed * seconds_of(features)
    return round(total, 2)  # hundredths: a job of a tenth of a second is still read to a tenth of itself


def measured_speed(create: JobCreate, seconds: float) -> tuple[str, str, float] | None:
    """(family, path, factor) that one fresh run (or whole job) of ``create`` measured: its wall time in the
    worker over its default seconds (less the per-process part, outside the time the worker measures).
    None for compute jobs, for a job of several groups (a suite in one process) and for odd times."""
    groups = job_groups(create)
    if len(groups) != 1 or seconds <= 0:
        return None
    group = groups[0]
    features = dict(group.features)
    features.pop("assemble", None)
    features.pop("process", None)  # outside the time the worker measures
    expected = seconds_of(features)
    if expected <= 0:
        return None
    low, high = SPEED_BOUNDS
    return group.family, group.path, min(high, max(low, seconds / expected))


TRAIN_PARTS = ("step", "train_tokens:", "macs")
EVAL_PARTS = ("eval_size", "eval_tokens:", "eval_macs")


def time_driver(create: JobCreate) -> Loc:
    """The spec field that drives a job's duration: ``train.steps`` when training is most of it, the evaluation
    sizes' field (its largest size, or the training size the defaults scale from) when evaluation is, else
    ``seeds`` or ``methods`` (many runs, each with its fixed costs)."""
    spec = create.spec
    assert isinstance(spec, JobSpec)
    parts = {"train": 0.0, "eval": 0.0, "runs": 0.0}
    for group in job_groups(create):
        for key, value in group.features.items():
            seconds = SECONDS_PER.get(key, 0.0) * value
            name = "train" if key.startswith(TRAIN_PARTS) else "eval" if key.startswith(EVAL_PARTS) else "runs"
            parts[name] += seconds
    driver = max(parts, key=lambda name: parts[name])
    first = suite_specs(spec)[0]
    if driver == "runs":
        return (*SPEC, "seeds") if len(first.seeds) > len(first.methods) else (*SPEC, "methods")
    if driver == "train":
        return (*SPEC, "train", "steps")
    family = family_of(first)
    given = family.given_eval_sizes()
    if given:
        return (*SPEC, *family.eval_field, given.index(max(given)))
    return (*SPEC, *family.train_field)


# ---------------------------------------------------------------------------------------------------- limits
def check_memory(create: JobCreate, limit: int) -> MemoryEstimate | None:
    """``BudgetExceeded`` (a 413 naming the field that drives it) when a run's peak memory is over ``limit``
    (``worker_memory_bytes``); the estimate otherwise (None for a compute job)."""
    estimate = job_memory(create)
    if estimate is not None and estimate.peak > limit:
        field = ".".join(map(str, estimate.loc[1:]))
        driver = "training at this batch" if estimate.train >= estimate.eval else "evaluation at this size"
        raise BudgetExceeded(
            f"one run's peak memory (about {human_bytes(estimate.peak)}: {driver}, weights and optimizer state "
            f"{human_bytes(estimate.weights)}, activations {human_bytes(max(estimate.train, estimate.eval))}, "
            f"method tables {human_bytes(estimate.tables)})",
            estimate.peak,
            limit,
            f"make {field} smaller (or the model); a worker with more memory needs a larger worker_memory_bytes",
            setting="worker_memory_bytes, POSENC_WORKER_MEMORY_BYTES",
            fields=[estimate.loc],
        )
    return estimate


def fans_out(create: JobCreate) -> bool:
    """Whether a benchmark runs as one job per run (several runs, or a study's arms)."""
    spec = create.spec
    if create.kind != "benchmark" or not isinstance(spec, JobSpec):
        return False
    runs = sum(len(part.methods) * len(set(part.seeds)) for part in suite_specs(spec))
    return runs > 1 or spec.extension is not None


def longest_attempt(create: JobCreate, queue: str, speeds: Mapping[str, float | None]) -> tuple[float, JobCreate]:
    """The seconds of the longest single attempt a job makes, and that attempt's job: the whole job, or for a
    benchmark that fans out its longest run (each run is a job of its own, under the time limit on its own)."""
    spec = create.spec
    if not fans_out(create) or not isinstance(spec, JobSpec) or spec.extension is not None:
        return estimate_seconds(job_groups(create), queue, speeds), create
    longest: tuple[float, JobCreate] = (0.0, create)
    for part in suite_specs(spec):
        for ref in part.methods:
            one = JobCreate(kind="benchmark", spec=part.model_copy(update={"methods": [ref], "seeds": part.seeds[:1]}))
            seconds = estimate_seconds(job_groups(one), queue, speeds)
            if seconds > longest[0]:
                longest = (seconds, one)
    return longest


def check_duration(create: JobCreate, limit_s: float, queue: str, speeds: Mapping[str, float | None]) -> None:
    """``BudgetExceeded`` (a 413 naming the field that drives it) when one attempt of the job would run past
    ``limit_s`` (the job time limit, at which the job is stopped and fails)."""
    seconds, attempt = longest_attempt(create, queue, speeds)
    if seconds <= limit_s:
        return
    loc = time_driver(attempt)
    field = ".".join(map(str, loc[1:]))
    what = "this job's" if attempt is create else "its longest run's (each run of a benchmark is a job of its own)"
    raise BudgetExceeded(
        f"{what} estimated duration (about {human_seconds(seconds)} on one worker of the {queue} queue)",
        math.ceil(seconds),
        int(limit_s),
        f"make {field} smaller, or split the job into several",
        unit="s",
        setting="job_soft_time_limit_s, POSENC_JOB_SOFT_TIME_LIMIT_S",
        fields=[loc],
    )


def speed_keys(create: JobCreate, queue: str) -> list[str]:
    """The job store's fields of the measured factors a job's estimate reads."""
    return sorted({speed_key(queue, group.family, group.path) for group in job_groups(create)} | {overhead_key(queue)})


def human_seconds(seconds: float) -> str:
    """A duration as people read it: 42 s, 7.5 min, 3.2 h, 31 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def human_bytes(size: float) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    index = 0 if size <= 0 else min(len(units) - 1, int(math.log(size, 1024)))
    return f"{size / 1024**index:.1f} {units[index]}"
