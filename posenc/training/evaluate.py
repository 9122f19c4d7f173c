"""Length-extrapolation evaluation: per-length NLL/perplexity on text, per-size scores on token tasks, accuracy by
resolution on images and by size on graphs.

Text protocols, over the first ``max_tokens`` next-character targets of validation:

    nonoverlapping  disjoint windows of L_valid tokens, every token scored (fairseq ``--context-window 0``);
                    ⌊n / L⌋ windows, ⌊n / L⌋·L scored tokens (n = scored-token budget)
    sliding         a window of L_valid advanced by the stride S (default L/2); the first window scores all L
                    tokens, every later one only its last S, so each target is scored once and, after the
                    first window, with at least L − S tokens of context; 1 + ⌊(n − L) / S⌋ windows,
                    L + (windows − 1)·S scored tokens

Token tasks (sequence tasks, probes): teacher-forced argmax over the target tokens (EOS included), scored by
the task family (greedy exact match, per-token accuracy, a probe's recall): a greedy decode reproduces the
target exactly iff the argmax is right at every target position given the right prefix, so the two are the
same metric and one forward pass per batch replaces n decoding steps.

Images: top-1 accuracy on ``samples`` held-out scenes per resolution; the scenes are the same at every
resolution (drawn once from ``IMAGE_EVAL_SEED``, then rendered at each), only the pixel noise is drawn anew.

Graphs: top-1 accuracy on ``samples`` held-out examples per graph size, drawn from a generator seeded by
``GRAPH_EVAL_SEED`` and the size, so every model sees the same graphs at a size and a size's examples do not
depend on the other sizes evaluated.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

from posenc.tasks.base import TokenTask
from posenc.training.data import token_batch
from posenc.training.graph_task import graph_batch
from posenc.training.vision import draw_scenes, render

Protocol = Literal["nonoverlapping", "sliding"]
LogitsFn = Callable[[torch.Tensor], torch.Tensor]  # ids (B, T) int64 -> logits (B, T, V)

EVAL_TOKENS_PER_BATCH = 8192  # windows per forward pass = this // L_valid (at least one)
IMAGE_EVAL_SEED = 20240602  # the held-out scenes (its + 1 seeds their pixel noise), apart from training's
GRAPH_EVAL_SEED = 20240603
GRAPH_EVAL_BATCH = 64
EVAL_PIXELS_PER_BATCH = 2**18  # images per forward pass = this // S² (64 at 64 px), at least one


@dataclass(frozen=True)
class Window:
    start: int  # index in the id stream of the window's first input token
    first_scored: int  # offset inside the window of the first scored target


@dataclass(frozen=True)
class TextScore:
    length: int
    protocol: Protocol
    stride: int | None  # sliding only
    nll: float  # mean nats per character
    ppl: float  # exp(nll)
    tokens: int  # scored targets
    windows: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ImageScore:
    resolution: int  # pixels per side
    accuracy: float  # top-1
    samples: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GraphScore:
    num_nodes: int
    accuracy: float  # top-1
    samples: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def default_stride(length: int) -> int:
    return max(1, length // 2)


def protocol_windows(available: int, length: int, protocol: Protocol, stride: int | None = None) -> list[Window]:
    """The windows a protocol scores with ``available`` targets; raises ValueError if not even one fits."""
    if available < length:
        raise ValueError(f"{available} validation targets are fewer than one window of {length}")
    if protocol == "nonoverlapping":
        return [Window(start=k * length, first_scored=0) for k in range(available // length)]
    step = stride if stride is not None else default_stride(length)
    if not 1 <= step <= length:
        raise ValueError(f"sliding stride must be in [1, {length}], got {step}")
    count = 1 + (available - length) // step
    return [Window(start=k * step, first_scored=0 if k == 0 else length - step) for k in range(count)]


@torch.inference_mode()
def evaluate_text(
    logits_fn: LogitsFn,
    ids: torch.Tensor,
    length: int,
    *,
    protocol: Protocol = "nonoverlapping",
    stride: int | None = None,
    max_tokens: int = 65536,
    device: str | torch.device = "cpu",
) -> TextScore:
    """Mean NLL and perplexity of the first ``max_tokens`` next-token targets of ids (N,) at ``length``."""
    available = min(max_tokens, len(ids) - 1)
    windows = protocol_windows(available, length, protocol, stride)
    per_batch = max(1, EVAL_TOKENS_PER_BATCH // length)
    offsets = torch.arange(length + 1)  # (T + 1,)
    total_nll = 0.0
    scored = 0
    for first in range(0, len(windows), per_batch):
        chunk = windows[first : first + per_batch]
        starts = torch.tensor([w.start for w in chunk])  # (b,)
        tokens = ids[starts[:, None] + offsets[None, :]].to(device)  # (b, T + 1)
        logits = logits_fn(tokens[:, :-1]).float()  # (b, T, V)
        log_probs = torch.log_softmax(logits, dim=-1)
        target_log_probs = log_probs.gather(-1, tokens[:, 1:, None]).squeeze(-1)  # (b, T)
        keep = torch.tensor([w.first_scored for w in chunk], device=target_log_probs.device)  # (b,)
        scored_mask = torch.arange(length, device=keep.device)[None, :] >= keep[:, None]  # (b, T)
        total_nll -= float(target_log_probs[scored_mask].double().sum())
        scored += int(scored_mask.sum())
    nll = total_nll / scored
    return TextScore(
        length=length,
        protocol=protocol,
        stride=(stride if stride is not None else default_stride(length)) if protocol == "sliding" else None,
        nll=nll,
        ppl=math.exp(nll),
        tokens=scored,
        windows=len(windows),
    )


@torch.inference_mode()
def evaluate_tokens(
    logits_fn: LogitsFn, family: TokenTask, size: int, *, batch_size: int = 50, device: str | torch.device = "cpu"
) -> list[dict[str, Any]]:
    """The held-out instances of one size (``family.eval_instances``, the same for every model), scored by
    teacher-forced argmax at every target token (a greedy decode reproduces the target iff every one is right):
    the family's metrics per instance (``family.score``), averaged over the instances of each group of tags.
    One cell per group: ``{"size", **tags, metric: mean, ..., "samples"}``."""
    instances = family.eval_instances(size, family.eval_generator(size))
    totals: dict[tuple[tuple[str, Any], ...], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[tuple[tuple[str, Any], ...], int] = defaultdict(int)
    for first in range(0, len(instances), batch_size):
        chunk = instances[first : first + batch_size]
        batch = token_batch(chunk)
        predicted = logits_fn(batch.inputs.to(device)).argmax(-1).cpu()  # (b, T)
        right = predicted == batch.targets  # (b, T)
        for row, (item, start) in enumerate(zip(chunk, batch.starts, strict=True)):
            correct = right[row, start : start + len(item.target) + 1].tolist()  # the target tokens and EOS
            key = tuple(sorted(item.tags.items()))
            for metric, value in family.score(correct, item).items():
                totals[key][metric] += value
            counts[key] += 1
    cells = []
    for key in sorted(totals, key=repr):
        cells.append(
            {"size": size, **dict(key), **{m: v / counts[key] for m, v in totals[key].items()}, "samples": counts[key]}
        )
    return cells


@torch.inference_mode()
def evaluate_images(
    classify: LogitsFn,
    task: str,
    resolution: int,
    *,
    samples: int = 100,
    device: str | torch.device = "cpu",
    seed: int | None = None,
) -> ImageScore:
    """Top-1 accuracy of ``classify`` (images (B, 3, S, S) -> logits (B, classes)) on the held-out scenes at
    ``resolution`` px: the same scenes for every model and every resolution. ``seed``: another draw than the
    evaluation's (``train.until``'s checks, which must not decide on the test set)."""
    first_seed = IMAGE_EVAL_SEED if seed is None else seed
    scenes = draw_scenes(task, samples, torch.Generator().manual_seed(first_seed))
    noise = torch.Generator().manual_seed(first_seed + 1)
    per_batch = max(1, EVAL_PIXELS_PER_BATCH // resolution**2)
    correct = 0
    for first in range(0, samples, per_batch):
        chunk = scenes.select(slice(first, first + per_batch))
        predicted = classify(render(chunk, resolution, noise).to(device)).argmax(-1).cpu()  # (b,)
        correct += int((predicted == chunk.labels).sum())
    return ImageScore(resolution=resolution, accuracy=correct / samples, samples=samples)


@torch.inference_mode()
def evaluate_graphs(
    classify: LogitsFn,
    task: str,
    num_nodes: int,
    *,
    family: str,
    max_distance: int,
    samples: int = 100,
    device: str | torch.device = "cpu",
    seed: int | None = None,
) -> GraphScore:
    """Top-1 accuracy of ``classify`` (packed graphs (B, N, 1 + N) -> logits (B, classes)) on the held-out
    examples of ``num_nodes`` nodes. Chance is 1 / min(max_distance, num_nodes − 1): labels are balanced.
    ``seed``: another draw than the evaluation's (``train.until``'s checks)."""
    generator = torch.Generator().manual_seed((GRAPH_EVAL_SEED if seed is None else seed) * 1_000_003 + num_nodes)
    correct = 0
    for first in range(0, samples, GRAPH_EVAL_BATCH):
        count = min(GRAPH_EVAL_BATCH, samples - first)
        batch = graph_batch(task, count, num_nodes, generator, family=family, max_distance=max_distance)
        predicted = classify(batch.packed().to(device)).argmax(-1).cpu()  # (b,)
        correct += int((predicted == batch.labels).sum())
    return GraphScore(num_nodes=num_nodes, accuracy=correct / samples, samples=samples)


def evaluate_lengths_text(
    logits_fn: LogitsFn,
    ids: torch.Tensor,
    lengths: Sequence[int],
    **options: Any,
) -> list[TextScore]:
    return [evaluate_text(logits_fn, ids, length, **options) for length in lengths]
