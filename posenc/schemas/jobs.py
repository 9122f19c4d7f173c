"""Jobs: what a client submits, and the record it polls.

Spec field names (``methods``, ``data``, ``model``, ``train``, ``eval``, ``seeds``) are the contract;
every other field has a default. Kind ``compute`` takes another spec, ``{"route", "request"}``: a request of one
of the compute routes, run by a worker, its tensors written to an artifact.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

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
SyntheticTask = Literal["copy", "reverse", "addition", "selective_copy", "counting", "flip_flop", "parity", "sort"]
ImageTask = Literal["shapes", "quadrant", "above_left", "same_diagonal"]
GraphTask = Literal["graph_distance"]
GraphFamily = Literal["tree", "er"]
SYNTHETIC_TASKS: tuple[SyntheticTask, ...] = get_args(SyntheticTask)
IMAGE_TASKS: tuple[ImageTask, ...] = get_args(ImageTask)
GRAPH_TASKS: tuple[GraphTask, ...] = get_args(GraphTask)
DEFAULT_IMAGE_SIZE = 32
DEFAULT_PATCH_SIZE = 4
DEFAULT_NUM_NODES = 12
DEFAULT_MAX_DISTANCE = 5
MAX_GRAPH_NODES = 256  # graph tasks: labels come from all-pairs BFS in Python, O(n·(n + E)) per graph


class _Strict(BaseModel):
    # allow_inf_nan=False: JSON parsers turn NaN, Infinity and 1e400 into floats; every float field refuses them
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


MAX_METHODS = 32  # method entries of one benchmark
MAX_SEEDS = 64
MAX_EVAL_SIZES = 64  # evaluation lengths, resolutions or graph sizes of one job


class MethodRef(_Strict):
    method: str = Field(max_length=128)
    params: dict[str, Any] = Field(default_factory=dict)


class DataSpec(_Strict):
    """A character-level corpus, a synthetic sequence task, an image task (trained on a ViT) or a graph task
    (trained on a graph transformer)."""

    corpus: str | None = Field(
        default=None,
        max_length=4096,
        description="'stdlib' (built offline from the Python standard library), 'tinyshakespeare' "
        "(tinyshakespeare.txt in a data directory), or a text file under the data directories "
        "(POSENC_DATA_DIR, POSENC_DATA_DIRS), by name relative to one of them or by an absolute path inside one",
    )
    task: SyntheticTask | ImageTask | GraphTask | None = Field(
        default=None,
        description="a synthetic sequence task; an image task (procedural images, any resolution): 'shapes' "
        "(10 shape classes), 'quadrant' (which quadrant holds the red dot), 'above_left' (is the red dot "
        "above-left of the blue one), 'same_diagonal' (are the two dots on one diagonal); or a graph task: "
        "'graph_distance' (random graphs, two marked nodes, classify their shortest-path distance 1, 2, ..., "
        ">= max_distance)",
    )
    val_fraction: float = Field(default=0.1, gt=0, lt=0.5)
    image_size: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description=f"image tasks: training resolution in pixels (default {DEFAULT_IMAGE_SIZE})",
    )
    patch_size: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description=f"image tasks: side of a square patch in pixels (default {DEFAULT_PATCH_SIZE})",
    )

    num_nodes: int | None = Field(
        default=None,
        ge=3,
        le=MAX_GRAPH_NODES,
        description=f"graph tasks: nodes per training graph (default {DEFAULT_NUM_NODES})",
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
        description=f"graph tasks: classes of distance 1 ... max_distance, the last one '>= max_distance' "
        f"(default {DEFAULT_MAX_DISTANCE})",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DataSpec:
        if (self.corpus is None) == (self.task is None):
            raise ValueError("give exactly one of 'corpus' or 'task'")
        if self.image_task is None:
            if self.image_size is not None or self.patch_size is not None:
                raise ValueError(f"image_size and patch_size are for the image tasks {list(IMAGE_TASKS)}")
        else:
            self.image_size = self.image_size if self.image_size is not None else DEFAULT_IMAGE_SIZE
            self.patch_size = self.patch_size if self.patch_size is not None else DEFAULT_PATCH_SIZE
        if self.graph_task is None:
            if (self.num_nodes, self.graph_family, self.max_distance) != (None, None, None):
                raise ValueError(
                    f"num_nodes, graph_family and max_distance are for the graph tasks {list(GRAPH_TASKS)}"
                )
        else:
            self.num_nodes = self.num_nodes if self.num_nodes is not None else DEFAULT_NUM_NODES
            self.graph_family = self.graph_family if self.graph_family is not None else "tree"
            self.max_distance = self.max_distance if self.max_distance is not None else DEFAULT_MAX_DISTANCE
        return self

    @property
    def image_task(self) -> ImageTask | None:
        """The task when it is an image task, else None."""
        return next((name for name in IMAGE_TASKS if name == self.task), None)

    @property
    def graph_task(self) -> GraphTask | None:
        """The task when it is a graph task, else None."""
        return next((name for name in GRAPH_TASKS if name == self.task), None)

    @property
    def sequence_task(self) -> SyntheticTask | None:
        """The task when it is a synthetic sequence task, else None."""
        return next((name for name in SYNTHETIC_TASKS if name == self.task), None)


class ModelSpec(_Strict):
    layers: int = Field(default=2, ge=1, le=48)
    dim: int = Field(default=128, ge=8, le=4096)
    heads: int = Field(default=4, ge=1, le=256)
    ffn_mult: int = Field(default=4, ge=1, le=16)
    pairing: Literal["half", "interleaved"] = Field(
        default="half",
        description="rotary methods: the feature pairs rotated together, half (GPT-NeoX/HF rotate_half) or "
        "interleaved (GPT-J/Meta)",
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


class EvalSpec(_Strict):
    lengths: list[Annotated[int, Field(ge=1, le=1_048_576)]] | None = Field(
        default=None, max_length=MAX_EVAL_SIZES, description="default [L, 2L, 4L, 8L] with L the training length"
    )
    protocol: Literal["nonoverlapping", "sliding"] = "nonoverlapping"
    stride: int | None = Field(
        default=None, ge=1, le=INT64_MAX, description="sliding: tokens scored per window (default L/2)"
    )
    max_tokens: int = Field(default=65536, ge=1, le=INT64_MAX, description="scored tokens per length (text)")
    samples: int = Field(
        default=100, ge=1, le=INT64_MAX, description="sequences per length (synthetic tasks), images per resolution"
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


class JobSpec(_Strict):
    methods: list[MethodRef] = Field(min_length=1, max_length=MAX_METHODS)
    data: DataSpec = Field(default_factory=lambda: DataSpec(corpus="stdlib"))
    model: ModelSpec = Field(default_factory=ModelSpec)
    train: TrainSpec = Field(default_factory=TrainSpec)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    seeds: list[Int64] = Field(default_factory=lambda: [0], min_length=1, max_length=MAX_SEEDS)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    checkpoint: str | None = Field(
        default=None, description="extrapolate only: id of a finished train job whose model to evaluate"
    )


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


class JobList(BaseModel):
    data: list[Job]
    count: int
