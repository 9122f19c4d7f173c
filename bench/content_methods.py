"""What the content-dependent methods cost, from one run (ratios against baselines measured in the same run).

1. Training step time of every method against ``rope``: the LM-X model (2 layers, d=128, 4 heads), T=128,
   batch 8, forward + backward + AdamW step, on this machine's device. Methods are timed in interleaved
   rounds (rope, m1, m2, ..., rope, m1, ...) so a noisy neighbour slows all of them alike.
2. FlexAttention against the materialised path for ``alibi`` and ``transformer_xl``, forward and backward:
   causal self-attention of (B=4, H=4, T=256, d=32). On the CPU this torch's FlexAttention has no backward
   (said, not timed); its forward is timed eager and compiled (the compile time is reported apart).
   On CUDA both directions, compiled.
3. The applier's rotary path (``RotaryApplier.rotate``, tables from float64 angles) against a plain
   rotate_half loop with precomputed float32 tables (``q·cos + rotate_half(q)·sin``).
4. ViT training step time of every 2D method against ``nope``: the tiny ViT of the image benchmark (4 layers,
   d=64, 4 heads, 32 px images in 4 px patches plus CLS: 65 tokens), batch 32, interleaved rounds as in 1.

From the repository root:

    .venv/bin/python bench/content_methods.py [--steps 6] [--rounds 3] [--methods alibi,transformer_xl,...]

Nothing is asserted; the figures go in the closing note.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from posenc.pe import apply_rotary, get_method, list_methods
from posenc.pe.appliers import Applier, Layer, build_applier, future_mask, positions, rotary_applier
from posenc.training.model import ModelConfig, TinyTransformer
from posenc.training.vit import VisionTransformer, ViTConfig


def _timed(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up."""
    fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


# ------------------------------------------------------------------------------------------ training steps
def training_step(name: str, ids: torch.Tensor) -> Callable[[], None]:
    """One AdamW step of the LM-X model with method ``name`` on ``ids`` (B, T + 1), warmed up once."""
    config = ModelConfig(vocab_size=65, layers=2, dim=128, heads=4, method=name, train_length=128)
    model = TinyTransformer(config, seed=0).to(ids.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        logits = model(ids[:, :-1])  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 65), ids[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        optimizer.step()

    step()  # warm-up: allocations, caches, lazy init
    return step


def training_steps(methods: list[str], device: torch.device, steps: int, rounds: int) -> None:
    print(f"\n## 1. training step time against rope (LM-X: 2 layers, d=128, 4 heads, T=128, batch 8, {device})")
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 65, (8, 129), generator=generator).to(device)
    runs = {name: training_step(name, ids) for name in ["rope", *[m for m in methods if m != "rope"]]}
    per_step: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            per_step[name].append(_timed(run, device, steps))
    baseline = statistics.median(per_step["rope"])
    print("| method | kind | ms/step | ratio to rope |")
    print("|---|---|---|---|")
    for name, samples in per_step.items():
        median = statistics.median(samples)
        kind = get_method(name).kind.value
        print(f"| `{name}` | {kind} | {median * 1000:.1f} | {median / baseline:.2f} |")


# ---------------------------------------------------------------------------------------------- ViT steps
# params a method needs on this ViT: swin's window is the whole 8 x 8 grid, liere's blocks fit 16-wide heads
VIT_PARAMS: dict[str, dict[str, Any]] = {"swin": {"window": [8, 8]}, "liere": {"block_size": 4}}


def vit_step(name: str, images: torch.Tensor, labels: torch.Tensor) -> Callable[[], None]:
    """One AdamW step of the benchmark's tiny ViT with method ``name``, warmed up once."""
    config = ViTConfig(
        num_classes=4,
        image_size=32,
        patch_size=4,
        layers=4,
        dim=64,
        heads=4,
        method=name,
        params=VIT_PARAMS.get(name, {}),
    )
    model = VisionTransformer(config, seed=0).to(images.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        optimizer.step()

    step()
    return step


def vit_steps(device: torch.device, steps: int, rounds: int) -> None:
    print(
        f"\n## 4. ViT training step time against nope (4 layers, d=64, 4 heads, 32 px / 4 px + CLS, batch 32, {device})"
    )
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(32, 3, 32, 32, generator=generator).to(device)  # (B, 3, S, S)
    labels = torch.randint(0, 4, (32,), generator=generator).to(device)
    names = ["nope", *[s.name for s in list_methods() if s.axes == 2 and s.name != "nope"]]
    runs = {name: vit_step(name, images, labels) for name in names}
    per_step: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            per_step[name].append(_timed(run, device, steps))
    baseline = statistics.median(per_step["nope"])
    print("| method | kind | ms/step | ratio to nope |")
    print("|---|---|---|---|")
    for name, samples in per_step.items():
        median = statistics.median(samples)
        print(f"| `{name}` | {get_method(name).kind.value} | {median * 1000:.1f} | {median / baseline:.2f} |")


# -------------------------------------------------------------------------------------------- FlexAttention
def flex_against_materialised(device: torch.device, repeats: int) -> None:
    print(f"\n## 2. FlexAttention against the materialised path (B=4, H=4, T=256, d=32, causal, {device})")
    print("| method | direction | materialised ms | flex ms | flex / materialised | note |")
    print("|---|---|---|---|---|---|")
    for name in ("alibi", "transformer_xl"):
        flex_case(name, device, repeats)


def flex_case(name: str, device: torch.device, repeats: int) -> None:
    generator = torch.Generator().manual_seed(1)
    spec = get_method(name)
    layer = Layer(num_heads=4, head_dim=32, causal=True, model_dim=128, device=device)
    applier = build_applier(spec, spec.parse_params({}), layer)
    q, k, v = (torch.randn(4, 4, 256, 32, generator=generator).to(device) for _ in range(3))  # (B, H, T, d)
    x = torch.randn(4, 256, 128, generator=generator).to(device)  # (B, T, D_model)
    pos = positions(256, device)
    mask = future_mask(pos, pos)

    def materialised() -> torch.Tensor:
        out = applier.attend(q, k, v, q_pos=pos, k_pos=pos, mask=mask, x=x).output
        assert out is not None
        return out

    def flex() -> torch.Tensor:
        out = applier.flex_attend(q, k, v, x=x)
        assert out is not None
        return out

    with torch.no_grad():
        base = _timed(materialised, device, repeats)
        eager = _timed(flex, device, repeats)
    note = "eager (unfused)" if device.type == "cpu" else "compiled"
    print(f"| `{name}` | forward | {base * 1000:.1f} | {eager * 1000:.1f} | {eager / base:.2f} | {note} |")
    if device.type == "cpu":
        compiled_row(name, applier, q, k, v, x, base, repeats)
        why = f"FlexAttention has no CPU backward in torch {torch.__version__}"
        print(f"| `{name}` | backward | - | - | - | {why} |")
        return
    for tensor in (q, k, v):
        tensor.requires_grad_(True)

    def backward(forward: Callable[[], torch.Tensor]) -> Callable[[], None]:
        return lambda: torch.autograd.backward(forward().sum())

    base_bwd = _timed(backward(materialised), device, repeats)
    flex_bwd = _timed(backward(flex), device, repeats)
    print(
        f"| `{name}` | forward + backward | {base_bwd * 1000:.1f} | {flex_bwd * 1000:.1f} | "
        f"{flex_bwd / base_bwd:.2f} | compiled |"
    )


def compiled_row(
    name: str,
    applier: Applier,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    x: torch.Tensor,
    base: float,
    repeats: int,
) -> None:
    """The CPU forward through ``torch.compile(flex_attention)``: the kernel the CUDA path uses, compiled for
    the CPU. Its first call compiles (reported apart)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    length = q.shape[-2]
    pos = positions(length, q.device)
    with torch.no_grad():
        rq, rk = applier.rotate(q, k, pos, pos)
        score_mod = applier.score_term(rq, rk, pos, x)
        # the method's own score term (XL's position logits, ALiBi's table) is computed outside the kernel
        term_s = _timed(lambda: applier.score_term(rq, rk, pos, x), q.device, repeats)

    def causal(b: Any, h: Any, i: Any, j: Any) -> Any:
        return i >= j

    block_mask = create_block_mask(causal, None, None, length, length, device=q.device)
    kernel = torch.compile(flex_attention, dynamic=False)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            kernel(rq, rk, v, score_mod=score_mod, block_mask=block_mask)
            compile_s = time.perf_counter() - start
            seconds = _timed(lambda: kernel(rq, rk, v, score_mod=score_mod, block_mask=block_mask), q.device, repeats)
    except Exception as exc:  # no C++ toolchain, or an inductor limitation on this host
        print(f"| `{name}` | forward | {base * 1000:.1f} | - | - | compiled: failed ({type(exc).__name__}) |")
        return
    total = seconds + term_s
    note = (
        f"compiled (first call {compile_s:.1f} s); kernel {seconds * 1000:.1f} ms + score term {term_s * 1000:.1f} ms"
    )
    print(f"| `{name}` | forward | {base * 1000:.1f} | {total * 1000:.1f} | {total / base:.2f} | {note} |")


# ------------------------------------------------------------------------------------------------- rotary
def rotary_paths(device: torch.device, repeats: int) -> None:
    print(f"\n## 3. the applier's rotary path against a plain rotate_half loop (B=8, H=4, T=512, d=64, {device})")
    generator = torch.Generator().manual_seed(2)
    q, k = (torch.randn(8, 4, 512, 64, generator=generator).to(device) for _ in range(2))
    pos = positions(512, device)
    spec = get_method("rope")
    applier = rotary_applier(spec, spec.parse_params({}), Layer(num_heads=4, head_dim=64, causal=True, device=device))
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float64, device=device) / 64))  # (32,)
    angles = pos.to(torch.float64)[:, None] * inv_freq[None, :]  # (T, 32)
    cos = torch.cat((angles.cos(), angles.cos()), -1).float()  # (T, 64)
    sin = torch.cat((angles.sin(), angles.sin()), -1).float()  # (T, 64)

    def rotate_half(t: torch.Tensor) -> torch.Tensor:
        half = t.shape[-1] // 2
        return torch.cat((-t[..., half:], t[..., :half]), -1)

    def plain() -> tuple[torch.Tensor, torch.Tensor]:
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    def through_applier() -> tuple[torch.Tensor, torch.Tensor]:
        return applier.rotate(q, k, pos, pos)

    cos_half, sin_half, _, _ = applier.tables(pos, 512)  # (T, 32) each: what the training path caches

    def cached_tables() -> tuple[torch.Tensor, torch.Tensor]:
        return (
            apply_rotary(q, cos_half, sin_half, pairing="half"),
            apply_rotary(k, cos_half, sin_half, pairing="half"),
        )

    torch.testing.assert_close(through_applier()[0], plain()[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(cached_tables()[0], plain()[0], atol=1e-4, rtol=1e-4)
    base = _timed(plain, device, repeats)
    ours = _timed(through_applier, device, repeats)
    cached = _timed(cached_tables, device, repeats)
    print("| path | ms | ratio |")
    print("|---|---|---|")
    print(f"| plain rotate_half, tables precomputed | {base * 1000:.2f} | 1.00 |")
    print(f"| applier rotation, tables cached (the training path) | {cached * 1000:.2f} | {cached / base:.2f} |")
    print(
        f"| RotaryApplier.rotate, tables built per call from float64 angles | {ours * 1000:.2f} | {ours / base:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="timed training steps per round and method")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per kernel measurement")
    parser.add_argument("--methods", default=None, help="comma-separated; default: every score_mod/attention one")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: train,flex,rotary,vit")
    args = parser.parse_args()
    device = torch.device(args.device)
    methods = (
        args.methods.split(",")
        if args.methods
        else [s.name for s in list_methods() if s.kind.value in ("score_mod", "attention") and s.axes == 1]
    )
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}")
    skip = set(filter(None, args.skip.split(",")))
    if "train" not in skip:
        training_steps(methods, device, args.steps, args.rounds)
    if "flex" not in skip:
        flex_against_materialised(device, args.repeats)
    if "rotary" not in skip:
        rotary_paths(device, args.repeats)
    if "vit" not in skip:
        vit_steps(device, args.steps, args.rounds)


if __name__ == "__main__":
    main()
