"""What a job spec must satisfy beyond its schema: checked by the gateway before a job is queued (so an
unknown method is a 404 and a bad value a 422 naming the field, not a failed job minutes later) and again by
the trainer (or, for a compute job, by ``posenc.compute.run_compute_job``). Needs the method registry, never
the training code: the gateway may not import ``posenc.training``.

Also the length arithmetic both sides share: task sizes, default evaluation lengths. For image tasks the
"lengths" are resolutions in pixels: ``in_distribution_length`` is the training resolution and ``eval_lengths``
the evaluation resolutions, so the job code counts and loops over them the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import torch
from pydantic import ValidationError

from posenc.compute import check_job_budget, prepare_job
from posenc.corpora import check_corpus, data_directories
from posenc.errors import InvalidInput
from posenc.pe import MethodParams, MethodSpec, get_method
from posenc.pe.appliers import Applier, Layer, build_applier, grid_positions
from posenc.pe.types import Graph, LayerInputs
from posenc.schemas.jobs import (
    MAX_GRAPH_NODES,
    ComputeJobSpec,
    JobCreate,
    JobKind,
    JobSpec,
    MethodRef,
    SyntheticTask,
)

CHECKPOINT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
SPEC = ("body", "spec")
MAX_IMAGE_PATCHES = 1024  # patches per image at any resolution (a 32 x 32 grid): the ViT's attention is dense
DEFAULT_RESOLUTION_FACTORS = (0.5, 0.75, 1.0, 1.5, 2.0)  # of the training resolution (evaluation.md §7)
DEFAULT_GRAPH_SIZE_FACTORS = (2 / 3, 1.0, 4 / 3, 2.0)  # of the training graph size: 12 -> 8, 12, 16, 24
MIN_GRAPH_NODES = 3


def task_sequence_length(task: SyntheticTask, size: int) -> int:
    """The longest ``BOS prompt SEP target EOS`` sequence of a task instance of size n (formats in
    ``posenc.training.data``)."""
    if task == "addition":
        return 3 * size + 5  # a + b = s: n + 1 + n prompt, n + 1 sum digits
    if task == "selective_copy":
        return 3 * size + 3  # 2n prompt (n tokens among n noise), n target
    if task == "counting":
        return size + 4 + len(str(size))  # n tokens + query, count in 0..n as decimal digits
    if task == "parity":
        return size + 4  # n bits, one answer token
    if task == "flip_flop":
        return 2 * size + 4  # n (instruction, bit) pairs, one answer bit
    return 2 * size + 3  # copy, reverse, sort: n symbols -> n symbols


def max_task_size(task: SyntheticTask, train_length: int) -> int:
    """n_train: the largest size whose longest sequence fits in ``train_length`` tokens (0 if none does)."""
    if task == "addition":
        size = (train_length - 5) // 3
    elif task == "selective_copy":
        size = (train_length - 3) // 3
    elif task == "counting":
        size = train_length - 5  # the count has at least one digit; drop n while its digits overflow
        while size > 0 and task_sequence_length(task, size) > train_length:
            size -= 1
    elif task == "parity":
        size = train_length - 4
    elif task == "flip_flop":
        size = (train_length - 4) // 2
    else:  # copy, reverse, sort
        size = (train_length - 3) // 2
    return max(size, 0)


def validate_job(
    create: JobCreate, *, max_compute_bytes: int | None = None, data_dirs: Sequence[Path] | None = None
) -> None:
    """The gateway's check of ``POST /v1/jobs``: :func:`validate_spec` for train, extrapolate and benchmark
    (``data_dirs``: the gateway's data directories); for compute, the request's prepare step (as its route would
    run it; errors name ``body.spec.request``) and, with ``max_compute_bytes``, the job's memory budget
    (``BudgetExceeded``, a 413)."""
    if isinstance(create.spec, ComputeJobSpec):
        prepared = prepare_job(create.spec)
        if max_compute_bytes is not None:
            check_job_budget(prepared, max_compute_bytes)
        return
    validate_spec(create.kind, create.spec, data_dirs=data_dirs)


# ------------------------------------------------------------------------------------------------ lengths
def train_task_size(spec: JobSpec) -> int:
    """Tasks: the largest training size n_train for ``spec.train.length`` (see ``posenc.training.data``)."""
    assert spec.data.sequence_task is not None
    return max_task_size(spec.data.sequence_task, spec.train.length)


def in_distribution_length(spec: JobSpec) -> int:
    """L for text (tokens), n_train for tasks (task size), the training resolution for images (pixels), the
    training graph size for graphs (nodes): the x of 'in distribution' in results and plots."""
    if spec.data.image_size is not None:
        return spec.data.image_size
    if spec.data.num_nodes is not None:
        return spec.data.num_nodes
    return spec.train.length if spec.data.task is None else train_task_size(spec)


def eval_lengths(spec: JobSpec) -> list[int]:
    """``spec.eval.lengths``, default [L, 2L, 4L, 8L] (text) or [n, 2n, 4n, 8n] task sizes; image tasks:
    ``spec.eval.resolutions``, default the multiples of the patch among [S/2, 3S/4, S, 3S/2, 2S]."""
    if spec.data.image_size is not None:
        if spec.eval.resolutions is not None:
            return list(spec.eval.resolutions)
        size, patch = spec.data.image_size, image_patch(spec)
        scaled = (round(size * factor) for factor in DEFAULT_RESOLUTION_FACTORS)
        return sorted({s for s in scaled if s >= patch and s % patch == 0} | {size})
    if spec.data.num_nodes is not None:
        if spec.eval.num_nodes is not None:
            return list(spec.eval.num_nodes)
        nodes = spec.data.num_nodes
        scaled = (round(nodes * factor) for factor in DEFAULT_GRAPH_SIZE_FACTORS)
        return sorted({n for n in scaled if MIN_GRAPH_NODES <= n <= MAX_GRAPH_NODES} | {nodes})
    if spec.eval.lengths is not None:
        return list(spec.eval.lengths)
    base = in_distribution_length(spec)
    return [base, 2 * base, 4 * base, 8 * base]


def image_patch(spec: JobSpec) -> int:
    assert spec.data.patch_size is not None
    return spec.data.patch_size


def image_tokens(spec: JobSpec, resolution: int) -> int:
    """Tokens the ViT reads for one image at ``resolution``: its patches, and the CLS token if any."""
    return (resolution // image_patch(spec)) ** 2 + int(spec.model.cls_token)


def graph_tokens(spec: JobSpec, num_nodes: int) -> int:
    """Tokens the graph transformer reads for one graph: its nodes, and the virtual graph token if any."""
    return num_nodes + int(spec.model.cls_token)


def model_sequence_lengths(spec: JobSpec, sizes: Sequence[int] | None = None) -> list[int]:
    """The longest sequence the model sees (tokens) at each evaluation size (default ``eval_lengths``): a task
    size's longest instance, a resolution's or a graph's tokens, or the text length itself."""
    sizes = eval_lengths(spec) if sizes is None else sizes
    if spec.data.image_size is not None:
        return [image_tokens(spec, resolution) for resolution in sizes]
    if spec.data.num_nodes is not None:
        return [graph_tokens(spec, nodes) for nodes in sizes]
    if spec.data.sequence_task is None:
        return list(sizes)
    return [task_sequence_length(spec.data.sequence_task, size) for size in sizes]


# --------------------------------------------------------------------------------------------- validation
def validate_spec(kind: JobKind, spec: JobSpec, *, data_dirs: Sequence[Path] | None = None) -> None:
    """Raise for what the schema cannot check. Unknown methods raise ``UnknownMethodError``, bad params
    ``pydantic.ValidationError``, everything else ``InvalidInput`` naming the field.

    A corpus must be a registered name or a file under ``data_dirs`` (default: this process's data
    directories, ``posenc.corpora.data_directories``)."""
    if spec.data.corpus is not None:
        check_corpus(spec.data.corpus, data_dirs if data_dirs is not None else data_directories())
    if kind != "benchmark" and len(spec.methods) != 1:
        raise InvalidInput((*SPEC, "methods"), f"a {kind} job takes exactly one method; use 'benchmark' for several")
    if spec.checkpoint is not None:
        if kind != "extrapolate":
            raise InvalidInput((*SPEC, "checkpoint"), "only an extrapolate job evaluates an existing checkpoint")
        if not CHECKPOINT_ID.match(spec.checkpoint):
            raise InvalidInput((*SPEC, "checkpoint"), "must be the id of a finished train job")
    if spec.data.image_task is not None:
        _validate_image_spec(spec)
        for index, ref in enumerate(spec.methods):
            _validate_image_method(ref, (*SPEC, "methods", index), spec)
        return
    if spec.eval.resolutions is not None:
        raise InvalidInput((*SPEC, "eval", "resolutions"), "resolutions are for image tasks; give lengths")
    if spec.data.graph_task is not None:
        if spec.eval.lengths is not None:
            raise InvalidInput((*SPEC, "eval", "lengths"), "graph tasks are evaluated at eval.num_nodes (nodes)")
        if spec.eval.num_nodes is not None and not spec.eval.num_nodes:
            raise InvalidInput((*SPEC, "eval", "num_nodes"), "give at least one graph size, or leave it out")
        for index, ref in enumerate(spec.methods):
            _validate_graph_method(ref, (*SPEC, "methods", index), spec)
        return
    if spec.eval.num_nodes is not None:
        raise InvalidInput((*SPEC, "eval", "num_nodes"), "num_nodes are for graph tasks; give lengths")
    if spec.data.sequence_task is not None and train_task_size(spec) < 1:
        minimum = task_sequence_length(spec.data.sequence_task, 1)
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


def _validate_image_spec(spec: JobSpec) -> None:
    """Image size, patch and resolutions: every resolution a whole number of patches, at most
    ``MAX_IMAGE_PATCHES`` of them."""
    size, patch = in_distribution_length(spec), image_patch(spec)
    if spec.eval.lengths is not None:
        raise InvalidInput((*SPEC, "eval", "lengths"), "image tasks are evaluated at eval.resolutions (pixels)")
    checked: list[tuple[tuple[str | int, ...], int]] = [((*SPEC, "data", "image_size"), size)]
    if spec.eval.resolutions is not None:
        if not spec.eval.resolutions:
            raise InvalidInput((*SPEC, "eval", "resolutions"), "give at least one resolution, or leave it out")
        checked += [((*SPEC, "eval", "resolutions", i), r) for i, r in enumerate(spec.eval.resolutions)]
    for loc, resolution in checked:
        if resolution % patch:
            raise InvalidInput(loc, f"{resolution} px is not a multiple of data.patch_size = {patch}")
        if (resolution // patch) ** 2 > MAX_IMAGE_PATCHES:
            side = math.isqrt(MAX_IMAGE_PATCHES)
            raise InvalidInput(
                loc, f"{resolution} px is {resolution // patch}² patches of {patch} px; at most {side}² are allowed"
            )


def _parse_params(ref: MethodRef, loc: tuple[str | int, ...]) -> MethodParams:
    method = get_method(ref.method)
    try:
        return method.parse_params(ref.params)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput((*loc, "params", *first["loc"]), first["msg"]) from None


def _validate_method(ref: MethodRef, loc: tuple[str | int, ...], spec: JobSpec, longest: int) -> None:
    method = get_method(ref.method)
    params = _parse_params(ref, loc)
    if method.axes != 1:
        raise InvalidInput(
            (*loc, "method"),
            f"{method.name!r} encodes {method.axes}D positions; the job models are 1D sequence models",
        )
    _check_learned(method, loc)
    layer = Layer(num_heads=spec.model.heads, head_dim=spec.model.dim // spec.model.heads, causal=True)
    try:
        applier = build_applier(method, params, layer)
        applier.check()
        applier.dry_run(longest)
    except InvalidInput as exc:
        raise _cannot_run(method, loc, exc) from None


def _check_learned(method: MethodSpec, loc: tuple[str | int, ...]) -> None:
    if method.learned and method.learned_init is None:
        raise InvalidInput(
            (*loc, "method"),
            f"{method.name!r} is learned but has no initialisation for training (learned_init)",
        )


def _cannot_run(method: MethodSpec, loc: tuple[str | int, ...], exc: InvalidInput) -> InvalidInput:
    where = exc.loc if exc.loc[:1] == ("params",) else ("params",)
    return InvalidInput((*loc, *where), f"{method.name!r} cannot run this job: {exc.msg}")


def _validate_image_method(ref: MethodRef, loc: tuple[str | int, ...], spec: JobSpec) -> None:
    """A method on the ViT: 2D methods get (row, col) patch positions, 1D methods the raster index; every
    resolution is dry-run as the model applies the method (the encoding on the token embeddings, then one query
    against every key), with small tensors (at most ``MAX_IMAGE_PATCHES`` + 1 tokens)."""
    method = get_method(ref.method)
    params = _parse_params(ref, loc)
    if method.axes not in (1, 2) or "graph" in method.needs:
        what = "graph nodes" if method.axes == 0 or "graph" in method.needs else f"{method.axes}D positions"
        raise InvalidInput((*loc, "method"), f"{method.name!r} encodes {what}; the ViT takes 2D grids of patches")
    _check_learned(method, loc)
    heads, dim = spec.model.heads, spec.model.dim
    layer = Layer(num_heads=heads, head_dim=dim // heads, causal=False, model_dim=dim, pairing=spec.model.pairing)
    patch = image_patch(spec)
    try:
        applier = build_applier(method, params, layer)
        applier.check()
        for resolution in sorted({in_distribution_length(spec), *eval_lengths(spec)}):
            side = resolution // patch
            pos = patch_positions(side, side, method.axes, prefix=int(spec.model.cls_token))  # (N, A) or (N,)
            _dry_run_tokens(applier, pos, dim)
    except InvalidInput as exc:
        raise _cannot_run(method, loc, exc) from None


def _validate_graph_method(ref: MethodRef, loc: tuple[str | int, ...], spec: JobSpec) -> None:
    """A method on the graph transformer: graph methods (registry ``axes`` = 0) read each example's graph, 1D
    methods get the node ids as positions; every evaluation size is dry-run on a path graph of that size, with the
    virtual graph token as a prefix token when the model has it."""
    method = get_method(ref.method)
    params = _parse_params(ref, loc)
    if method.axes not in (0, 1) or method.causal_only:
        what = "causal attention only" if method.causal_only else f"{method.axes}D positions"
        raise InvalidInput(
            (*loc, "method"), f"{method.name!r} is for {what}; the graph model attends over nodes both ways"
        )
    _check_learned(method, loc)
    heads, dim = spec.model.heads, spec.model.dim
    prefix = int(spec.model.cls_token)
    try:
        for nodes in sorted({in_distribution_length(spec), *eval_lengths(spec)}):
            path = torch.stack((torch.arange(nodes - 1), torch.arange(1, nodes)), dim=-1)  # (n − 1, 2)
            graph = Graph(num_nodes=nodes, edges=path)
            layer = Layer(num_heads=heads, head_dim=dim // heads, causal=False, model_dim=dim, graph=graph)
            applier = build_applier(method, params, layer)
            applier.check()
            _dry_run_tokens(applier, grid_positions((nodes,), prefix)[:, 0], dim)  # (P + n,)
    except InvalidInput as exc:
        raise _cannot_run(method, loc, exc) from None


def patch_positions(rows: int, cols: int, axes: int, *, prefix: int = 0) -> torch.Tensor:
    """The ViT's token positions, as ``posenc.training.vit.token_positions`` (the gateway may not import the
    training code): (N, 2) (row, col) for 2D methods, (N,) raster indices for 1D ones, prefix tokens first."""
    if axes == 2:
        return grid_positions((rows, cols), prefix)  # (P + R·C, 2)
    return grid_positions((rows * cols,), prefix)[:, 0]  # (P + R·C,)


def _dry_run_tokens(applier: Applier, pos: torch.Tensor, dim: int) -> None:
    """The encoding on (1, N, D) zero embeddings, then the last token's query against every key."""
    layer = applier.layer
    length = pos.shape[0]
    applier.embed(torch.zeros(1, length, dim), pos)
    q = torch.zeros(1, layer.num_heads, 1, layer.head_dim)  # (1, H, 1, d)
    k = torch.zeros(1, layer.num_heads, length, layer.head_dim)  # (1, H, N, d)
    q, k = applier.rotate(q, k, pos[-1:], pos)
    mask = torch.zeros(1, 1, 1, length, dtype=torch.bool)  # (1, 1, 1, N): bidirectional
    x = torch.zeros(1, length, dim)  # (1, N, D)
    state = applier.initial_state(1, length, torch.device("cpu"))
    applier.score_terms(LayerInputs(q=q, k=k, q_pos=pos[-1:], k_pos=pos, mask=mask, x=x, state=state), 1.0)


# --------------------------------------------------------------------------------------------------- cost
OUTPUT_CLASSES_BOUND = 256  # output classes per token the estimate assumes (characters, task symbols, labels)


def model_macs_per_token(spec: JobSpec, length: int) -> int:
    """Multiply-adds of one token's forward pass through the job's model in a sequence of ``length`` tokens:
    every layer's weights (attention 4·D², feed-forward 2·m·D²) and its attention over the sequence (2·length·D:
    q·k and the weighted sum of v), the output head (at most ``OUTPUT_CLASSES_BOUND``·D) and, for images, the
    patch embedding (3·p²·D)."""
    dim, layers, mult = spec.model.dim, spec.model.layers, spec.model.ffn_mult
    per_token = layers * ((4 + 2 * mult) * dim * dim + 2 * length * dim) + OUTPUT_CLASSES_BOUND * dim
    if spec.data.image_size is not None:
        per_token += 3 * image_patch(spec) ** 2 * dim
    return per_token


def job_cost(create: JobCreate) -> int:
    """The work a job asks for, in multiply-adds, capped by the gateway (``max_job_cost``, 413) before anything
    else is done: it is arithmetic on the spec.

    Per (method, seed) run: training is 3 forward passes' worth (forward and backward) of every token it reads,
    train steps x batch_size x the training sequence, each ``model_macs_per_token`` at the training length;
    evaluation is one forward pass of every token it reads at each evaluation size (:func:`eval_tokens`, a train
    job at its training size only). So the cap covers methods x seeds x steps x tokens, evaluation sizes x
    samples, and the model's size (width, depth, feed-forward) together. An extrapolate job from a checkpoint
    trains nothing and evaluates one model. A compute job counts 1: its size is capped by
    ``max_job_output_bytes`` instead."""
    if not isinstance(create.spec, JobSpec):
        return 1
    spec = create.spec
    sizes = [in_distribution_length(spec)] if create.kind == "train" else eval_lengths(spec)
    evaluation = sum(
        eval_tokens(spec, size) * model_macs_per_token(spec, length)
        for size, length in zip(sizes, model_sequence_lengths(spec, sizes), strict=True)
    )
    if create.kind == "extrapolate" and spec.checkpoint is not None:
        return evaluation
    length = model_sequence_length(spec)
    training = 3 * spec.train.steps * spec.train.batch_size * length * model_macs_per_token(spec, length)
    return len(spec.methods) * len(spec.seeds) * (training + evaluation)


def job_tokens(create: JobCreate) -> int:
    """The tokens a job's models read, training and evaluation together (see :func:`job_cost`)."""
    if not isinstance(create.spec, JobSpec):
        return 0
    spec = create.spec
    sizes = [in_distribution_length(spec)] if create.kind == "train" else eval_lengths(spec)
    evaluation = sum(eval_tokens(spec, size) for size in sizes)
    if create.kind == "extrapolate" and spec.checkpoint is not None:
        return evaluation
    training = spec.train.steps * spec.train.batch_size * model_sequence_length(spec)
    return len(spec.methods) * len(spec.seeds) * (training + evaluation)


def model_sequence_length(spec: JobSpec) -> int:
    """The tokens of one training example: the training length, or the ViT's or graph model's tokens."""
    if spec.data.image_size is not None:
        return image_tokens(spec, spec.data.image_size)
    if spec.data.num_nodes is not None:
        return graph_tokens(spec, spec.data.num_nodes)
    return spec.train.length


def eval_tokens(spec: JobSpec, length: int) -> int:
    """Tokens read to score one evaluation length, at most (the corpus may hold fewer than ``max_tokens``).

    Text: non-overlapping windows of ``length`` cover ``max_tokens``; sliding windows advance by the stride
    (default ``length // 2``, as ``posenc.training.evaluate.default_stride``) and each reads ``length`` tokens;
    either way at least one window. Tasks (``length`` is a size): ``samples`` instances, each its longest
    sequence. Image tasks (``length`` is a resolution): ``samples`` images of their ViT tokens."""
    if spec.data.image_size is not None:
        return spec.eval.samples * image_tokens(spec, length)
    if spec.data.num_nodes is not None:
        return spec.eval.samples * graph_tokens(spec, length)
    if spec.data.sequence_task is not None:
        return spec.eval.samples * task_sequence_length(spec.data.sequence_task, length)
    if spec.eval.protocol == "nonoverlapping":
        return max(length, spec.eval.max_tokens // length * length)
    stride = min(length, spec.eval.stride if spec.eval.stride is not None else max(1, length // 2))
    windows = 1 + max(0, spec.eval.max_tokens - length) // stride
    return windows * length
