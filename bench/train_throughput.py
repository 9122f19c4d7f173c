"""Training tokens/s of posenc's model and job trainer against a minimal GPT, from the same run.

The baseline is a minimal GPT written here the way nanoGPT's model.py is (wte, + wpe for learned_absolute;
pre-LN blocks with a fused c_attn Linear(d, 3d) and F.scaled_dot_product_attention, is_causal for
learned_absolute and rope, the (H, T, T) ALiBi bias with the causal -inf built once as attn_mask for alibi;
rotate-half RoPE on cached cos/sin; a 4d GELU MLP; final LN; an untied lm_head without bias), sized so its
parameter count equals ``TinyTransformer``'s (asserted; wpe has ``max_positions`` rows like the learned table).
Any other method (``--method t5``) races the minimal GPT doing the same kind of work (a rotary method rope's, a
bias method alibi's, anything else nanoGPT's own learned absolute positions): what that method's layer costs
beyond it. Two ratios per method, tokens/s measured / baseline (higher is better):

    model step   TinyTransformer fwd + bwd + AdamW step + zero_grad in the same minimal loop as the minimal
                 GPT (same batches, same AdamW)                                       goal >= 1.0
    job trainer  posenc.training.train.train (hooks every step, checkpoint every 100 steps and at the end, as a
                 job does) vs the minimal GPT in a nanoGPT train.py-style loop that does the same work: AdamW
                 with decay on matrices only, the warmup + cosine lr set every step, clip_grad_norm_(1.0), the
                 loss read every step, a torch.save of model + optimizer at the same steps.   goal >= 0.98

The two sides alternate step by step, measured then baseline (a: in one loop; b: one baseline step inside each of
the trainer's progress hooks), and each measured step is set against the geometric mean of the baseline steps
just before and after it; the step with the median ratio is reported ("ratio"), so a load spike on a shared
machine spoils one step, not the figure. "all steps" is Σ baseline time / Σ measured time over every timed step,
checkpoints included. Compare ratios between runs, not tokens/s, which move with the machine's load. Default:
2 layers, d=128, 4 heads, T=128, B=32, all three methods, 5 warm-up + 60 timed steps (about 100 s on 2 cores).

    .venv/bin/python bench/train_throughput.py [--steps 60] [--warmup 5] [--threads 2] [--method rope ...]

``training_rows(steps, warmup, methods)`` gives the same figures as rows for ``bench/hardware_floor.py``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from posenc.pe import get_method
from posenc.pe.alibi import alibi_slopes
from posenc.schemas.jobs import TrainSpec
from posenc.training.hooks import Progress
from posenc.training.model import ModelConfig, TinyTransformer, count_parameters
from posenc.training.train import ADAM_BETAS, GRAD_CLIP, Batch, lr_factor, train

VOCAB = 65
METHODS = ("learned_absolute", "alibi", "rope")
LEARNED_ROWS = 1024  # learned_absolute's default max_positions: the minimal GPT's wpe has as many rows


@dataclass(frozen=True)
class Shape:
    layers: int = 2
    dim: int = 128
    heads: int = 4
    length: int = 128
    batch: int = 32


# ------------------------------------------------------------------------------------------ the minimal GPT
class MiniAttention(nn.Module):
    def __init__(self, shape: Shape, method: str) -> None:
        super().__init__()
        self.heads, self.method = shape.heads, method
        self.c_attn = nn.Linear(shape.dim, 3 * shape.dim)
        self.c_proj = nn.Linear(shape.dim, shape.dim)

    def forward(self, x: torch.Tensor, tables: tuple[torch.Tensor, ...]) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.c_attn(x).split(dim, dim=2)  # each (B, T, D)
        q = q.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)  # (B, H, T, hd)
        v = v.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)  # (B, H, T, hd)
        if self.method == "alibi":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=tables[0])  # bias (H, T, T) broadcasts over B
        else:
            if self.method == "rope":
                cos, sin = tables
                q, k = q * cos + rotated_half(q) * sin, k * cos + rotated_half(k) * sin
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hd)
        y = y.transpose(1, 2).contiguous().view(batch, length, dim)  # (B, T, D)
        out: torch.Tensor = self.c_proj(y)
        return out


def rotated_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dim: the partner of each feature in its pair."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class MiniBlock(nn.Module):
    def __init__(self, shape: Shape, method: str) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(shape.dim)
        self.attn = MiniAttention(shape, method)
        self.ln_2 = nn.LayerNorm(shape.dim)
        self.c_fc = nn.Linear(shape.dim, 4 * shape.dim)
        self.mlp_proj = nn.Linear(4 * shape.dim, shape.dim)

    def forward(self, x: torch.Tensor, tables: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), tables)
        out: torch.Tensor = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))
        return out


class MiniGPT(nn.Module):
    def __init__(self, shape: Shape, method: str) -> None:
        super().__init__()
        self.method = method
        self.wte = nn.Embedding(VOCAB, shape.dim)
        self.wpe = nn.Embedding(LEARNED_ROWS, shape.dim) if method == "learned_absolute" else None
        self.h = nn.ModuleList(MiniBlock(shape, method) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(shape.dim)
        self.lm_head = nn.Linear(shape.dim, VOCAB, bias=False)
        torch.manual_seed(0)
        for name, parameter in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(parameter)
            elif parameter.dim() >= 2:  # GPT-2 init; residual projections scaled by 1/sqrt(2L)
                std = 0.02 / math.sqrt(2 * shape.layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(parameter, 0.0, std)
        self.tables = self._position_tables(shape, method)  # built once: the layers only read them

    @staticmethod
    def _position_tables(shape: Shape, method: str) -> tuple[torch.Tensor, ...]:
        length, head_dim = shape.length, shape.dim // shape.heads
        if method == "alibi":
            slopes = torch.tensor(alibi_slopes(shape.heads))  # (H,)
            index = torch.arange(length)
            distance = (index[None, :] - index[:, None]).float()  # (T, T): j - i, <= 0 in the past
            bias = slopes[:, None, None] * distance[None]  # (H, T, T)
            return (bias.masked_fill(distance[None] > 0, float("-inf")),)
        if method == "rope":
            inv_freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (hd/2,)
            angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, hd/2)
            angles = torch.cat((angles, angles), dim=-1)  # (T, hd): both members of a pair share the angle
            return angles.cos().float(), angles.sin().float()
        return ()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids)  # (B, T, D)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(ids.shape[1], device=ids.device))  # (T, D) broadcasts over B
        for block in self.h:
            x = block(x, self.tables)
        logits: torch.Tensor = self.lm_head(self.ln_f(x))  # (B, T, V)
        return logits


def baseline_method(method: str) -> str:
    """The minimal GPT a method races: its own where it has one, else the one doing the same kind of work (a
    rotary method against rope, a bias method against alibi's dense bias), else nanoGPT's learned absolute."""
    if method in METHODS:
        return method
    kind = get_method(method).kind.value
    return {"rotary": "rope", "bias": "alibi"}.get(kind, "learned_absolute")


def tiny_config(shape: Shape, method: str) -> ModelConfig:
    return ModelConfig(
        vocab_size=VOCAB,
        layers=shape.layers,
        dim=shape.dim,
        heads=shape.heads,
        method=method,
        train_length=shape.length,
    )


# ------------------------------------------------------------------------------------------------- loops
class Steps:
    """One model's training, one step per call; ``step`` returns its wall time. ``job_work`` adds what a job's
    loop does besides fwd/bwd/AdamW, written as nanoGPT's train.py writes it: AdamW with decay on matrices
    only, the warmup + cosine lr set every step, clip_grad_norm_(1.0), the loss read every step, and a
    torch.save of model + optimizer at the trainer's checkpoint steps."""

    def __init__(self, model: nn.Module, batches: Sequence[Batch], spec: TrainSpec, root: Path, *, job_work: bool):
        self.model, self.batches, self.spec, self.root, self.job_work = model, batches, spec, root, job_work
        if job_work:
            decay = [p for p in model.parameters() if p.dim() >= 2]
            no_decay = [p for p in model.parameters() if p.dim() < 2]
            groups = [{"params": decay, "weight_decay": spec.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
            self.optimizer = torch.optim.AdamW(groups, lr=spec.lr, betas=ADAM_BETAS)
        else:
            self.optimizer = torch.optim.AdamW(
                model.parameters(), lr=spec.lr, betas=ADAM_BETAS, weight_decay=spec.weight_decay
            )
        self.done = 0
        self.losses: list[float] = []

    def step(self) -> float:
        began = time.perf_counter()
        batch, step, spec = self.batches[self.done], self.done, self.spec
        if self.job_work:
            lr = spec.lr * lr_factor(step, spec.warmup_steps, spec.steps)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        logits = self.model(batch.inputs)
        loss = F.cross_entropy(logits.view(-1, VOCAB), batch.targets.view(-1))  # (B·T, V) vs (B·T,)
        loss.backward()  # type: ignore[no-untyped-call]
        if self.job_work:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.done += 1
        if self.job_work:
            self.losses.append(loss.item())
            if self.done % spec.checkpoint_every == 0 or self.done == spec.steps:
                state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.done}
                torch.save(state, self.root / "baseline.pt")
        return time.perf_counter() - began


def model_step_times(measured: Steps, baseline: Steps) -> tuple[list[float], list[float]]:
    """(a): one measured step, then one baseline step, for every batch: the times of each, in that order."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in measured.batches:
        times[0].append(measured.step())
        times[1].append(baseline.step())
    return times


class InterleavedHooks:
    """Job hooks that run one baseline step inside every ``progress`` call, so the trainer and the baseline
    alternate step by step; a trainer step is the time from one hook's return to the next hook's call
    (cancel check, batch, step, lr schedule, loss read, checkpoint: everything of the loop but the hook)."""

    def __init__(self, baseline: Steps) -> None:
        self.baseline = baseline
        self.times: tuple[list[float], list[float]] = ([], [])
        self.mark = 0.0

    def progress(self, progress: Progress) -> None:
        self.times[0].append(time.perf_counter() - self.mark)
        self.times[1].append(self.baseline.step())
        self.mark = time.perf_counter()

    def should_cancel(self) -> bool:
        return False

    def note(self, message: str) -> None:
        del message


def job_step_times(
    config: ModelConfig, baseline: Steps, spec: TrainSpec, root: Path
) -> tuple[list[float], list[float]]:
    """(b): a trainer step, then a baseline step, for every batch (the trainer's first step includes building
    its model and optimizer: it is a warm-up step)."""
    cursor = iter(baseline.batches)
    hooks = InterleavedHooks(baseline)
    with tempfile.TemporaryDirectory(dir=root) as directory:
        hooks.mark = time.perf_counter()
        train(config, 0, spec, lambda generator: next(cursor), checkpoint_dir=Path(directory), hooks=hooks)
    return hooks.times


# -------------------------------------------------------------------------------------------- measuring
@dataclass(frozen=True)
class Figure:
    measured: float  # tokens/s of the measured step with the median ratio
    baseline: float  # tokens/s of the two baseline steps around it (geometric mean of their times)
    overall: float  # all timed steps, checkpoints included: Σ baseline time / Σ measured time

    @property
    def ratio(self) -> float:
        return self.measured / self.baseline


def bracketed(times: tuple[list[float], list[float]], warmup: int, tokens: int) -> Figure:
    """The steps ran b m b m ... (each list in run order, m_i just before b_i): every timed m_i is set against
    the geometric mean of b_{i−1} and b_i around it, and the step with the median ratio (the lower one of an
    even count) is reported, so a load spike on a shared machine spoils one step, not the figure."""
    measured, baseline = times
    timed = range(max(1, warmup), len(measured))
    around = {i: math.sqrt(baseline[i - 1] * baseline[i]) for i in timed}
    ratios = {i: around[i] / measured[i] for i in timed}
    median = statistics.median_low(ratios.values())
    step = next(i for i in timed if ratios[i] == median)
    overall = sum(baseline[i] for i in timed) / sum(measured[i] for i in timed)
    return Figure(tokens / measured[step], tokens / around[step], overall)


def random_batches(shape: Shape, count: int) -> list[Batch]:
    generator = torch.Generator().manual_seed(0)
    windows = torch.randint(0, VOCAB, (count, shape.batch, shape.length + 1), generator=generator)  # (S, B, T+1)
    # contiguous, as a data loader hands them over: inputs, targets (B, T) each
    return [Batch(window[:, :-1].contiguous(), window[:, 1:].contiguous()) for window in windows]


Row = tuple[str, float, str, float]  # name, measured tokens/s, baseline name, baseline tokens/s


def training_figures(
    steps: int = 60,
    warmup: int = 5,
    methods: Sequence[str] = METHODS,
    *,
    shape: Shape | None = None,
    checkpoint_every: int = 100,
) -> list[tuple[str, str, Figure]]:
    """Per method, (a) the model step and (b) the job trainer against the minimal GPT: (name, baseline name,
    figure)."""
    shape = shape if shape is not None else Shape()
    batches = random_batches(shape, warmup + steps)
    spec = TrainSpec(length=shape.length, steps=len(batches), batch_size=shape.batch, checkpoint_every=checkpoint_every)
    tokens = shape.batch * shape.length
    figures: list[tuple[str, str, Figure]] = []
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for method in methods:
            config = tiny_config(shape, method)
            own = method in METHODS
            against = method if own else baseline_method(method)
            tiny, mini = TinyTransformer(config), MiniGPT(shape, against)
            count, baseline_count = count_parameters(tiny), count_parameters(mini)
            assert count == baseline_count or not own, (
                f"{method}: TinyTransformer {count} parameters, minimal GPT {baseline_count}"
            )
            step = model_step_times(
                Steps(tiny, batches, spec, root, job_work=False), Steps(mini, batches, spec, root, job_work=False)
            )
            figures.append(
                (f"train step TinyTransformer {method}", "minimal GPT step", bracketed(step, warmup, tokens))
            )
            baseline = Steps(MiniGPT(shape, against), batches, spec, root, job_work=True)
            job = bracketed(job_step_times(config, baseline, spec, root), warmup, tokens)
            figures.append((f"job trainer {method}", "minimal GPT train loop", job))
    return figures


def training_rows(steps: int = 60, warmup: int = 5, methods: Sequence[str] = METHODS) -> list[Row]:
    """``training_figures`` as (name, measured tokens/s, baseline name, baseline tokens/s) rows, for
    ``bench/hardware_floor.py``; measured / baseline is the median bracketed ratio."""
    return [(name, f.measured, baseline, f.baseline) for name, baseline, f in training_figures(steps, warmup, methods)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60, help="timed steps of each side")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument(
        "--method",
        action="append",
        help="repeatable; default the minimal GPT's three (learned_absolute, alibi, rope); any other registered 1D "
        "method races the minimal GPT of its kind (rotary: rope, bias: alibi, else learned_absolute)",
    )
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shape = Shape(args.layers, args.dim, args.heads, args.length, args.batch)
    methods = args.method or list(METHODS)
    print(
        f"{shape.layers} layers, d={shape.dim}, {shape.heads} heads, T={shape.length}, B={shape.batch}; "
        f"{args.steps} timed steps after {args.warmup} warm-up, {torch.get_num_threads()} threads"
    )
    figures = training_figures(args.steps, args.warmup, methods, shape=shape, checkpoint_every=args.checkpoint_every)
    print(f"{'measured':<44} {'tokens/s':>9}   {'baseline':<24} {'tokens/s':>9}   ratio   all steps")
    for name, baseline, f in figures:
        print(f"{name:<44} {f.measured:9.0f}   {baseline:<24} {f.baseline:9.0f}   {f.ratio:.3f}   {f.overall:.3f}")


if __name__ == "__main__":
    main()
