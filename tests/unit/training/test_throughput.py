"""Model FLOPs per token and MFU: the count is nanoGPT's ``6 N + 12 L d T`` with the position encoding's own
parameters left out, the GPU peaks come from the table by device name (an unknown GPU has no MFU), the CPU's is
measured once and kept, and a training run's record carries both."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc.schemas.jobs import JobSpec
from posenc.tasks import family_of
from posenc.training import throughput
from posenc.training.families import trainer_for
from posenc.training.hooks import NoHooks
from posenc.training.jobs import run_job
from posenc.training.model import count_parameters
from posenc.training.throughput import cpu_peak, flops_per_token, gpu_peak, mfu
from posenc.training.train import build_model, train


def spec_of(method: str, steps: int = 20) -> JobSpec:
    return JobSpec.model_validate(
        {
            "methods": [{"method": method}],
            "data": {"task": "copy", "size": 6},
            "model": {"layers": 2, "dim": 32, "heads": 2},
            "train": {"steps": steps, "batch_size": 8},
            "device": "cpu",
        }
    )


def model_of(method: str) -> torch.nn.Module:
    spec = spec_of(method)
    trainer = trainer_for(family_of(spec))
    return build_model(trainer.model_config(spec.methods[0], len(trainer.prepare(None, None).vocab)), 0)


def test_flops_per_token_is_6n_plus_the_attention_term_without_the_position_encoding() -> None:
    plain, table = model_of("nope"), model_of("learned_absolute")
    assert count_parameters(table) > count_parameters(plain)  # the learned table
    assert flops_per_token(table, 2, 32, 10) == flops_per_token(plain, 2, 32, 10)  # not counted
    weights = count_parameters(plain)
    assert flops_per_token(plain, 2, 32, 10) == 6 * weights + 12 * 2 * 32 * 10
    assert flops_per_token(plain, 2, 32, 20) - flops_per_token(plain, 2, 32, 10) == 12 * 2 * 32 * 10


def test_gpu_peaks_come_from_the_table_by_name() -> None:
    assert gpu_peak("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989e12)
    assert gpu_peak("NVIDIA H100 PCIe", "bf16") == pytest.approx(756e12)
    assert gpu_peak("NVIDIA H200", "fp32") == pytest.approx(67e12)
    assert gpu_peak("NVIDIA A100-SXM4-80GB", "bf16") == pytest.approx(312e12)
    assert gpu_peak("Some Future GPU", "bf16") is None  # no guessed peak


def test_mfu_is_the_model_flops_rate_over_the_peak() -> None:
    assert mfu(1e6, 1e3, 1e10) == pytest.approx(0.1)
    assert mfu(1e6, None, 1e10) is None
    assert mfu(1e6, 1e3, None) is None


def test_the_cpu_peak_is_measured_once_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    measured = cpu_peak("fp32", 1)
    assert 1e8 < measured < 1e13  # a CPU core does more than 0.1 and less than 10,000 GFLOP/s
    [kept] = tmp_path.glob("posenc-cpu-peak-*-1-float32.json")
    monkeypatch.setattr(throughput, "measure_cpu_peak", lambda *_: pytest.fail("measured again"))
    assert cpu_peak("fp32", 1) == measured
    kept.unlink()
    monkeypatch.setattr(throughput, "measure_cpu_peak", lambda *_: 123.0)
    assert cpu_peak("fp32", 1) == 123.0  # without the file it measures


def test_a_run_records_its_flops_per_token_and_mfu(tmp_path: Path) -> None:
    spec = spec_of("rope")
    trainer = trainer_for(family_of(spec))
    data = trainer.prepare(None, None)
    outcome = train(trainer.model_config(spec.methods[0], len(data.vocab)), 0, spec.train, data.batches, threads=1)
    assert outcome.flops_per_token is not None
    assert outcome.flops_per_token > 6 * count_parameters(outcome.model)  # rope has no weights of its own: N is all
    assert outcome.mfu is not None
    assert 0 < outcome.mfu < 1
    result = run_job("train", spec, job_dir=tmp_path / "job", artifact_root=tmp_path, hooks=NoHooks())
    [run] = result["runs"]
    assert run["flops_per_token"] == outcome.flops_per_token  # the same model and data: the same count
    assert 0 < run["mfu"] < 1
