"""Training tokens/s of the job trainer against a plain loop of the same model size, from the same run.

The job trainer is ``posenc.training.train.train`` with hooks called every step and checkpoints on (the path
``run_job`` takes); the baseline is a minimal pre-LN decoder written here (F.scaled_dot_product_attention,
rotate-half RoPE, AdamW, no hooks, no checkpoints, no registry). Both train on the same random char ids for the
same number of steps after a warm-up; the ratio (job / plain) is what to compare between runs, since the
absolute numbers move with the machine's load. Default: 2 layers, d=128, 4 heads, T=128, B=32, rope, 100 steps.

    .venv/bin/python bench/train_throughput.py [--steps 100] [--warmup 10] [--threads 2] [--method rope]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from posenc.schemas.jobs import TrainSpec
from posenc.training.hooks import Progress
from posenc.training.model import ModelConfig
from posenc.training.train import Batch, train

VOCAB = 65


class TimingHooks:
    """What a job's hooks cost at least (one call each per step); notes when the warm-up steps are done."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.warm_at = 0.0

    def progress(self, progress: Progress) -> None:
        if progress.step == self.warmup:
            self.warm_at = time.perf_counter()

    def should_cancel(self) -> bool:
        return False


# ------------------------------------------------------------------------------------- the plain baseline
class PlainBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, dim // self.heads)  # (B, T, 3, H, hd)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, T, hd)
        q, k = rotate_half(q, cos, sin), rotate_half(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hd)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, length, dim))  # (B, T, D)
        out: torch.Tensor = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return out


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


class PlainModel(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, length: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.blocks = nn.ModuleList(PlainBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        head_dim = dim // heads
        inv_freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (hd/2,)
        angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, hd/2)
        self.cos, self.sin = angles.cos().float(), angles.sin().float()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        out: torch.Tensor = self.head(self.norm(x))
        return out


def plain_tokens_per_s(args: argparse.Namespace, batches: list[Batch]) -> float:
    torch.manual_seed(0)
    model = PlainModel(args.layers, args.dim, args.heads, args.length)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    began = 0.0
    for step, batch in enumerate(batches):
        if step == args.warmup:
            began = time.perf_counter()
        logits = model(batch.inputs)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch.targets.reshape(-1))  # (B·T, V) vs (B·T,)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return float(args.steps * args.batch * args.length / (time.perf_counter() - began))


def job_tokens_per_s(args: argparse.Namespace, batches: list[Batch]) -> float:
    """The job trainer with hooks and checkpoints, timed from the end of the warm-up steps to its return."""
    config = ModelConfig(vocab_size=VOCAB, layers=args.layers, dim=args.dim, heads=args.heads, method=args.method)
    spec = TrainSpec(
        length=args.length,
        steps=args.warmup + args.steps,
        batch_size=args.batch,
        checkpoint_every=args.checkpoint_every,
    )
    cursor = iter(batches)
    hooks = TimingHooks(args.warmup)
    with tempfile.TemporaryDirectory() as directory:
        train(config, 0, spec, lambda generator: next(cursor), checkpoint_dir=Path(directory), hooks=hooks)
        ended = time.perf_counter()
    return float(args.steps * args.batch * args.length / (ended - hooks.warm_at))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--method", default="rope")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    total = args.warmup + args.steps
    windows = torch.randint(0, VOCAB, (total, args.batch, args.length + 1), generator=generator)  # (S, B, T + 1)
    batches = [Batch(w[:, :-1], w[:, 1:]) for w in windows]

    print(
        f"{args.layers} layers, d={args.dim}, {args.heads} heads, T={args.length}, B={args.batch}, "
        f"{args.method}, {args.steps} timed steps after {args.warmup} warm-up, {torch.get_num_threads()} threads"
    )
    plain = plain_tokens_per_s(args, batches)
    job = job_tokens_per_s(args, batches)
    plain_again = plain_tokens_per_s(args, batches)  # bracket the job run: load drifts on a shared machine
    baseline = math.sqrt(plain * plain_again)
    print(f"plain loop   {plain:10.0f} tokens/s  (then {plain_again:.0f}; geometric mean {baseline:.0f})")
    print(f"job trainer  {job:10.0f} tokens/s  (hooks every step, checkpoint every {args.checkpoint_every})")
    print(f"ratio job/plain {job / baseline:.3f}")


if __name__ == "__main__":
    main()
