"""bench/gpu_check.py on the CPU: every part runs at reduced sizes, and without CUDA the default
``--device cuda`` refuses at once.

The first test is the script's own CPU run, ``--device cpu --quick``: a real redis-server, gateway and Celery
worker, a train and a benchmark job over HTTP, and every timing part at small sizes (about 45 s on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_check.py"
PARTS = ("tests", "jobs", "flex", "rotary", "bias", "train", "nanogpt", "compile", "vit")


def run_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("POSENC_")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.integration
@pytest.mark.slow
def test_every_part_runs_on_the_cpu_at_reduced_sizes(tmp_path: Path) -> None:
    out = tmp_path / "report"
    finished = run_script(str(out), "--device", "cpu", "--quick", "--threads", "1", timeout=400)
    assert finished.returncode == 0, f"stdout:\n{finished.stdout[-6000:]}\nstderr:\n{finished.stderr[-6000:]}"

    report = (out / "gpu_check.md").read_text(encoding="utf-8")
    assert report in finished.stdout  # the printed table is the file's
    assert "device: cpu: " in report
    assert f"torch {torch.__version__}" in report
    for part in PARTS:
        assert f"| {part} | ok |" in report, f"no ok row for {part}:\n{report}"
    assert "FAILED" not in report

    record = json.loads((out / "gpu_check.json").read_text(encoding="utf-8"))
    assert record["device"]["device"] == "cpu"
    parts = {part["name"]: part for part in record["parts"]}
    assert list(parts) == list(PARTS)
    assert all(part["status"] == "ok" for part in parts.values())

    tests = parts["tests"]["details"]["counts"]
    assert tests["skipped"] > 0
    assert tests["failed"] == tests["errors"] == 0

    jobs = parts["jobs"]["details"]
    train, benchmark = jobs["train_job"], jobs["benchmark_job"]
    assert (train["kind"], train["status"], train["result"]["device"]) == ("train", "succeeded", "cpu")
    assert (benchmark["kind"], benchmark["status"], benchmark["result"]["device"]) == ("benchmark", "succeeded", "cpu")
    assert {row["method"] for row in benchmark["result"]["table"]} == {"rope", "alibi", "transformer_xl"}
    assert jobs["cpu_reference"]["final_loss"] == pytest.approx(train["result"]["final_loss"], rel=0.05)

    nanogpt = parts["nanogpt"]["rows"]
    assert [row["name"].split(" vs ")[0] for row in nanogpt] == [
        f"job trainer {method}" for method in ("learned_absolute", "rope", "alibi", "t5", "fire", "xpos")
    ]
    assert all(row["ratio"] and "attention " in row["note"] for row in nanogpt)
    [cache] = parts["compile"]["rows"]
    assert cache["ok"], cache["note"]
    assert cache["measured"] < cache["baseline"]  # the second process loads what the first compiled

    flex = [row for row in parts["flex"]["rows"] if row["name"].startswith("flex fwd ") and row["ratio"]]
    assert flex, "FlexAttention's forward ran for no method"
    assert all("max abs diff out" in row["note"] for row in flex)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA: the script would run")
def test_without_cuda_it_refuses_at_once_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "report"
    began = time.monotonic()
    finished = run_script(str(out), timeout=60)
    elapsed = time.monotonic() - began
    assert finished.returncode == 2
    assert finished.stderr.strip().splitlines() == [
        "no CUDA device: torch.cuda.is_available() is False; run with --device cpu to exercise the script on the CPU"
    ]
    assert finished.stdout == ""
    assert not out.exists()
    assert elapsed < 10


def test_the_path_table_row_flags_a_path_faster_than_the_table_s_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flex part's verdict on ``posenc.pe.paths``, from its timings relative to the dense-mask path (a CUDA
    run's, which the CPU cannot make: no FlexAttention backward there)."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    from gpu_check_parts import path_table_row

    from posenc.pe import get_method

    alibi = get_method("alibi")
    holds = path_table_row(alibi, 1024, flex_s=3.9, materialised_s=1.6)  # the H100's ratios
    assert (holds.ratio, holds.baseline_name) == (1.0, "fastest: sdpa_mask")
    assert "table: sdpa_mask (holds)" in holds.note
    beaten = path_table_row(alibi, 1024, flex_s=0.5, materialised_s=1.6)
    assert beaten.ratio == pytest.approx(2.0)
    assert "CHANGE IT: flex is faster" in beaten.note
    shaw = path_table_row(get_method("shaw"), 1024, flex_s=2.0, materialised_s=1.05)
    assert "table: materialised (holds)" in shaw.note


@pytest.mark.integration
def test_the_study_part_runs_only_when_asked_and_reads_the_job_s_perplexities(tmp_path: Path) -> None:
    out = tmp_path / "report"
    finished = run_script(str(out), "--device", "cpu", "--quick", "--parts", "study", timeout=300)
    assert finished.returncode == 0, f"stdout:\n{finished.stdout[-6000:]}\nstderr:\n{finished.stderr[-6000:]}"
    record = json.loads((out / "gpu_check.json").read_text(encoding="utf-8"))
    [study] = record["parts"]
    names = [row["name"].split(" (")[0] for row in study["rows"]]
    assert names == [f"study {rule} at {n}x" for rule in ("rope_linear", "rope_ntk", "rope_yarn") for n in (1, 2, 4)]
    assert all(row["measured"] > 1 and row["baseline"] > 1 for row in study["rows"])  # perplexities, base beside
