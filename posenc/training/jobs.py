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

Image tasks (``data.task`` one of ``IMAGE_TASKS``) train the ViT of ``posenc.training.vit`` at
``data.image_size`` and evaluate top-1 accuracy at ``eval.resolutions``: rows carry ``resolution`` (pixels)
where text rows carry ``length``, with the metric ``accuracy``; the plot is accuracy against resolution.

Idempotent and resumable (service.md §1.7): ``job_dir/result.json`` is written last and returned as is when a
redelivered job finds it; each (method, seed) sub-run keeps its training checkpoint and, once done, its result
under ``job_dir/checkpoints/<index>-<method>-seed<s>/``, so a redelivery resumes mid-training or skips it.
Progress counts one step per training step and one per evaluated length, over the whole job.

Device: ``run_job`` uses its ``device`` argument; resolving ``spec.device``/settings (``auto``) is the
caller's job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posenc.errors import InvalidInput
from posenc.jobspec import (
    SPEC,
    eval_lengths,
    image_patch,
    image_tokens,
    in_distribution_length,
    train_task_size,
    validate_spec,
)
from posenc.schemas.jobs import IMAGE_TASKS, ImageTask, JobKind, JobSpec, MethodRef
from posenc.training.data import (
    TaskName,
    char_corpus,
    load_corpus_text,
    task_train_batch,
    task_vocab,
    text_batch,
)
from posenc.training.evaluate import evaluate_images, evaluate_task, evaluate_text
from posenc.training.files import load_model, read_json, save_model, write_json_atomic
from posenc.training.hooks import JobCancelled, JobHooks, Progress
from posenc.training.model import ModelConfig, count_parameters
from posenc.training.report import summarize, write_benchmark_artifacts
from posenc.training.train import AnyConfig, Batch, BatchSource, Model, ProgressScope, train
from posenc.training.vision import image_batch, task_classes
from posenc.training.vit import ViTConfig

LOSS_CURVE_POINTS = 200
RESULT_NAME = "result.json"


# ------------------------------------------------------------------------------------------------ data
@dataclass(frozen=True)
class PreparedData:
    """The vocabulary (image tasks: the class names), a batch source for training and the validation ids
    (text) or the task."""

    vocab: tuple[str, ...]
    batches: BatchSource
    val: torch.Tensor | None  # (N_val,) int64 for text
    task: TaskName | None
    image: ImageTask | None = None


def prepare_data(spec: JobSpec, data_dir: Path | None, vocab: tuple[str, ...] | None = None) -> PreparedData:
    """Load the corpus (or set up the task); ``vocab`` fixes the vocabulary of an already trained model."""
    task = spec.data.sequence_task
    length, batch_size = spec.train.length, spec.train.batch_size
    image = spec.data.image_task
    if image is not None:
        size = in_distribution_length(spec)
        tokens = batch_size * image_tokens(spec, size)

        def image_batches(generator: torch.Generator) -> Batch:
            images, labels = image_batch(image, batch_size, size, generator)  # fresh scenes every step
            return Batch(images, labels, tokens=tokens)

        return PreparedData(vocab=task_classes(image), batches=image_batches, val=None, task=None, image=image)
    if task is not None:
        size = train_task_size(spec)

        def task_batches(generator: torch.Generator) -> Batch:
            drawn = task_train_batch(task, size, batch_size, generator)
            return Batch(drawn.inputs, drawn.targets, drawn.loss_mask)

        return PreparedData(vocab=task_vocab(task), batches=task_batches, val=None, task=task)
    assert spec.data.corpus is not None
    corpus = char_corpus(load_corpus_text(spec.data.corpus, data_dir), spec.data.val_fraction, vocab)

    def text_batches(generator: torch.Generator) -> Batch:
        inputs, targets = text_batch(corpus.train, length, batch_size, generator)
        return Batch(inputs, targets)

    return PreparedData(vocab=corpus.vocab, batches=text_batches, val=corpus.val, task=None)


def _model_config(spec: JobSpec, ref: MethodRef, vocab_size: int) -> AnyConfig:
    if spec.data.image_task is not None:
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


def _metric(spec: JobSpec) -> str:
    """The headline metric: accuracy (images), exact_match (tasks) or ppl (text)."""
    if spec.data.image_task is not None:
        return "accuracy"
    return "exact_match" if spec.data.task is not None else "ppl"


def _axis(spec: JobSpec) -> str:
    """What the evaluation varies, and the rows' key for it: resolution (images, px) or length."""
    return "resolution" if spec.data.image_task is not None else "length"


def _protocol(spec: JobSpec) -> str:
    if spec.data.image_task is not None:
        return "top1_accuracy"
    return spec.eval.protocol if spec.data.task is None else "greedy_exact_match"


def _evaluate(
    model: Model,
    data: PreparedData,
    spec: JobSpec,
    lengths: list[int],
    device: str,
    progress: JobProgress | None,
    label: str,
) -> list[dict[str, Any]]:
    """One row per length: text {length, protocol, stride, nll, ppl, tokens, windows};
    task {length, exact_match, samples}; image {resolution, accuracy, samples} per resolution."""
    rows: list[dict[str, Any]] = []
    for length in lengths:
        if progress is not None:
            progress.check_cancel()
        if data.image is not None:
            score = evaluate_images(model, data.image, length, samples=spec.eval.samples, device=device).to_json()
        elif data.task is None:
            assert data.val is not None
            if len(data.val) - 1 < length:
                raise InvalidInput(
                    (*SPEC, "eval", "lengths"),
                    f"length {length} is longer than the {len(data.val)}-char validation split",
                )
            score = evaluate_text(
                model,
                data.val,
                length,
                protocol=spec.eval.protocol,
                stride=spec.eval.stride,
                max_tokens=spec.eval.max_tokens,
                device=device,
            ).to_json()
            if not math.isfinite(score["ppl"]):
                score["ppl"] = None
        else:
            score = evaluate_task(
                model,
                data.task,
                length,
                samples=spec.eval.samples,
                device=device,
            ).to_json()
        rows.append(score)
        if progress is not None:
            progress.advance(1, f"eval {label} length {length}")
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
    ref: MethodRef,
    seed: int,
    data: PreparedData,
    run_dir: Path,
    progress: JobProgress,
    device: str,
    label: str,
) -> tuple[Model, dict[str, Any]]:
    """Train (or resume) one (method, seed) under ``run_dir``; returns the model and its training record."""
    config = _model_config(spec, ref, len(data.vocab))
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
def _run_train(spec: JobSpec, job_dir: Path, data: PreparedData, progress: JobProgress, device: str) -> dict[str, Any]:
    ref = spec.methods[0]
    runs: list[dict[str, Any]] = []
    curves: dict[str, list[float]] = {}
    for position, seed in enumerate(spec.seeds):
        label = f"{ref.method} seed {seed}"
        model, record = _train_one(spec, ref, seed, data, _run_dir(job_dir, 0, ref, seed), progress, device, label)
        [score] = _evaluate(model, data, spec, [in_distribution_length(spec)], device, None, label)
        stem = "model" if position == 0 else f"model-seed{seed}"
        metadata = {
            "vocab": list(data.vocab),
            "method": ref.method,
            "params": ref.params,
            "seed": seed,
            "data": spec.data.model_dump(),
            "train": spec.train.model_dump(),
        }
        save_model(model, metadata, job_dir, stem)  # type: ignore[arg-type]  # a ViT saves the same way
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
        f"val_{_axis(spec)}": in_distribution_length(spec),
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
    if read_json(source / "model.json").get("data", {}).get("task") in IMAGE_TASKS:
        raise InvalidInput(
            (*SPEC, "checkpoint"),
            f"job {spec.checkpoint!r} trained a ViT; extrapolate from a checkpoint evaluates text models only "
            "(run a benchmark or an extrapolate job without a checkpoint)",
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
    data = prepare_data(trained, data_dir, tuple(metadata["vocab"]))
    lengths = eval_lengths(trained)
    rows = _evaluate(model, data, trained, lengths, device, progress, metadata["method"])
    return _extrapolate_result(
        trained, metadata["method"], metadata["params"], {int(metadata["seed"]): rows}, spec.checkpoint
    )


def _extrapolate_result(
    spec: JobSpec,
    method: str,
    params: dict[str, Any],
    rows_by_seed: dict[int, list[dict[str, Any]]],
    checkpoint: str | None,
) -> dict[str, Any]:
    reference_length = in_distribution_length(spec)
    metric, axis = _metric(spec), _axis(spec)
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
        "protocol": _protocol(spec),
        f"train_{axis}": reference_length if spec.data.image_task is not None else spec.train.length,
        f"in_distribution_{axis}": reference_length,
        "metric": metric,
        "rows": rows,
    }


def _run_methods(
    spec: JobSpec, job_dir: Path, data: PreparedData, progress: JobProgress, device: str, lengths: list[int]
) -> list[tuple[str, int, list[dict[str, Any]]]]:
    """Train and evaluate every (method, seed); a sub-run with a recorded result is skipped."""
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
            model, record = _train_one(spec, ref, seed, data, run_dir, progress, device, f"{label} seed {seed}")
            rows = _evaluate(model, data, spec, lengths, device, progress, f"{label} seed {seed}")
            write_json_atomic(
                done_file,
                {"rows": rows, "final_loss": record["final_loss"], "tokens_per_s": record["tokens_per_s"]},
            )
            results.append((label, seed, rows))
    return results


def _run_benchmark(
    spec: JobSpec, job_dir: Path, data: PreparedData, progress: JobProgress, device: str
) -> dict[str, Any]:
    lengths = eval_lengths(spec)
    metric, axis = _metric(spec), _axis(spec)
    table: list[dict[str, Any]] = []
    for label, seed, rows in _run_methods(spec, job_dir, data, progress, device, lengths):
        table.extend(_metric_rows(label, seed, rows, axis))
    reference_length = in_distribution_length(spec)
    summary = summarize([row for row in table if row["value"] is not None], reference_length, axis)
    source = spec.data.task or spec.data.corpus
    chance = None
    if data.image is not None:
        chance = 1 / len(data.vocab)
        title = f"{source}: {metric} vs resolution (ViT, patch {image_patch(spec)}, trained at {reference_length} px)"
    else:
        title = f"{source}: {metric} vs length ({spec.eval.protocol if spec.data.task is None else 'greedy'})"
    artifacts = write_benchmark_artifacts(job_dir, table, summary, metric, reference_length, title, axis, chance)
    return {
        "kind": "benchmark",
        "protocol": _protocol(spec),
        f"train_{axis}": reference_length if data.image is not None else spec.train.length,
        f"in_distribution_{axis}": reference_length,
        f"{axis}s": lengths,
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
    if kind == "extrapolate" and spec.checkpoint is not None:
        result = _extrapolate_checkpoint(spec, artifact_root, data_dir, progress, device)
    elif kind == "train":
        result = _run_train(spec, job_dir, prepare_data(spec, data_dir), progress, device)
    elif kind == "extrapolate":
        runs = _run_methods(spec, job_dir, prepare_data(spec, data_dir), progress, device, eval_lengths(spec))
        ref = spec.methods[0]
        result = _extrapolate_result(spec, ref.method, ref.params, {seed: rows for _, seed, rows in runs}, None)
    else:
        result = _run_benchmark(spec, job_dir, prepare_data(spec, data_dir), progress, device)
    result["device"] = device
    write_json_atomic(result_file, result)
    return result
