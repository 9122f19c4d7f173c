"""The LM-X text benchmark through ``run_job`` in process, checked against the published shape.

tinyshakespeare, 2 layers, d=128, 4 heads, train length 128, 1000 steps, batch 32, lr 2e-3; sinusoidal, rope,
alibi; nonoverlapping evaluation at 128, 256, 512, 1024; seed 0. Prints the table, the
wall time and the plot path, then the three checks:
    sinusoidal ppl(2L) >= 2 ppl(L);  rope ppl(8L) > alibi ppl(8L);  alibi ppl(8L) within 10% of ppl(L).

    .venv/bin/python bench/extrapolation_benchmark.py [--data-dir DIR] [--out DIR] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from posenc.schemas.jobs import JobSpec
from posenc.training.hooks import Progress
from posenc.training.jobs import run_job

REPO_ROOT = Path(__file__).resolve().parents[1]


class PrintingHooks:
    """Prints progress every ``every`` steps; never cancels."""

    def __init__(self, every: int = 250) -> None:
        self.every = every
        self.started = time.perf_counter()

    def progress(self, progress: Progress) -> None:
        if progress.step % self.every == 0 or progress.step == progress.total or "eval" in (progress.stage or ""):
            elapsed = time.perf_counter() - self.started
            loss = f"{progress.loss:.3f}" if progress.loss is not None else "-"
            print(
                f"  [{elapsed:6.1f}s] {progress.step}/{progress.total} {progress.stage} loss {loss}",
                flush=True,
            )

    def should_cancel(self) -> bool:
        return False

    def note(self, message: str) -> None:
        del message


def benchmark_spec(steps: int) -> JobSpec:
    return JobSpec.model_validate(
        {
            "methods": [{"method": "sinusoidal"}, {"method": "rope"}, {"method": "alibi"}],
            "data": {"corpus": "tinyshakespeare"},
            "model": {"layers": 2, "dim": 128, "heads": 4},
            "train": {"length": 128, "steps": steps, "batch_size": 32, "lr": 2e-3},
            "eval": {"lengths": [128, 256, 512, 1024], "protocol": "nonoverlapping"},
            "seeds": [0],
        }
    )


def ppl(result: dict[str, Any], method: str, length: int) -> float:
    [value] = [
        row["value"]
        for row in result["table"]
        if row["method"] == method and row["size"] == length and row["metric"] == "ppl"
    ]
    return float(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_data = os.environ.get("POSENC_DATA_DIR") or str(REPO_ROOT / ".." / "shared" / "data")
    parser.add_argument("--data-dir", type=Path, default=Path(default_data))
    parser.add_argument("--out", type=Path, default=None, help="job directory (default: a new temp dir)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    job_dir = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="posenc-bench-"))
    spec = benchmark_spec(args.steps)

    began = time.perf_counter()
    result = run_job(
        "benchmark",
        spec,
        job_dir=job_dir,
        artifact_root=job_dir.parent,
        hooks=PrintingHooks(),
        data_dir=args.data_dir,
        threads=args.threads,
    )
    wall = time.perf_counter() - began

    data = result["data"]
    lengths = data["sizes"]
    print(f"\nprotocol {spec.eval.protocol}, train length {data['train_size']} {data['unit']}, seed 0")
    print("method      " + "".join(f"  ppl@{n:<5}" for n in lengths) + "  " + "".join(f"  nll@{n:<5}" for n in lengths))
    for method in ("sinusoidal", "rope", "alibi"):
        ppls = "".join(f"  {ppl(result, method, n):9.3f}" for n in lengths)
        nlls = "".join(
            f"  {row['value']:9.3f}"
            for n in lengths
            for row in result["table"]
            if row["method"] == method and row["size"] == n and row["metric"] == "nll"
        )
        print(f"{method:<12}{ppls}  {nlls}")
    print(f"\nwall time {wall:.1f} s ({wall / 60:.2f} min)")
    print(f"plot {job_dir / 'plot.png'}")
    print(f"table {job_dir / 'table.csv'}")

    base = spec.train.length
    checks = {
        "sinusoidal ppl(2L) >= 2 ppl(L)": ppl(result, "sinusoidal", 2 * base) >= 2 * ppl(result, "sinusoidal", base),
        "rope ppl(8L) > alibi ppl(8L)": ppl(result, "rope", 8 * base) > ppl(result, "alibi", 8 * base),
        "alibi ppl(8L) within 10% of ppl(L)": abs(ppl(result, "alibi", 8 * base) / ppl(result, "alibi", base) - 1)
        <= 0.10,
        "under 10 minutes": wall <= 600,
    }
    for name, passed in checks.items():
        print(f"{'PASS' if passed else 'FAIL'}  {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
