"""The training loop: AdamW, linear warmup then cosine decay to 10%, gradient clipping at 1.0.

Deterministic from the seed: the weights come from ``build_model(config, seed)`` (the text transformer, the
ViT for a ``ViTConfig``, the graph transformer for a ``GraphModelConfig``; the non-PE weights and every learned
PE table follow the seed, see ``posenc.training.model``), every batch from one ``torch.Generator`` seeded from
the same seed, and torch's global generator (what draws without a generator of its own) is seeded from it at the
start of a run. Every ``checkpoint_every`` steps (and at the end) the whole
state (model, optimizer, scheduler, step, RNG states, loss history) is written atomically to
``checkpoint_dir/train_state.pt``; a run restarted with the same directory continues from there and, on the
CPU, ends bit-identical to an uninterrupted run. Hooks are called every step: ``should_cancel`` before the
step (raising :class:`JobCancelled`), ``progress`` after it.

Train until learned (``Until``): every ``every`` steps the model is scored on held-out data (in eval mode, no
grad; the caller's ``check`` draws the same examples at each check, from a generator of its own, so the batch
stream is untouched) and the run stops at the first check that reaches the threshold. The checks so far and the
step it stopped at are part of the checkpoint, so a run killed between two checks resumes and stops at the same
step with the same weights, and a run restarted after it stopped trains no further.

Precision (``train.precision``, :func:`resolve_precision`): ``fp32``, or ``bf16`` autocast around the forward
pass and the loss (the weights, their gradients and the optimizer stay float32); ``auto`` is bf16 with TF32
matmuls on CUDA and float32 on the CPU. The losses stay on the device and are read every ``LOSS_READ_EVERY``
steps (and before every checkpoint, check and the end), so a GPU step does not wait on the host; the progress
hook gets the last loss read.

Compiling (``train.compile``, :func:`resolve_compile`): ``auto`` is on for CUDA only. The model's forward is
wrapped in ``torch.compile`` (Inductor, default mode); the first step traces and compiles it (or loads it from
Inductor's on-disk cache: the worker points ``TORCHINDUCTOR_CACHE_DIR`` at the state directory, so every worker of
the machine shares it). Before that first step one eager forward in eval mode, without gradients and drawing
nothing at random, fills the encodings' per-length caches, so that Dynamo traces the cached path in one graph
instead of the cache-filling code (host reads of position bounds, graph breaks). A compile that raises (no C++
compiler, an operator Dynamo cannot trace) is reported and the step is redone eagerly, and so is the rest of the
run: ``CompileReport`` says what happened, with Inductor's graph-cache hits and misses during the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from posenc.files import write_atomic
from posenc.schemas.jobs import TrainSpec
from posenc.training.graph_task import GraphModelConfig, GraphTransformer
from posenc.training.hooks import JobCancelled, JobHooks, NoHooks, Progress
from posenc.training.model import ModelConfig, TinyTransformer, bounded_encodings
from posenc.training.throughput import device_peak, flops_per_token, mfu
from posenc.training.vit import VisionTransformer, ViTConfig

CHECKPOINT_NAME = "train_state.pt"
FINAL_LR_FRACTION = 0.1
ADAM_BETAS = (0.9, 0.99)  # nanoGPT's shakespeare_char setting for small char-level models
GRAD_CLIP = 1.0
DATA_SEED_OFFSET = 0x5EED  # the batch stream is seeded apart from the weight draw
GLOBAL_SEED_OFFSET = 0x610BA1  # torch's global generator, apart from both
LOSS_READ_EVERY = 32  # steps between reads of the losses from the device: one host sync per read
Precision = Literal["bf16", "fp32"]


def resolve_compile(option: str, device: torch.device) -> bool:
    """What ``train.compile`` means on ``device``: ``auto`` compiles on CUDA only."""
    if option == "auto":
        return device.type == "cuda"
    if option not in ("on", "off"):
        raise ValueError(f"unknown compile option {option!r}")
    return option == "on"


@dataclass
class CompileReport:
    """How a run's training step ran: compiled or eager, and what the compile cost."""

    requested: str  # train.compile as given
    compiled: bool  # whether the steps ran compiled (False: eager, asked for or fallen back to)
    error: str | None = None  # why a compile that was asked for fell back to eager
    first_step_s: float | None = None  # the first compiled step: tracing, compiling or loading from the cache
    cache_hits: int = 0  # Inductor FX graphs loaded from its on-disk cache during the run
    cache_misses: int = 0  # graphs compiled afresh

    def to_json(self) -> dict[str, Any]:
        return {
            "requested": self.requested,
            "compiled": self.compiled,
            "error": self.error,
            "first_step_s": self.first_step_s,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
        }


def _graph_cache_counts() -> tuple[int, int]:
    """Inductor's FX graph cache (hits, misses) in this process so far."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def resolve_precision(precision: str, device: torch.device) -> Precision:
    """What ``train.precision`` means on ``device``: ``auto`` is bf16 on CUDA and float32 elsewhere."""
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    if precision not in ("bf16", "fp32"):
        raise ValueError(f"unknown precision {precision!r}")
    return "bf16" if precision == "bf16" else "fp32"


@dataclass(frozen=True)
class Batch:
    """Inputs and targets (B, T) int64; ``loss_mask`` (B, T) bool limits the loss (synthetic tasks). Images:
    inputs (B, 3, S, S) float32, targets (B,) class ids, ``tokens`` the patches the ViT reads. Graphs: inputs
    (B, N, 1 + N) packed node types and adjacency, targets (B,) class ids, ``tokens`` the nodes (and graph
    tokens) the model reads."""

    inputs: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor | None = None
    tokens: int | None = None  # tokens the model reads (default: inputs.numel(), one per id)


AnyConfig = ModelConfig | ViTConfig | GraphModelConfig
Model = TinyTransformer | VisionTransformer | GraphTransformer


def build_model(config: AnyConfig, seed: int = 0) -> Model:
    """The model a config describes, its weights drawn from ``seed``."""
    if isinstance(config, ViTConfig):
        return VisionTransformer(config, seed)
    if isinstance(config, GraphModelConfig):
        return GraphTransformer(config, seed)
    return TinyTransformer(config, seed)


BatchSource = Callable[[torch.Generator], Batch]  # draws the next batch from the run's generator


@dataclass(frozen=True)
class ProgressScope:
    """Where this run sits in its job, so ``Progress.step/total`` count over the whole job."""

    offset: int = 0  # job steps done before this run's first step
    total: int | None = None  # job total; None: this run's steps
    stage: str | None = None


UntilCheck = Callable[[Model], tuple[float | None, bool]]  # model -> (held-out value, reached)


@dataclass(frozen=True)
class Until:
    """Stop once learned: ``check`` scores the model on held-out data every ``every`` steps (never past
    ``spec.steps``, the cap) and says whether it reached the threshold."""

    every: int
    check: UntilCheck


@dataclass
class TrainOutcome:
    model: Model
    losses: list[float]  # one per step, from step 1 (including steps done before a resume)
    steps_run: int  # steps executed by this call (0 when the final checkpoint already existed)
    seconds: float  # wall time of those steps
    tokens_per_s: float | None  # input tokens per second over those steps
    steps_needed: int | None = None  # with ``until``: the step it reached the threshold at; None: hit the cap
    checks: list[list[float | None]] | None = None  # with ``until``: [step, held-out value] of every check
    precision: Precision = "fp32"  # what train.precision resolved to on the run's device
    flops_per_token: float | None = None  # training FLOPs per token (``posenc.training.throughput``)
    mfu: float | None = None  # model FLOPs utilisation over those steps; None: no steps, or the peak is unknown
    compile: CompileReport | None = None  # how the steps ran (None: no steps ran)

    @property
    def final_loss(self) -> float:
        return self.losses[-1]


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Multiplier of the peak lr at 0-based ``step``: linear warmup, then cosine from 1 down to 10%."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, spec: TrainSpec) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (dim >= 2) only; biases and LayerNorm gains are not decayed."""
    decayed = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    plain = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decayed, "weight_decay": spec.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=spec.lr, betas=ADAM_BETAS)


def sequence_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) over all tokens, or over ``loss_mask`` when given; for images,
    logits (B, classes) against targets (B,)."""
    vocab = logits.shape[-1]
    flat_logits = logits.reshape(-1, vocab)  # (B·T, V)
    flat_targets = batch.targets.reshape(-1)  # (B·T,)
    if batch.loss_mask is None:
        return F.cross_entropy(flat_logits, flat_targets)
    per_token = F.cross_entropy(flat_logits, flat_targets, reduction="none")  # (B·T,)
    weights = batch.loss_mask.reshape(-1).to(per_token.dtype)  # (B·T,)
    return (per_token * weights).sum() / weights.sum().clamp_min(1.0)


def atomic_torch_save(state: dict[str, Any], path: Path) -> None:
    """torch.save, atomically (``posenc.files.write_atomic``): never a half-written file."""
    write_atomic(path, lambda temporary: torch.save(state, temporary))


def _fingerprint(config: AnyConfig, seed: int, spec: TrainSpec, precision: Precision) -> dict[str, Any]:
    """What a checkpoint must match to be resumed (a different run's state is never picked up): the precision
    as resolved on the device, so an ``auto`` run resumed on another device kind starts over."""
    train = spec.model_dump()
    if spec.until is None:
        del train["until"]  # a run without train.until matches the checkpoints written before it existed
    del train["precision"]
    train.pop("compile", None)  # compiled or eager, the same run: a checkpoint of one resumes the other
    if precision != "fp32":  # float32 runs match the checkpoints written before the option existed
        train["precision"] = precision
    return {"config": config.to_json(), "seed": seed, "train": train}


def train(
    config: AnyConfig,
    seed: int,
    spec: TrainSpec,
    batches: BatchSource,
    *,
    checkpoint_dir: Path | None = None,
    hooks: JobHooks | None = None,
    device: str = "cpu",
    threads: int | None = None,
    scope: ProgressScope | None = None,
    initial_state: Mapping[str, torch.Tensor] | None = None,
    until: Until | None = None,
) -> TrainOutcome:
    """Train ``build_model(config, seed)`` for ``spec.steps`` steps, resuming from ``checkpoint_dir``.

    ``initial_state``: start from these weights (a fine-tune of a trained model; every key of the model, no
    other) instead of the seed's draw; the data and the global generator still follow ``seed``.

    ``until``: after every ``until.every``-th step, ``until.check`` scores the model (eval mode, no grad, train
    mode restored); the first check that reaches its threshold stops the run there (``steps_needed``), its
    checkpoint written with the stop recorded. The learning-rate schedule stays the cosine over ``spec.steps``
    (the cap): stopping early leaves the lr wherever the cap's schedule had it, so a run's first ``n`` steps are
    the same whatever its threshold."""
    if threads is not None:
        torch.set_num_threads(threads)
    hooks = hooks if hooks is not None else NoHooks()
    scope = scope if scope is not None else ProgressScope()
    total = scope.total if scope.total is not None else spec.steps
    target = torch.device(device)
    precision = resolve_precision(spec.precision, target)
    if target.type == "cuda" and precision == "bf16":  # what bf16 leaves in float32 runs on TF32 tensor cores
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    model = build_model(config, seed)
    if initial_state is not None:
        model.load_state_dict(initial_state)
    model = model.to(target)
    optimizer = make_optimizer(model, spec)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, spec.warmup_steps, spec.steps)
    )
    generator = torch.Generator().manual_seed(seed + DATA_SEED_OFFSET)
    torch.manual_seed(seed + GLOBAL_SEED_OFFSET)  # a resumed run restores its saved state below
    losses: list[float] = []
    checks: list[list[float | None]] = []
    stopped: int | None = None  # the step a reached ``until`` stopped the run at
    start_step = 0
    fingerprint = _fingerprint(config, seed, spec, precision) | {"from_weights": initial_state is not None}
    checkpoint = checkpoint_dir / CHECKPOINT_NAME if checkpoint_dir is not None else None

    if checkpoint is not None and checkpoint.is_file():
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)  # RNG states must stay on the CPU
        if state.get("fingerprint") == fingerprint:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            generator.set_state(state["data_rng"])
            torch.set_rng_state(state["torch_rng"])
            losses = list(state["losses"])
            start_step = int(state["step"])
            checks = [list(check) for check in state.get("checks", [])]
            stopped = state.get("stopped")

    pending: list[torch.Tensor] = []  # the losses of the steps since the last read, still on the device

    def read_losses() -> None:
        if pending:
            losses.extend(torch.stack(pending).tolist())
            pending.clear()

    def save(step: int) -> None:
        if checkpoint is None:
            return
        read_losses()
        atomic_torch_save(
            {
                "fingerprint": fingerprint,
                "step": step,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "data_rng": generator.get_state(),
                "torch_rng": torch.get_rng_state(),
                "losses": losses,
                "checks": checks,
                "stopped": stopped,
            },
            checkpoint,
        )

    def held_out(done: int) -> bool:
        """Whether the check after step ``done`` (if one is due) reaches the threshold; records it."""
        if until is None or done % until.every != 0:
            return False
        read_losses()
        model.eval()
        with torch.no_grad():
            value, reached = until.check(model)
        model.train()
        checks.append([done, value])
        return reached

    model.train()
    bounded = bounded_encodings(model)
    report = CompileReport(requested=spec.compile, compiled=resolve_compile(spec.compile, target))
    forward: Callable[[torch.Tensor], torch.Tensor] = model
    if report.compiled:
        forward = torch.compile(model)
    hits_before, misses_before = _graph_cache_counts()

    def step_loss(batch: Batch) -> torch.Tensor:
        """The batch's loss, its gradients computed (and the old ones dropped)."""
        with torch.autocast(target.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = sequence_loss(forward(batch.inputs), batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    def compiled_step_loss(batch: Batch, first: bool) -> torch.Tensor:
        from torch._dynamo.exc import TorchDynamoException

        nonlocal forward
        started = time.perf_counter()
        if first:
            _fill_caches(model, batch, target, precision)
        try:
            loss = step_loss(batch)
        except TorchDynamoException as exc:  # the compile failed: eager from here on
            report.compiled, report.error = False, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
            forward = model
            loss = step_loss(batch)
        if first:
            report.first_step_s = time.perf_counter() - started
        return loss

    tokens = examples = 0
    began = time.perf_counter()
    end = stopped if stopped is not None else spec.steps  # a run that already stopped trains no further
    for step in range(start_step, end):
        if hooks.should_cancel():
            raise JobCancelled(f"cancelled before step {step + 1} of {spec.steps}")
        batch = batches(generator)
        batch = Batch(
            inputs=batch.inputs.to(target),
            targets=batch.targets.to(target),
            loss_mask=None if batch.loss_mask is None else batch.loss_mask.to(target),
            tokens=batch.tokens,
        )
        loss = compiled_step_loss(batch, step == start_step) if report.compiled else step_loss(batch)
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        for encoding in bounded:  # the reference's clamps (KERPLE's r1, r2), see MethodSpec.learned_bounds
            encoding.keep_in_bounds()
        scheduler.step()
        pending.append(loss.detach().float())
        tokens += batch.tokens if batch.tokens is not None else batch.inputs.numel()
        examples += batch.inputs.shape[0]
        done = step + 1
        if done % LOSS_READ_EVERY == 0:
            read_losses()
        if held_out(done):
            stopped = done
        if done % spec.checkpoint_every == 0 or done == spec.steps or stopped is not None:
            save(done)
        last = losses[-1] if losses else None
        hooks.progress(Progress(step=scope.offset + done, total=total, loss=last, stage=scope.stage))
        if stopped is not None:
            break
    read_losses()
    seconds = time.perf_counter() - began
    hits, misses = _graph_cache_counts()
    report.cache_hits, report.cache_misses = hits - hits_before, misses - misses_before
    steps_run = len(losses) - start_step
    model.eval()
    tokens_per_s = tokens / seconds if steps_run and seconds > 0 else None
    flops = flops_per_token(model, config.layers, config.dim, tokens / examples) if examples else None
    utilisation = None
    if flops is not None and tokens_per_s is not None:
        utilisation = mfu(flops, tokens_per_s, device_peak(target, precision))
    return TrainOutcome(
        model=model,
        losses=losses,
        steps_run=steps_run,
        seconds=seconds,
        tokens_per_s=tokens_per_s,
        steps_needed=stopped,
        checks=checks if until is not None else None,
        precision=precision,
        flops_per_token=flops,
        mfu=utilisation,
        compile=report if steps_run else None,
    )


def _fill_caches(model: Model, batch: Batch, device: torch.device, precision: Precision) -> None:
    """One eager forward of ``batch`` in eval mode without gradients, before the first compiled step: it fills
    the encodings' per-length caches (tables, masks) so that Dynamo traces the cached path. Eval mode draws
    nothing at random (a method's training-time draws, CAPE's shifts, are skipped), so the run's random stream
    is the same compiled or not."""
    model.eval()
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        model(batch.inputs)
    model.train()
