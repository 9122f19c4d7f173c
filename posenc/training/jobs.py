"""Job kinds: what the Celery task runs. :func:`run_job` is the only entry point; the checks a spec must pass
(run by the gateway before enqueueing, and again here) live in ``posenc.jobspec``.

Kinds
    train        one method, one or more seeds; writes ``model.safetensors`` + ``model.json`` (first
                 seed; ``model-seed<s>.*`` for the others) and ``loss_curve.json``; returns final loss,
                 in-distribution validation NLL/ppl (exact match for tasks), tokens/s and a loss curve.
    extrapolate  evaluates the model of a finished train job (``spec.checkpoint`` = its id, loaded from
                 ``artifact_root/<id>/``) or trains one per seed first; rows per length, protocol named.
    benchmark    methods x seeds with the same budget; ``result["table"]`` is long-format rows
                 ``{"method", "seed", "length", "metric", "value"}`` plus a summary; ``table.csv``,
                 ``table.json`` and ``plot.png``.

What depends on the data (the batches, the model, the score at one evaluation size, the names in results) is a
``TaskFamily``, chosen once from the spec (``task_family``): text (perplexity by length), sequence tasks (exact
match by task size), images (the ViT of ``posenc.training.vit``, trained at ``data.image_size``, top-1 accuracy
by ``resolution`` at ``eval.resolutions``) and graphs (the graph transformer of ``posenc.training.graph_task``,
trained at ``data.num_nodes`` nodes, accuracy by ``num_nodes`` at ``eval.num_nodes``). Rows carry the family's
axis where text rows carry ``length``; the plot is the metric against it.

Idempotent and resumable (service.md §1.7): ``job_dir/result.json`` is written last and returned as is when a
redelivered job finds it; each (method, seed) sub-run keeps its training checkpoint and, once done, its result
under ``job_dir/checkpoints/<index>-<method>-seed<s>/``, so a redelivery resumes mid-training or skips it.
Progress counts one step per training step and one per evaluated length, over the whole job.

Device: ``run_job`` uses its ``device`` argument; resolving ``spec.device``/settings (``auto``) is the
caller's job.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posenc.errors import InvalidInput
from posenc.jobspec import (
    SPEC,
    eval_lengths,
    graph_tokens,
    image_patch,
    image_tokens,
    in_distribution_length,
    train_task_size,
    validate_spec,
)
from posenc.schemas.jobs import (
    GRAPH_TASKS,
    IMAGE_TASKS,
    GraphTask,
    ImageTask,
    JobKind,
    JobSpec,
    MethodRef,
)
from posenc.schemas.jobs import GraphFamily as GraphFamilyName
from posenc.training.data import (
    TaskName,
    char_corpus,
    load_corpus_text,
    task_train_batch,
    task_vocab,
    text_batch,
)
from posenc.training.evaluate import evaluate_graphs, evaluate_images, evaluate_task, evaluate_text
from posenc.training.files import load_model, read_json, save_model, write_json_atomic
from posenc.training.graph_task import GraphModelConfig, distance_classes, graph_batch
from posenc.training.hooks import JobCancelled, JobHooks, Progress
from posenc.training.model import ModelConfig, count_parameters
from posenc.training.report import summarize, write_benchmark_artifacts
from posenc.training.train import AnyConfig, Batch, BatchSource, Model, ProgressScope, train
from posenc.training.vision import image_batch, task_classes
from posenc.training.vit import ViTConfig

LOSS_CURVE_POINTS = 200
RESULT_NAME = "result.json"


# ----------------------------------------------------------------------------------------- task families
@dataclass(frozen=True)
class PreparedData:
    """The vocabulary (classification tasks: the class names), a batch source for training and the validation
    ids (text)."""

    vocab: tuple[str, ...]
    batches: BatchSource
    val: torch.Tensor | None = None  # (N_val,) int64 for text


class TaskFamily(ABC):
    """What differs between text, sequence tasks, images and graphs, in one place: the data, the model, the
    score at one evaluation size, and the names results use. ``axis`` names what evaluation varies (the rows'
    key: ``length``, ``resolution``, ``num_nodes``); ``metric`` the headline score."""

    axis: str = "length"
    sizes_key: str = "lengths"  # the result's key for the evaluated sizes
    metric: str

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec

    @abstractmethod
    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        """Load or set up the data; ``vocab`` fixes the vocabulary of an already trained model."""

    @abstractmethod
    def model_config(self, ref: MethodRef, vocab_size: int) -> AnyConfig: ...

    @abstractmethod
    def score(self, model: Model, data: PreparedData, size: int, device: str) -> dict[str, Any]:
        """The row of one evaluation size: ``{axis: size, metric: value, ...}``."""

    @abstractmethod
    def protocol(self) -> str: ...

    @abstractmethod
    def title(self) -> str:
        """The benchmark plot's title."""

    def train_size(self) -> int:
        """What results report as trained at: the training length in tokens for text and tasks, the training
        resolution or graph size otherwise."""
        return in_distribution_length(self.spec)

    def chance(self, data: PreparedData) -> float | None:
        """The accuracy of guessing, drawn on the plot; None where there is no such line."""
        return None


class TextFamily(TaskFamily):
    metric = "ppl"

    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        spec = self.spec
        assert spec.data.corpus is not None
        corpus = char_corpus(load_corpus_text(spec.data.corpus, data_dir), spec.data.val_fraction, vocab)
        length, batch_size = spec.train.length, spec.train.batch_size

        def text_batches(generator: torch.Generator) -> Batch:
            inputs, targets = text_batch(corpus.train, length, batch_size, generator)
            return Batch(inputs, targets)

        return PreparedData(vocab=corpus.vocab, batches=text_batches, val=corpus.val)

    def model_config(self, ref: MethodRef, vocab_size: int) -> AnyConfig:
        spec = self.spec
        return ModelConfig(
            vocab_size=vocab_size,
            layers=spec.model.layers,
            dim=spec.model.dim,
            heads=spec.model.heads,
            ffn_mult=spec.model.ffn_mult,
            pairing=spec.model.pairing,
            method=ref.method,
            params=dict(ref.params),
            train_length=spec.train.length,
        )

    def score(self, model: Model, data: PreparedData, size: int, device: str) -> dict[str, Any]:
        spec = self.spec
        assert data.val is not None
        if len(data.val) - 1 < size:
            raise InvalidInput(
                (*SPEC, "eval", "lengths"), f"length {size} is longer than the {len(data.val)}-char validation split"
            )
        row = evaluate_text(
            model,
            data.val,
            size,
            protocol=spec.eval.protocol,
            stride=spec.eval.stride,
            max_tokens=spec.eval.max_tokens,
            device=device,
        ).to_json()
        if not math.isfinite(row["ppl"]):
            row["ppl"] = None
        return row

    def protocol(self) -> str:
        return self.spec.eval.protocol

    def title(self) -> str:
        return f"{self.spec.data.corpus}: {self.metric} vs length ({self.spec.eval.protocol})"

    def train_size(self) -> int:
        return self.spec.train.length


class SequenceTaskFamily(TextFamily):
    metric = "exact_match"

    @property
    def task(self) -> TaskName:
        assert self.spec.data.sequence_task is not None
        return self.spec.data.sequence_task

    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        task, size, batch_size = self.task, train_task_size(self.spec), self.spec.train.batch_size

        def task_batches(generator: torch.Generator) -> Batch:
            drawn = task_train_batch(task, size, batch_size, generator)
            return Batch(drawn.inputs, drawn.targets, drawn.loss_mask)

        return PreparedData(vocab=task_vocab(task), batches=task_batches)

    def score(self, model: Model, data: PreparedData, size: int, device: str) -> dict[str, Any]:
        return evaluate_task(model, self.task, size, samples=self.spec.eval.samples, device=device).to_json()

    def protocol(self) -> str:
        return "greedy_exact_match"

    def title(self) -> str:
        return f"{self.task}: {self.metric} vs length (greedy)"


class ImageFamily(TaskFamily):
    axis, sizes_key, metric = "resolution", "resolutions", "accuracy"

    @property
    def task(self) -> ImageTask:
        assert self.spec.data.image_task is not None
        return self.spec.data.image_task

    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        task, size, batch_size = self.task, in_distribution_length(self.spec), self.spec.train.batch_size
        tokens = batch_size * image_tokens(self.spec, size)

        def image_batches(generator: torch.Generator) -> Batch:
            images, labels = image_batch(task, batch_size, size, generator)  # fresh scenes every step
            return Batch(images, labels, tokens=tokens)

        return PreparedData(vocab=task_classes(task), batches=image_batches)

    def model_config(self, ref: MethodRef, vocab_size: int) -> AnyConfig:
        spec = self.spec
        return ViTConfig(
            num_classes=vocab_size,
            image_size=in_distribution_length(spec),
            patch_size=image_patch(spec),
            layers=spec.model.layers,
            dim=spec.model.dim,
            heads=spec.model.heads,
            ffn_mult=spec.model.ffn_mult,
            cls_token=spec.model.cls_token,
            pairing=spec.model.pairing,
            method=ref.method,
            params=dict(ref.params),
        )

    def score(self, model: Model, data: PreparedData, size: int, device: str) -> dict[str, Any]:
        return evaluate_images(model, self.task, size, samples=self.spec.eval.samples, device=device).to_json()

    def protocol(self) -> str:
        return "top1_accuracy"

    def title(self) -> str:
        size = in_distribution_length(self.spec)
        return f"{self.task}: accuracy vs resolution (ViT, patch {image_patch(self.spec)}, trained at {size} px)"

    def chance(self, data: PreparedData) -> float | None:
        return 1 / len(data.vocab)


class GraphFamily(TaskFamily):
    axis, sizes_key, metric = "num_nodes", "num_nodes", "accuracy"

    @property
    def task(self) -> GraphTask:
        assert self.spec.data.graph_task is not None
        return self.spec.data.graph_task

    def _options(self) -> tuple[GraphFamilyName, int]:
        data = self.spec.data
        assert data.graph_family is not None
        assert data.max_distance is not None
        return data.graph_family, data.max_distance

    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        task, nodes, batch_size = self.task, in_distribution_length(self.spec), self.spec.train.batch_size
        family, max_distance = self._options()
        tokens = batch_size * graph_tokens(self.spec, nodes)

        def graph_batches(generator: torch.Generator) -> Batch:
            drawn = graph_batch(task, batch_size, nodes, generator, family=family, max_distance=max_distance)
            return Batch(drawn.packed(), drawn.labels, tokens=tokens)  # fresh graphs every step

        return PreparedData(vocab=distance_classes(max_distance), batches=graph_batches)

    def model_config(self, ref: MethodRef, vocab_size: int) -> AnyConfig:
        spec = self.spec
        family, max_distance = self._options()
        return GraphModelConfig(
            layers=spec.model.layers,
            dim=spec.model.dim,
            heads=spec.model.heads,
            ffn_mult=spec.model.ffn_mult,
            method=ref.method,
            params=dict(ref.params),
            virtual_token=spec.model.cls_token,
            train_nodes=in_distribution_length(spec),
            task=self.task,
            family=family,
            max_distance=max_distance,
        )

    def score(self, model: Model, data: PreparedData, size: int, device: str) -> dict[str, Any]:
        family, max_distance = self._options()
        samples = self.spec.eval.samples
        score = evaluate_graphs(
            model, self.task, size, family=family, max_distance=max_distance, samples=samples, device=device
        )
        return score.to_json()

    def protocol(self) -> str:
        return "top1_accuracy"

    def title(self) -> str:
        family, _ = self._options()
        size = in_distribution_length(self.spec)
        return f"{self.task}: accuracy vs graph size ({family}s, trained at {size} nodes)"

    def chance(self, data: PreparedData) -> float | None:
        return 1 / len(data.vocab)  # sizes of at least max_distance + 1 nodes; smaller ones have fewer classes


def task_family(spec: JobSpec) -> TaskFamily:
    """The family of the spec's data: the one place that looks at which kind of data a job has."""
    data = spec.data
    if data.image_task is not None:
        return ImageFamily(spec)
    if data.graph_task is not None:
        return GraphFamily(spec)
    if data.sequence_task is not None:
        return SequenceTaskFamily(spec)
    return TextFamily(spec)


def prepare_data(spec: JobSpec, data_dir: Path | None, vocab: tuple[str, ...] | None = None) -> PreparedData:
    """Load the corpus (or set up the task); ``vocab`` fixes the vocabulary of an already trained model."""
    return task_family(spec).prepare(data_dir, vocab)


# ------------------------------------------------------------------------------------------ one sub-run
@dataclass
class JobProgress:
    """Counts steps over the whole job and forwards them to the hooks."""

    hooks: JobHooks
    total: int
    done: int = 0

    def advance(self, steps: int, stage: str, loss: float | None = None) -> None:
        self.done += steps
        self.hooks.progress(Progress(step=self.done, total=self.total, loss=loss, stage=stage))

    def check_cancel(self) -> None:
        if self.hooks.should_cancel():
            raise JobCancelled(f"cancelled at step {self.done} of {self.total}")


def _evaluate(
    model: Model,
    data: PreparedData,
    family: TaskFamily,
    sizes: list[int],
    device: str,
    progress: JobProgress | None,
    label: str,
) -> list[dict[str, Any]]:
    """One row per evaluation size: text {length, protocol, stride, nll, ppl, tokens, windows}; task {length,
    exact_match, samples}; image {resolution, accuracy, samples}; graph {num_nodes, accuracy, samples}."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        if progress is not None:
            progress.check_cancel()
        rows.append(family.score(model, data, size, device))
        if progress is not None:
            progress.advance(1, f"eval {label} {family.axis} {size}")
    return rows


def _metric_rows(method: str, seed: int, scores: list[dict[str, Any]], axis: str = "length") -> list[dict[str, Any]]:
    """Long-format table rows: ppl and nll for text, exact_match for tasks, accuracy (by resolution) for images."""
    rows: list[dict[str, Any]] = []
    for score in scores:
        for metric in ("ppl", "nll", "exact_match", "accuracy"):
            if metric in score:
                rows.append(
                    {"method": method, "seed": seed, axis: score[axis], "metric": metric, "value": score[metric]}
                )
    return rows


def _train_one(
    spec: JobSpec,
    family: TaskFamily,
    ref: MethodRef,
    seed: int,
    data: PreparedData,
    run_dir: Path,
    progress: JobProgress,
    device: str,
    label: str,
) -> tuple[Model, dict[str, Any]]:
    """Train (or resume) one (method, seed) under ``run_dir``; returns the model and its training record."""
    config = family.model_config(ref, len(data.vocab))
    outcome = train(
        config,
        seed,
        spec.train,
        data.batches,
        checkpoint_dir=run_dir,
        hooks=progress.hooks,
        device=device,
        scope=ProgressScope(offset=progress.done, total=progress.total, stage=f"train {label}"),
    )
    progress.done += spec.train.steps
    record = {
        "seed": seed,
        "steps": spec.train.steps,
        "final_loss": outcome.final_loss,
        "tokens_per_s": outcome.tokens_per_s,
        "train_seconds": outcome.seconds,
        "parameters": count_parameters(outcome.model),
        "losses": outcome.losses,
    }
    return outcome.model, record


def subsample_curve(losses: list[float], points: int = LOSS_CURVE_POINTS) -> list[list[float]]:
    """[[step, loss], ...] with at most ``points`` entries, always including the last step."""
    if not losses:
        return []
    stride = max(1, math.ceil(len(losses) / points))
    steps = list(range(stride, len(losses) + 1, stride))
    if steps[-1] != len(losses):
        steps.append(len(losses))
    return [[step, losses[step - 1]] for step in steps]


def _method_labels(spec: JobSpec) -> list[str]:
    """Names for the table: the method name, with ``#index`` when the same method appears twice."""
    names = [ref.method for ref in spec.methods]
    return [name if names.count(name) == 1 else f"{name}#{index}" for index, name in enumerate(names)]


def _run_dir(job_dir: Path, index: int, ref: MethodRef, seed: int) -> Path:
    return job_dir / "checkpoints" / f"{index:02d}-{ref.method}-seed{seed}"


# ----------------------------------------------------------------------------------------------- kinds
def _run_train(
    spec: JobSpec, family: TaskFamily, job_dir: Path, data: PreparedData, progress: JobProgress, device: str
) -> dict[str, Any]:
    ref = spec.methods[0]
    runs: list[dict[str, Any]] = []
    curves: dict[str, list[float]] = {}
    for position, seed in enumerate(spec.seeds):
        label = f"{ref.method} seed {seed}"
        run_dir = _run_dir(job_dir, 0, ref, seed)
        model, record = _train_one(spec, family, ref, seed, data, run_dir, progress, device, label)
        [score] = _evaluate(model, data, family, [in_distribution_length(spec)], device, None, label)
        stem = "model" if position == 0 else f"model-seed{seed}"
        metadata = {
            "vocab": list(data.vocab),
            "method": ref.method,
            "params": ref.params,
            "seed": seed,
            "data": spec.data.model_dump(),
            "train": spec.train.model_dump(),
        }
        save_model(model, metadata, job_dir, stem)
        curves[str(seed)] = record.pop("losses")
        runs.append({**record, "validation": score, "model": f"{stem}.safetensors"})
    write_json_atomic(job_dir / "loss_curve.json", {"method": ref.method, "losses_by_seed": curves})
    first = runs[0]
    validation = first["validation"]
    return {
        "kind": "train",
        "method": ref.method,
        "params": ref.params,
        "final_loss": first["final_loss"],
        "val_nll": validation.get("nll"),
        "val_ppl": validation.get("ppl"),
        "val_exact_match": validation.get("exact_match"),
        "val_accuracy": validation.get("accuracy"),
        f"val_{family.axis}": in_distribution_length(spec),
        "tokens_per_s": first["tokens_per_s"],
        "parameters": first["parameters"],
        "loss_curve": subsample_curve(curves[str(spec.seeds[0])]),
        "runs": runs,
        "artifacts": sorted(
            {
                "loss_curve.json",
                *(r["model"] for r in runs),
                *(r["model"].replace(".safetensors", ".json") for r in runs),
            }
        ),
    }


def _extrapolate_checkpoint(
    spec: JobSpec, artifact_root: Path, data_dir: Path | None, progress: JobProgress, device: str
) -> dict[str, Any]:
    """Evaluate ``artifact_root/<spec.checkpoint>/model.*`` on the data and vocabulary it was trained with."""
    assert spec.checkpoint is not None
    source = artifact_root / spec.checkpoint
    if not (source / "model.json").is_file():
        raise InvalidInput((*SPEC, "checkpoint"), f"job {spec.checkpoint!r} has no trained model")
    if read_json(source / "model.json").get("data", {}).get("task") in (*IMAGE_TASKS, *GRAPH_TASKS):
        raise InvalidInput(
            (*SPEC, "checkpoint"),
            f"job {spec.checkpoint!r} trained an image or graph model; extrapolate from a checkpoint evaluates "
            "text models only (run a benchmark or an extrapolate job without a checkpoint)",
        )
    model, metadata = load_model(source, device=device)
    if metadata["method"] != spec.methods[0].method:
        raise InvalidInput(
            (*SPEC, "methods", 0, "method"),
            f"checkpoint {spec.checkpoint!r} was trained with {metadata['method']!r}, not {spec.methods[0].method!r}",
        )
    trained = spec.model_copy(
        update={
            "data": type(spec.data).model_validate(metadata["data"]),
            "train": type(spec.train).model_validate(metadata["train"]),
        }
    )
    family = task_family(trained)
    data = family.prepare(data_dir, tuple(metadata["vocab"]))
    rows = _evaluate(model, data, family, eval_lengths(trained), device, progress, metadata["method"])
    return _extrapolate_result(
        family, metadata["method"], metadata["params"], {int(metadata["seed"]): rows}, spec.checkpoint
    )


def _extrapolate_result(
    family: TaskFamily,
    method: str,
    params: dict[str, Any],
    rows_by_seed: dict[int, list[dict[str, Any]]],
    checkpoint: str | None,
) -> dict[str, Any]:
    reference_length = in_distribution_length(family.spec)
    metric, axis = family.metric, family.axis
    rows: list[dict[str, Any]] = []
    for seed, scores in rows_by_seed.items():
        reference = next((s[metric] for s in scores if s[axis] == reference_length), scores[0][metric])
        for score in scores:
            ratio = score[metric] / reference if reference and score[metric] is not None else None
            rows.append({"seed": seed, **score, "ratio": ratio})
    return {
        "kind": "extrapolate",
        "method": method,
        "params": params,
        "checkpoint": checkpoint,
        "protocol": family.protocol(),
        f"train_{axis}": family.train_size(),
        f"in_distribution_{axis}": reference_length,
        "metric": metric,
        "rows": rows,
    }


def _run_methods(
    family: TaskFamily, job_dir: Path, data: PreparedData, progress: JobProgress, device: str, lengths: list[int]
) -> list[tuple[str, int, list[dict[str, Any]]]]:
    """Train and evaluate every (method, seed); a sub-run with a recorded result is skipped."""
    spec = family.spec
    results: list[tuple[str, int, list[dict[str, Any]]]] = []
    per_run = spec.train.steps + len(lengths)
    for index, (ref, label) in enumerate(zip(spec.methods, _method_labels(spec), strict=True)):
        for seed in spec.seeds:
            run_dir = _run_dir(job_dir, index, ref, seed)
            done_file = run_dir / RESULT_NAME
            if done_file.is_file():
                results.append((label, seed, read_json(done_file)["rows"]))
                progress.advance(per_run, f"skip {label} seed {seed} (done)")
                continue
            name = f"{label} seed {seed}"
            model, record = _train_one(spec, family, ref, seed, data, run_dir, progress, device, name)
            rows = _evaluate(model, data, family, lengths, device, progress, name)
            write_json_atomic(
                done_file,
                {"rows": rows, "final_loss": record["final_loss"], "tokens_per_s": record["tokens_per_s"]},
            )
            results.append((label, seed, rows))
    return results


def _run_benchmark(
    family: TaskFamily, job_dir: Path, data: PreparedData, progress: JobProgress, device: str
) -> dict[str, Any]:
    lengths = eval_lengths(family.spec)
    metric, axis = family.metric, family.axis
    table: list[dict[str, Any]] = []
    for label, seed, rows in _run_methods(family, job_dir, data, progress, device, lengths):
        table.extend(_metric_rows(label, seed, rows, axis))
    reference_length = in_distribution_length(family.spec)
    summary = summarize([row for row in table if row["value"] is not None], reference_length, axis)
    artifacts = write_benchmark_artifacts(
        job_dir, table, summary, metric, reference_length, family.title(), axis, family.chance(data)
    )
    return {
        "kind": "benchmark",
        "protocol": family.protocol(),
        f"train_{axis}": family.train_size(),
        f"in_distribution_{axis}": reference_length,
        family.sizes_key: lengths,
        "table": table,
        "summary": summary,
        "artifacts": artifacts,
    }


def _total_steps(kind: JobKind, spec: JobSpec) -> int:
    runs = len(spec.methods) * len(spec.seeds)
    if kind == "train":
        return runs * spec.train.steps
    if kind == "extrapolate" and spec.checkpoint is not None:
        return len(eval_lengths(spec))
    return runs * (spec.train.steps + len(eval_lengths(spec)))


def run_job(
    kind: JobKind,
    spec: JobSpec,
    *,
    job_dir: Path,
    artifact_root: Path,
    hooks: JobHooks,
    device: str = "cpu",
    data_dir: Path | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Run (or resume, or return the recorded result of) one job; the result is JSON-able."""
    validate_spec(kind, spec)
    result_file = job_dir / RESULT_NAME
    if result_file.is_file():
        recorded: dict[str, Any] = read_json(result_file)
        return recorded
    if threads is not None:
        torch.set_num_threads(threads)
    job_dir.mkdir(parents=True, exist_ok=True)
    progress = JobProgress(hooks=hooks, total=_total_steps(kind, spec))
    family = task_family(spec)
    if kind == "extrapolate" and spec.checkpoint is not None:
        result = _extrapolate_checkpoint(spec, artifact_root, data_dir, progress, device)
    elif kind == "train":
        result = _run_train(spec, family, job_dir, family.prepare(data_dir, None), progress, device)
    elif kind == "extrapolate":
        runs = _run_methods(family, job_dir, family.prepare(data_dir, None), progress, device, eval_lengths(spec))
        ref = spec.methods[0]
        result = _extrapolate_result(family, ref.method, ref.params, {seed: rows for _, seed, rows in runs}, None)
    else:
        result = _run_benchmark(family, job_dir, family.prepare(data_dir, None), progress, device)
    result["device"] = device
    write_json_atomic(result_file, result)
    return result
