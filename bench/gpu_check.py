"""One command for a CUDA machine: does posenc work there, and how far is it from the hardware?

Parts (``--parts``, default all, in this order; each has a time budget so that the whole run stays under 9
minutes on a GPU, and its elapsed time is printed):

    tests   ``pytest -m gpu`` over the files that use the marker, in a subprocess: passed / failed / skipped
            counts (on the CPU they skip)
    jobs    a private redis-server (``posenc.runtime.start_redis``), a worker on the ``gpu`` queue
            (``posenc worker``, POSENC_DEVICE=cuda) and the gateway (uvicorn service.main:app); a train job and
            a small benchmark (rope, alibi, transformer_xl; one seed) with "device": "cuda" submitted over HTTP
            must succeed with the device recorded in their result, and the train job's final loss must be
            within 5% of the same spec and seed run in this process on the CPU
    flex    FlexAttention forward, and forward + backward, against the materialised-bias SDPA path for every
            bias and score_mod method with a score_mod form, (4, 8, 1024, 64), each method compiled afresh
            (outputs and gradients must agree; the CPU has the forward only, noted as such), and per method the
            attention path table's choice (``posenc.pe.paths``) against the fastest of the dense-mask SDPA,
            FlexAttention and materialised paths, fwd+bwd: "CHANGE IT" in a row's note when another path is
            more than 1.1x faster
    rotary  the rotary apply on q and k (1, 32, 4096, 128), float32 and bfloat16, against cloning them (on
            CUDA also with posenc's compiled kernels switched off)
    bias    ALiBi's dense (8, 4096, 4096) bias against cloning the same bytes
    train   training tokens/s of the job model (its step, and the job trainer) against a minimal GPT of the
            same size (bench/train_throughput.py), for learned_absolute, alibi and rope; 4 layers, d=256,
            T=256, B=64
    nanogpt the job trainer (precision and compile at auto: bf16 and compiled on CUDA) for learned_absolute,
            rope, alibi, t5, fire and xpos against nanoGPT's own configuration at the same size (its GPT,
            bf16 autocast, compiled, fused AdamW, flash SDPA), at 4 layers d=256 T=256 and at GPT-2 small (12
            layers, d=768, 12 heads, T=1024): goal >= 0.9x; each row names the precision, the compile and the
            attention paths taken
    compile the same compiled training run in two fresh processes sharing an empty Inductor cache (two
            workers of a machine): the second one's first step against the first one's, every graph from
            the cache
    study   (only with --parts study) a context-extension study at GPT-2-small scale: rope trained once at
            T=1024 on the text corpus (``POSENC_DATA_DIR``'s tinyshakespeare.txt when there, else the
            offline stdlib corpus), then Position Interpolation, NTK-aware and YaRN at factor 4 applied at
            evaluation only, perplexity at 1x, 2x and 4x the training length (the job's own rules, run by
            ``run_job`` in this process as a worker runs it); ``--quick`` shrinks it to seconds
    vit     a ViT training step per 2D method against the same ViT without a positional encoding (``nope``);
            64 px images in 8 px patches, 4 layers, d=256, B=128

Every ratio is measured / baseline from the same run (medians of alternated calls, each followed by
``torch.cuda.synchronize``): times, lower is better; tokens/s, higher is better. A part that raises or whose
check fails is ``FAILED`` in the table and the run goes on; a part that ran out of its budget is ``partial``.
The table (GPU name, torch and CUDA versions first) is printed and written to OUT_DIR/gpu_check.md, all numbers
to OUT_DIR/gpu_check.json, with the tests' and the service's logs beside them. Exit status: 0 when no part
failed, 1 when one did, 2 without CUDA (unless ``--device cpu``) or for bad arguments.

    .venv/bin/python bench/gpu_check.py OUT_DIR                          # on the CUDA machine
    .venv/bin/python bench/gpu_check.py OUT_DIR --device cpu --quick     # every part on the CPU, small sizes
    .venv/bin/python bench/gpu_check.py OUT_DIR --parts flex,rotary      # some parts only

``--quick`` uses small sizes (what tests/integration/test_gpu_check.py runs on the CPU: 20 to 50 s on 2 cores).
``--threads N`` sets torch's threads here and
the jobs' worker's (POSENC_TORCH_THREADS); on a shared small CPU, 1 keeps the timings steady.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PART_NAMES = ("tests", "jobs", "flex", "rotary", "bias", "train", "nanogpt", "compile", "vit", "study")
DEFAULT_PARTS = PART_NAMES[:-1]  # the study only when asked for: it is longer than the rest together
TOTAL_BUDGET_S = 530.0  # the 9-minute target, less the start-up and the table
NO_CUDA = "no CUDA device: torch.cuda.is_available() is False; run with --device cpu to exercise the script on the CPU"


@dataclass
class PartOutcome:
    name: str
    status: str  # ok, partial (rows skipped over the budget), skipped (not run: the total budget), FAILED
    seconds: float
    rows: list[Any] = field(default_factory=list)  # gpu_check_parts.Row
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path, help="folder for gpu_check.md, gpu_check.json and the logs")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes (the CPU test's)")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads here and in the jobs' worker (default: theirs)"
    )
    parser.add_argument(
        "--parts",
        default=",".join(DEFAULT_PARTS),
        help=f"comma-separated, of: {','.join(PART_NAMES)} (default all but study)",
    )
    args = parser.parse_args(argv)
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = [part for part in parts if part not in PART_NAMES]
    if unknown or not parts:
        parser.error(f"--parts: unknown {unknown} (choose from {','.join(PART_NAMES)})")
    args.parts = [part for part in PART_NAMES if part in parts]  # always in the documented order
    return args


def cuda_problem() -> str | None:
    """Why CUDA cannot be used, in one line, or None. torch's own warnings (a driver too old) join the line."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if available:
        return None
    said = "; ".join(" ".join(str(w.message).split()) for w in caught)
    return NO_CUDA if not said else NO_CUDA.replace("is False;", f"is False ({said});", 1)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def device_info(device: Any) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "device": device.type,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(
            {
                "gpu": torch.cuda.get_device_name(device),
                "gpu_memory_gib": round(properties.total_memory / 2**30, 1),
                "compute_capability": f"{properties.major}.{properties.minor}",
                "cudnn": torch.backends.cudnn.version(),  # type: ignore[no-untyped-call]
            }
        )
    return info


def describe(info: dict[str, Any]) -> str:
    if info["device"] == "cuda":
        where = f"{info['gpu']} ({info['gpu_memory_gib']} GiB, sm {info['compute_capability']})"
        return f"{where} · torch {info['torch']} · CUDA {info['cuda']} · cuDNN {info['cudnn']} · cpu {info['cpu']}"
    cuda = f"CUDA {info['cuda']}" if info["cuda"] else "no CUDA build"
    threads = info["torch_threads"]
    cores = f"{info['cpu_cores']} cores, {threads} torch thread{'' if threads == 1 else 's'}"
    return f"cpu: {info['cpu']} ({cores}) · torch {info['torch']} · {cuda}"


def run_part(name: str, check: Any, budget_s: float, total_deadline: float) -> PartOutcome:
    from gpu_check_parts import PARTS, Row

    if time.monotonic() >= total_deadline:
        row = Row("not run", note="the run's total budget was spent", skipped=True)
        print(f"[gpu_check] {name}: skipped (total budget spent)", flush=True)
        return PartOutcome(name, "skipped", 0.0, [row])
    check.deadline = min(time.monotonic() + budget_s, total_deadline)
    check.details = {}
    print(f"[gpu_check] {name}: running (budget {check.deadline - time.monotonic():.0f} s)", flush=True)
    began = time.perf_counter()
    error = None
    try:
        rows = PARTS[name](check)
    except Exception as exc:
        traceback.print_exc()
        error = f"{type(exc).__name__}: {exc}"
        rows = [Row("part raised", note=" ".join(error.split())[:300], ok=False)]
    seconds = time.perf_counter() - began
    if any(not row.ok for row in rows):
        status = "FAILED"
    elif any(row.skipped for row in rows):
        status = "partial"
    else:
        status = "ok"
    print(f"[gpu_check] {name}: {status} in {seconds:.1f} s", flush=True)
    return PartOutcome(name, status, seconds, rows, dict(check.details), error)


def figure(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "ms":
        return f"{value:.3g} ms" if value < 100 else f"{value:,.0f} ms"
    if unit == "tok/s":
        return f"{value:,.0f} tok/s"
    if unit == "loss":
        return f"{value:.4f}"
    if unit == "s":
        return f"{value:.1f} s"
    return f"{value:g} {unit}".strip()


def table(outcomes: Sequence[PartOutcome], info: dict[str, Any], quick: bool, total_s: float) -> str:
    """The markdown report: the machine, one line per part, then one table row per measurement."""
    lines = [
        "# posenc GPU check",
        "",
        f"device: {describe(info)}",
        f"sizes: {'quick (reduced)' if quick else 'full'}; total {total_s:.0f} s; ratio = measured / baseline, "
        "same run (times: lower is better, tok/s: higher is better)",
        "",
        "parts: " + " · ".join(f"{o.name} {o.status} {o.seconds:.0f} s" for o in outcomes),
        "",
        "| part | status | measured | value | baseline | value | ratio | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for outcome in outcomes:
        for row in outcome.rows:
            status = outcome.status if row.ok else "FAILED"
            ratio = f"{row.ratio:.2f}x" if row.ratio is not None else ""
            cells = (
                outcome.name,
                status,
                row.name,
                figure(row.measured, row.unit),
                row.baseline_name,
                figure(row.baseline, row.unit),
                ratio,
                row.note.replace("|", "/"),
            )
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    if args.device == "cuda":
        problem = cuda_problem()
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_check_parts import BUDGETS_S, FULL, QUICK, Check

    out_dir: Path = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    info = device_info(device)
    print(f"[gpu_check] {describe(info)}", flush=True)
    sizes = QUICK if args.quick else FULL
    check = Check(device=device, quick=args.quick, out_dir=out_dir, sizes=sizes, threads=args.threads)
    total_deadline = began + TOTAL_BUDGET_S
    outcomes = [run_part(name, check, BUDGETS_S[name], total_deadline) for name in args.parts]
    total_s = time.monotonic() - began
    report = table(outcomes, info, args.quick, total_s)
    (out_dir / "gpu_check.md").write_text(report, encoding="utf-8")
    record = {
        "device": info,
        "quick": args.quick,
        "parts": [
            {
                "name": o.name,
                "status": o.status,
                "seconds": o.seconds,
                "error": o.error,
                "rows": [row.to_json() for row in o.rows],
                "details": o.details,
            }
            for o in outcomes
        ],
        "total_seconds": total_s,
    }
    (out_dir / "gpu_check.json").write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
    print(report, flush=True)
    print(f"[gpu_check] total {total_s:.1f} s; wrote {out_dir / 'gpu_check.md'} and gpu_check.json", flush=True)
    return 1 if any(o.status == "FAILED" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
