"""The ``posenc-client`` command against live gateways: tables, --json, files, exit codes, stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy

pytestmark = pytest.mark.integration
CLI = str(Path(sys.executable).with_name("posenc-client"))


def run_cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "--base-url", url, "--max-retries", "0", *args], capture_output=True, text=True, timeout=300
    )


def test_methods_table_and_json(compute_gateway: Any) -> None:
    table = run_cli("methods", "--kind", "bias", url=compute_gateway.url)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "KIND", "FAMILY"]
    assert "NOTES" in header.split()  # per-layer, needs-x, causal-only, 2d/3d
    assert any(row.split()[:2] == ["alibi", "bias"] for row in rows)

    listed = run_cli("methods", "--json", url=compute_gateway.url)
    assert listed.returncode == 0, listed.stderr
    names = {item["name"] for item in json.loads(listed.stdout)}
    assert {"alibi", "rope", "sinusoidal"} <= names


def test_bias_to_files(compute_gateway: Any, tmp_path: Path) -> None:
    npy = run_cli(
        "bias", "alibi", "--heads", "4", "--length", "8", "--key-length", "10", "--bidirectional",
        "-o", str(tmp_path / "b.npy"), url=compute_gateway.url,
    )  # fmt: skip
    assert npy.returncode == 0, npy.stderr
    assert "wrote" in npy.stderr
    assert np.load(tmp_path / "b.npy").shape == (4, 8, 10)

    st = run_cli(
        "bias", "alibi", "--heads", "2", "--length", "6", "--form", "toeplitz", "--params", '{"max_bias": 4}',
        "-o", str(tmp_path / "b.safetensors"), url=compute_gateway.url,
    )  # fmt: skip
    assert st.returncode == 0, st.stderr
    assert safetensors.numpy.load_file(tmp_path / "b.safetensors")["bias"].shape == (2, 11)


def test_errors_exit_non_zero_with_the_problem_on_stderr(compute_gateway: Any, tmp_path: Path) -> None:
    target = str(tmp_path / "x.npy")
    missing = run_cli("bias", "no_such_method", "--heads", "1", "--length", "2", "-o", target, url=compute_gateway.url)
    assert missing.returncode == 1
    assert "404" in missing.stderr
    assert "no_such_method" in missing.stderr
    assert not (tmp_path / "x.npy").exists()

    invalid = run_cli("bias", "alibi", "--heads", "0", "--length", "2", "-o", str(tmp_path / "x.npy"),
                      url=compute_gateway.url)  # fmt: skip
    assert invalid.returncode == 1
    assert "num_heads" in invalid.stderr

    wrong_suffix = run_cli("bias", "alibi", "--heads", "1", "--length", "2", "-o", str(tmp_path / "x.txt"),
                           url=compute_gateway.url)  # fmt: skip
    assert wrong_suffix.returncode == 2

    unreachable = run_cli("methods", url="http://127.0.0.1:9")
    assert unreachable.returncode == 3
    assert "could not reach" in unreachable.stderr


def test_jobs_commands(job_stack: str, corpus: Path, tmp_path: Path) -> None:
    spec = {
        "methods": [{"method": "rope"}, {"method": "alibi"}],
        "data": {"corpus": str(corpus)},
        "model": {"layers": 1, "dim": 32, "heads": 2},
        "train": {"length": 16, "steps": 10, "batch_size": 4, "warmup_steps": 1},
        "eval": {"lengths": [16, 32], "max_tokens": 128},
        "device": "cpu",
    }
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))

    submitted = run_cli("jobs", "submit", str(spec_file), "--kind", "benchmark", "--wait", "--json",
                        "--no-progress", "--timeout", "300", url=job_stack)  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert job["status"] == "succeeded"

    shown = run_cli("jobs", "get", job["id"], url=job_stack)
    assert shown.returncode == 0, shown.stderr
    assert "succeeded" in shown.stdout
    assert "METRIC" in shown.stdout  # the result table

    listing = run_cli("jobs", "list", "--kind", "benchmark", url=job_stack)
    assert job["id"] in listing.stdout

    waited = run_cli("jobs", "wait", job["id"], "--json", url=job_stack)
    assert json.loads(waited.stdout)["id"] == job["id"]

    artifact = run_cli("jobs", "artifact", job["id"], "table.csv", "-o", str(tmp_path / "t.csv"), url=job_stack)
    assert artifact.returncode == 0, artifact.stderr
    assert (tmp_path / "t.csv").read_text().startswith("method")

    unknown = run_cli("jobs", "cancel", "no-such-job", url=job_stack)
    assert unknown.returncode == 1
    assert "404" in unknown.stderr

    too_short = corpus.parent / "too-short.txt"  # accepted at submission, fails on the worker
    too_short.write_text("abc", encoding="utf-8")
    failing = dict(spec, data={"corpus": str(too_short)})
    spec_file.write_text(json.dumps(failing))
    failed = run_cli("jobs", "submit", str(spec_file), "--kind", "benchmark", "--wait", "--no-progress",
                     url=job_stack)  # fmt: skip
    assert failed.returncode == 4
    assert "failed" in failed.stderr
