"""Jobs: what a client submits, and the record it polls.

Spec field names (``methods``, ``data``, ``model``, ``train``, ``eval``, ``seeds``) are the contract;
every other field has a default. Kind ``compute`` takes another spec, ``{"route", "request"}``: a request of one
of the compute routes, run by a worker, its tensors written to an artifact.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from posenc.schemas.compute import AttentionRequest, BiasRequest, EncodingRequest, RotaryRequest
from posenc.schemas.tensors import INT64_MAX, Int64

JobKind = Literal["train", "extrapolate", "benchmark", "compute"]
ComputeRoute = Literal["bias", "rotary", "encodings", "attention"]
ComputeRequest = BiasRequest | RotaryRequest | EncodingRequest | AttentionRequest
COMPUTE_REQUESTS: dict[str, type[ComputeRequest]] = {
    "bias": BiasRequest,
    "rotary": RotaryRequest,
    "encodings": EncodingRequest,
    "attention": AttentionRequest,
}
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "expired"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "expired"})
GraphFamily = Literal["tree", "er"]
MAX_GRAPH_NODES = 256  # graph tasks: labels come from all-pairs BFS in Python, O(n·(n + E)) per graph
MAX_TASK_SIZE = 4096  # items of a synthetic task


class _Strict(BaseModel):
    # allow_inf_nan=False: JSON parsers turn NaN, Infinity and 1e400 into floats; every float field refuses them
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


MAX_METHODS = 32  # method entries of one benchmark
MAX_SEEDS = 64
MAX_EVAL_SIZES = 64  # evaluation lengths, resolutions or graph sizes of one job


MAX_PATTERN_LAYERS = 64  # layers of a written-out unit (a unit repeats over the model's layers)
MAX_SPAN = 1 << 20  # tokens of a window or chunk (a span past the longest sequence is full attention)


class QueryTemperature(_Strict):
    """Llama 4's query temperature: q at position n times log(1 + floor((n + 1)/floor_scale))·attn_scale + 1."""

    floor_scale: float = Field(gt=0, le=MAX_SPAN, description="Llama 4: 8192 (its chunk size)")
    attn_scale: float = Field(ge=0, le=10, description="Llama 4: 0.1")


class LayerOverride(_Strict):
    """One layer of a pattern's unit: what it changes of the entry's method and params."""

    method: str | None = Field(
        default=None, max_length=128, description="this layer's method (default: the entry's); 'nope' for none"
    )
    params: dict[str, Any] | None = Field(
        default=None,
        description="this layer's params: merged over the entry's when the method is the entry's, else its own",
    )
    rotary_fraction: float | None = Field(
        default=None, gt=0, le=1, description="rotary methods: the share of each head's features rotated (default 1)"
    )
    window: int | None = Field(
        default=None, ge=1, le=MAX_SPAN, description="sliding window: query i attends to keys i − w + 1 .. i"
    )
    chunk: int | None = Field(
        default=None, ge=1, le=MAX_SPAN, description="chunked attention: blocks of c tokens, each seeing only itself"
    )
    temperature: QueryTemperature | None = Field(default=None, description="Llama 4's query temperature")

    @model_validator(mode="after")
    def _one_span(self) -> LayerOverride:
        if self.window is not None and self.chunk is not None:
            raise ValueError("give window or chunk, not both")
        return self


class MethodRef(_Strict):
    method: str | None = Field(
        default=None,
        max_length=128,
        description="the method; with a pattern or layers, the method every layer starts from; none with a config",
    )
    params: dict[str, Any] = Field(default_factory=dict)
    pattern: str | None = Field(
        default=None,
        max_length=64,
        description="decoders: a named layer pattern of real models (GET /v1/tasks lists them), tiled over the "
        "model's layers; its local spans are a quarter of the training length",
    )
    layers: list[LayerOverride] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PATTERN_LAYERS,
        description="decoders: a unit of per-layer setups written out, tiled over the model's layers",
    )
    config: dict[str, Any] | Annotated[str, Field(max_length=128)] | None = Field(
        default=None,
        description="decoders: a real model's config.json, or a preset's name (GET /v1/models): every layer gets "
        "the positional setup POST /v1/models/resolve gives it (method, θ, scaling, rotated share, NoPE, window, "
        "temperature), its context lengths scaled to train.length and its spans a quarter of it, the shortest "
        "repeating unit of its layers tiled over the model's; give no method, params, pattern or layers with it",
    )
    label: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.+-]+$",
        description="the entry's name in results (default: the method, or the method and its pattern)",
    )

    @model_validator(mode="after")
    def _one_unit(self) -> MethodRef:
        if self.config is not None:
            given = [name for name in ("method", "pattern", "layers") if getattr(self, name) is not None]
            if self.params:
                given.append("params")
            if given:
                raise ValueError(f"a config sets every layer's method and params; give no {', '.join(given)} with it")
            return self
        if self.method is None:
            raise ValueError("give a method (or a model config)")
        if self.pattern is not None and self.layers is not None:
            raise ValueError("give pattern or layers, not both")
        return self

    @property
    def patterned(self) -> bool:
        return self.pattern is not None or self.layers is not None or self.config is not None

    @property
    def unit_field(self) -> str:
        """The field that makes the entry patterned: 'config', 'pattern' or 'layers' (an error's location)."""
        return "config" if self.config is not None else "pattern" if self.pattern is not None else "layers"

    @property
    def method_name(self) -> str:
        """The entry's method; a config's entry has none of its own: 'config' (its layers name theirs)."""
        return self.method if self.method is not None else "config"

    @property
    def config_name(self) -> str | None:
        """A config entry's source: the preset's name, or the config's model_type ('custom' without one)."""
        if self.config is None:
            return None
        if isinstance(self.config, str):
            return self.config
        model_type = self.config.get("model_type")
        if not isinstance(model_type, str):
            nested = self.config.get("text_config")
            model_type = nested.get("model_type") if isinstance(nested, dict) else None
        return model_type if isinstance(model_type, str) and model_type else "custom"

    @property
    def name(self) -> str:
        """The entry's name in results and run folders."""
        if self.label is not None:
            return self.label
        if self.config is not None:
            return "config-" + re.sub(r"[^A-Za-z0-9_.+-]", "_", self.config_name or "custom")[:57]
        if self.pattern is not None:
            return f"{self.method}+{self.pattern}"
        return f"{self.method}+layers" if self.layers is not None else self.method_name

    def overrides(self) -> list[dict[str, Any]] | None:
        """The written-out unit as plain overrides (the temperature as (floor_scale, attn_scale)); None without."""
        if self.layers is None:
            return None
        unit = []
        for layer in self.layers:
            override = layer.model_dump(exclude_none=True)
            if layer.temperature is not None:
                override["temperature"] = (layer.temperature.floor_scale, layer.temperature.attn_scale)
            unit.append(override)
        return unit


class DataSpec(_Strict):
    """The data: a character-level corpus, or a task of one of the task families (``posenc.tasks``: synthetic
    sequence tasks, RULER-style probes, image tasks on a ViT, graph tasks on a graph transformer). Each family
    reads its own fields; a field of another family is refused, naming it."""

    corpus: str | None = Field(
        default=None,
        max_length=4096,
        description="text: 'stdlib' (built offline from the Python standard library), 'tinyshakespeare' "
        "(tinyshakespeare.txt in a data directory), or a text file under the data directories "
        "(POSENC_DATA_DIR, POSENC_DATA_DIRS), by name relative to one of them or by an absolute path inside one",
    )
    task: str | None = Field(
        default=None,
        max_length=64,
        description="a task of a task family: synthetic sequence tasks (copy, copy_single, copy_replace, reverse, "
        "addition, selective_copy, counting, flip_flop, parity, sort), the probes ('probes'), image tasks "
        "(shapes, quadrant, above_left, same_diagonal) or graph tasks (graph_distance); GET /v1/tasks lists them",
    )
    val_fraction: float = Field(default=0.1, gt=0, lt=0.5, description="text: the validation split's share")
    size: int | None = Field(
        default=None, ge=1, le=MAX_TASK_SIZE, description="sequence tasks: the largest training size, in items"
    )
    probes: list[str] | None = Field(
        default=None, min_length=1, max_length=16, description="probes: which probes the model is trained on"
    )
    image_size: int | None = Field(
        default=None, ge=1, le=1024, description="image tasks: training resolution in pixels (default 32)"
    )
    patch_size: int | None = Field(
        default=None, ge=1, le=256, description="image tasks: side of a square patch in pixels (default 4)"
    )
    num_nodes: int | None = Field(
        default=None, ge=3, le=MAX_GRAPH_NODES, description="graph tasks: nodes per training graph (default 12)"
    )
    graph_family: GraphFamily | None = Field(
        default=None,
        description="graph tasks: 'tree' (uniform random labelled trees, the default) or 'er' (sparse "
        "Erdos-Renyi graphs made connected)",
    )
    max_distance: int | None = Field(
        default=None,
        ge=2,
        le=MAX_GRAPH_NODES,
        description="graph tasks: classes of distance 1 ... max_distance, the last one '>= max_distance' (default 5)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DataSpec:
        if (self.corpus is None) == (self.task is None):
            raise ValueError("give exactly one of 'corpus' or 'task'")
        return self


class ModelSpec(_Strict):
    layers: int = Field(default=2, ge=1, le=48)
    dim: int = Field(default=128, ge=8, le=4096)
    heads: int = Field(default=4, ge=1, le=256)
    ffn_mult: int = Field(default=4, ge=1, le=16)
    pairing: Literal["half", "interleaved"] | None = Field(
        default=None,
        description="rotary methods: the feature pairs rotated together, half (GPT-NeoX/HF rotate_half) or "
        "interleaved (GPT-J/Meta); default each method's own (GET /v1/methods: pairings), a pairing a method "
        "cannot rotate in is refused",
    )
    cls_token: bool = Field(
        default=True,
        description="image tasks: classify from a CLS token (else mean-pool); graph tasks: add Graphormer's "
        "virtual graph token; text models ignore it",
    )

    @model_validator(mode="after")
    def _heads_divide_dim(self) -> ModelSpec:
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} is not divisible by heads={self.heads}")
        return self


class UntilSpec(_Strict):
    """Train until learned: every ``every`` steps the model is scored on ``samples`` held-out examples of its
    training size, and training stops once the family's headline in-distribution metric reaches ``score``;
    ``train.steps`` stays the cap (and the learning-rate schedule's length)."""

    score: float | None = Field(
        default=None,
        description="the threshold on the headline in-distribution metric (accuracies: at least this, in [0, 1]; "
        "perplexity: at most this); default the family's own learned rule (accuracies >= 0.9; probes: every probe, "
        "the control included, >= 0.8); text has none: give a score",
    )
    every: int = Field(default=100, ge=1, le=1_000_000, description="training steps between checks")
    samples: int = Field(
        default=50,
        ge=1,
        le=INT64_MAX,
        description="held-out examples per check (as eval.samples; text: windows of train.length)",
    )


class TrainSpec(_Strict):
    length: int = Field(default=128, ge=2, le=65536, description="training sequence length L")
    steps: int = Field(default=1000, ge=1, le=10_000_000)
    batch_size: int = Field(default=32, ge=1, le=4096)
    lr: float = Field(default=2e-3, gt=0, le=1.0)
    warmup_steps: int = Field(default=50, ge=0, le=INT64_MAX)
    weight_decay: float = Field(default=0.01, ge=0)
    checkpoint_every: int = Field(
        default=100, ge=1, le=INT64_MAX, description="steps between checkpoints (resume point)"
    )
    until: UntilSpec | None = Field(
        default=None,
        description="stop once learned (checked every until.every steps on held-out data); train.steps is the cap",
    )
    precision: Literal["auto", "bf16", "fp32"] = Field(
        default="auto",
        description="auto: bf16 autocast with TF32 matmuls on CUDA, float32 on the CPU; bf16: bf16 autocast on "
        "either device; fp32: float32 everywhere",
    )
    compile: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="torch.compile the model's training step (Inductor; its caches in the state directory, shared "
        "by every worker of the machine): auto: on CUDA only (on the CPU a first compile costs 10-60 s, more than "
        "most CPU runs); on; off: eager. A compile that fails falls back to eager and the run's record says why",
    )


class EvalSpec(_Strict):
    """The evaluation sizes, each family in its own unit: ``lengths`` in tokens (text, probes), ``sizes`` in items
    (sequence tasks), ``resolutions`` in pixels (images), ``num_nodes`` in nodes (graphs). The training size is
    always evaluated too."""

    lengths: list[Annotated[int, Field(ge=1, le=1_048_576)]] | None = Field(
        default=None,
        max_length=MAX_EVAL_SIZES,
        description="text and probes: evaluation lengths in tokens; default text [L, 2L, 4L, 8L], probes "
        "[L/4, L/2, L, 2L, 4L, 8L] with L = train.length",
    )
    sizes: list[Annotated[int, Field(ge=1, le=MAX_TASK_SIZE)]] | None = Field(
        default=None,
        max_length=MAX_EVAL_SIZES,
        description="sequence tasks: evaluation sizes in items; default every size 1 ... 2n, then 3n and 4n with "
        "n = data.size",
    )
    depths: list[Annotated[float, Field(ge=0, le=1)]] | None = Field(
        default=None, min_length=1, max_length=16, description="probes: needle depths (default 0, 1/4, 1/2, 3/4, 1)"
    )
    protocol: Literal["nonoverlapping", "sliding"] = "nonoverlapping"
    stride: int | None = Field(
        default=None, ge=1, le=INT64_MAX, description="sliding: tokens scored per window (default L/2)"
    )
    max_tokens: int = Field(default=65536, ge=1, le=INT64_MAX, description="scored tokens per length (text)")
    samples: int = Field(
        default=100,
        ge=1,
        le=INT64_MAX,
        description="held-out examples per size: sequences (tasks), per probe (probes), images, graphs",
    )
    resolutions: list[Annotated[int, Field(ge=1, le=1024)]] | None = Field(
        default=None,
        max_length=MAX_EVAL_SIZES,
        description="image tasks: evaluation resolutions in pixels, multiples of data.patch_size; default "
        "[S/2, 3S/4, S, 3S/2, 2S] with S = data.image_size (those that are multiples of the patch)",
    )
    num_nodes: list[Annotated[int, Field(ge=3, le=MAX_GRAPH_NODES)]] | None = Field(
        default=None,
        max_length=MAX_EVAL_SIZES,
        description="graph tasks: evaluation graph sizes in nodes; default [2n/3, n, 4n/3, 2n] with n = "
        "data.num_nodes (those of at least 3 nodes)",
    )


MAX_FINETUNE_STEPS = 1_000_000


class ExtensionSpec(_Strict):
    """A context-extension study (benchmark only; text and probes): one base model per seed trained at
    ``train.length`` and kept, then every entry of ``methods`` (an arm: a rotary scaling rule) applied to it at
    evaluation only and, with ``finetune_steps``, also after a short fine-tune at ``finetune_length`` with the
    rule in place. An arm's params that it leaves out are filled from the study: ``base`` from the base model,
    ``factor`` from ``factor``, ``original_max_position_embeddings`` from ``train.length``."""

    base: MethodRef = Field(
        default_factory=lambda: MethodRef(method="rope"),
        description="the base model's method: a rotary method, trained once per seed and reused by every arm",
    )
    factor: float = Field(
        default=2.0, ge=1, le=1024, description="the arms' scaling factor where their params give none"
    )
    finetune_steps: int = Field(
        default=0,
        ge=0,
        le=MAX_FINETUNE_STEPS,
        description="0: the arms at evaluation only; else also each arm fine-tuned for this many steps from the "
        "base model (and the base model itself, unscaled, as the fine-tune's control)",
    )
    finetune_length: int | None = Field(
        default=None, ge=2, le=65536, description="the fine-tune's sequence length (default factor x train.length)"
    )
    finetune_lr: float | None = Field(
        default=None, gt=0, le=1.0, description="the fine-tune's peak lr (default train.lr)"
    )


class JobSpec(_Strict):
    methods: list[MethodRef] = Field(
        default_factory=list,
        max_length=MAX_METHODS,
        description="at least one; only a suite's spec may leave them out, and then gets the suite's own methods "
        "(the 'leaderboard' suite: every 1D method that trains in a job)",
    )
    data: DataSpec = Field(default_factory=lambda: DataSpec(corpus="stdlib"))
    model: ModelSpec = Field(default_factory=ModelSpec)
    train: TrainSpec = Field(default_factory=TrainSpec)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    seeds: list[Int64] = Field(default_factory=lambda: [0], min_length=1, max_length=MAX_SEEDS)
    suite: str | None = Field(
        default=None,
        max_length=32,
        description="benchmark only: a named preset ('quick', 'standard', 'paper', 'leaderboard') that sets data, "
        "model, train and eval for each of its tasks; give methods (and seeds to override the suite's)",
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    checkpoint: str | None = Field(
        default=None, description="extrapolate only: id of a finished train job whose model to evaluate"
    )
    extension: ExtensionSpec | None = Field(
        default=None,
        description="benchmark only: a context-extension study; its methods are the arms (rotary scaling rules) "
        "applied to one base model per seed",
    )

    @model_validator(mode="after")
    def _methods_unless_suite(self) -> JobSpec:
        # A suite without methods takes its own (posenc.tasks.suites.suite_specs); any other spec names them.
        if not self.methods and self.suite is None:
            raise ValueError("give at least one entry in 'methods' (only a suite may leave them out)")
        return self


class ComputeJobSpec(_Strict):
    """Kind ``compute``: the body of ``POST /v1/{route}``, run by a worker without the gateway's output budget
    (``max_job_output_bytes`` instead); every tensor goes to the artifact ``tensors.safetensors``."""

    route: ComputeRoute = Field(description="the compute route whose request this is: POST /v1/{route}")
    request: ComputeRequest = Field(
        description="that route's JSON request body, validated by its model; tensors inline or {'random': ...}"
    )

    @field_validator("request", mode="wrap")
    @classmethod
    def _request_of_the_route(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        # Validated by the route's model alone, so errors name its fields (request.num_heads), not a union member.
        model = COMPUTE_REQUESTS.get(info.data.get("route", ""))
        if model is None:
            return value  # the route is invalid and reported; the request cannot be checked without it
        return model.model_validate(value)


_COMPUTE_FIELDS = frozenset(ComputeJobSpec.model_fields)
_TRAINING_FIELDS = frozenset(JobSpec.model_fields)


class JobCreate(_Strict):
    kind: JobKind
    spec: JobSpec | ComputeJobSpec = Field(
        description="train, extrapolate, benchmark: a JobSpec; compute: a ComputeJobSpec {route, request}"
    )

    @field_validator("spec", mode="wrap")
    @classmethod
    def _spec_of_the_kind(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        # One model per kind (no union matching): errors name the fields of the spec the kind takes.
        kind = info.data.get("kind")
        if kind is None:
            return value  # the kind is invalid and reported
        model: type[JobSpec | ComputeJobSpec] = ComputeJobSpec if kind == "compute" else JobSpec
        if _is_spec_of_the_other_kind(value, model):
            if kind == "compute":
                raise ValueError(
                    "a compute job takes a spec {'route', 'request'}: the request of POST /v1/{route}, "
                    "not a training spec (methods, data, model, ...)"
                )
            raise ValueError(
                f"a {kind} job takes a training spec (methods, data, model, train, eval, seeds); "
                "a spec {'route', 'request'} is for kind 'compute'"
            )
        return model.model_validate(value)

    @model_validator(mode="after")
    def _one_method_unless_benchmark(self) -> JobCreate:
        if isinstance(self.spec, JobSpec) and self.kind != "benchmark" and len(self.spec.methods) != 1:
            raise ValueError(f"a {self.kind} job takes exactly one method; use kind='benchmark' for several")
        return self


def _is_spec_of_the_other_kind(value: Any, model: type[JobSpec | ComputeJobSpec]) -> bool:
    other, own_fields, other_fields = (
        (JobSpec, _COMPUTE_FIELDS, _TRAINING_FIELDS)
        if model is ComputeJobSpec
        else (ComputeJobSpec, _TRAINING_FIELDS, _COMPUTE_FIELDS)
    )
    if isinstance(value, BaseModel):
        return isinstance(value, other)
    if isinstance(value, dict):
        keys = set(value)
        return bool(keys & other_fields) and not keys & own_fields
    return False


class JobProgress(BaseModel):
    step: int = 0
    total: int = 0
    loss: float | None = None
    eta_s: float | None = None
    stage: str | None = Field(default=None, description="e.g. 'train rope seed 0' or 'eval 512'")


class Artifact(BaseModel):
    name: str
    url: str
    size: int | None = None


class JobChild(BaseModel):
    """One (method, seed) run of a benchmark that fanned out, or one (task, method, seed) run of a suite: a job of
    its own (``GET /v1/jobs/{id}``)."""

    id: str
    task: str | None = Field(default=None, description="a suite's run: the task it belongs to ('copy_single', ...)")
    method: str = Field(description="the run's method label, as in the result table ('rope', 'rope#2', ...)")
    seed: int
    status: JobStatus
    step: int = 0
    total: int = 0


class Job(BaseModel):
    id: str
    kind: JobKind
    status: JobStatus
    progress: JobProgress = Field(default_factory=JobProgress)
    result: dict[str, Any] | None = None
    error: str | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    spec: dict[str, Any]
    attempts: int = 0
    queue: str = "cpu"
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None
    estimate_s: float | None = Field(
        default=None,
        description="seconds this job should take on one worker of its queue (started_at to finished_at), "
        "estimated when it was submitted: per process and per run set-up, training steps, tokens, evaluation "
        "sizes and multiply-adds, each at its default cost, scaled by how fast this deployment's workers ran "
        "their recent runs of the same task family and attention path. Several workers share a benchmark's runs",
    )
    parent: str | None = Field(default=None, description="a run of a benchmark that fanned out: the benchmark's job id")
    children: list[JobChild] = Field(
        default_factory=list,
        description="a benchmark that fanned out (one job per run, on any worker): its runs, in run order; "
        "its progress is theirs summed. They are listed by GET /v1/jobs?parent={id}",
    )


SUMMARY_ERROR_CHARS = 500  # a summary's error: its first characters; the job's record has all of it


class JobSummary(BaseModel):
    """One job in a listing: what it is, its state and its links, without its spec, result or artifacts (the
    whole record is ``GET /v1/jobs/{id}``). Its size does not depend on the spec or the result."""

    id: str
    kind: JobKind
    status: JobStatus
    progress: JobProgress = Field(default_factory=JobProgress)
    error: str | None = Field(
        default=None, description=f"the error's first {SUMMARY_ERROR_CHARS} characters; the job's record has it whole"
    )
    methods: list[str] | None = Field(
        default=None,
        description="the names of the spec's method entries (their label, else the method, the config preset, "
        "or 'config'); a run of a benchmark: its own; empty for a compute job; null for a job whose record "
        "predates this field",
    )
    attempts: int = 0
    queue: str = "cpu"
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None
    estimate_s: float | None = Field(default=None, description="the job's estimate_s, as in its record")
    parent: str | None = Field(default=None, description="a run of a benchmark that fanned out: the benchmark's job id")
    runs: int = Field(
        default=0,
        description="a benchmark that fanned out: how many runs it has (GET /v1/jobs?parent={id} lists them); "
        "its progress is theirs summed",
    )


class JobList(BaseModel):
    data: list[JobSummary]
    count: int


class JobEvent(BaseModel):
    at: str = Field(description="when, ISO 8601 UTC")
    event: str = Field(
        description="what happened: a state transition, or a line the job wrote (a study's base "
        "model trained or reused)"
    )


class JobEventList(BaseModel):
    data: list[JobEvent]
