"""``train.precision``: bf16 autocast trains within a stated tolerance of float32 on the CPU (and is really in
bf16: the curves are not identical), ``auto`` is float32 on the CPU and bit-identical to ``fp32``, a checkpoint of
one precision never resumes a run of the other, every task family trains in bf16, and results record the
precision a run resolved to. The losses read from the device in batches are every step's."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.schemas.jobs import JobSpec
from posenc.tasks import family_of
from posenc.training.families import trainer_for
from posenc.training.hooks import NoHooks, Progress
from posenc.training.jobs import run_job
from posenc.training.train import LOSS_READ_EVERY, TrainOutcome, resolve_precision, train

STEPS = 200
# Measured on the CPU (torch 2.13, 200 steps of copy_single, 1 layer, d = 32) for rope, alibi, learned_absolute,
# t5, fire and xpos: the mean of the last 20 losses within 0.8 % of float32's, the mean absolute difference
# per step at most 0.0009 nats. The bounds are several times that.
FINAL_RELATIVE = 0.03
MEAN_ABSOLUTE = 0.005


def spec_of(method: str, precision: str, steps: int = STEPS, **data: Any) -> JobSpec:
    """A tiny run of ``method`` (copy_single unless ``data`` says otherwise)."""
    return JobSpec.model_validate(
        {
            "methods": [{"method": method}],
            "data": data or {"task": "copy_single", "size": 4},
            "model": {"layers": 1, "dim": 32, "heads": 2},
            "train": {
                "steps": steps,
                "batch_size": 16,
                "lr": 3e-3,
                "warmup_steps": 10,
                "checkpoint_every": 25,
                "precision": precision,
            },
            "device": "cpu",
        }
    )


def run(spec: JobSpec, directory: Path | None = None, hooks: Any = None) -> TrainOutcome:
    trainer = trainer_for(family_of(spec))
    data = trainer.prepare(None, None)
    config = trainer.model_config(spec.methods[0], len(data.vocab))
    return train(config, 0, spec.train, data.batches, checkpoint_dir=directory, hooks=hooks, threads=1)


@pytest.mark.parametrize("method", ["rope", "alibi"])
def test_bf16_trains_within_the_tolerance_of_fp32(method: str) -> None:
    full, half = run(spec_of(method, "fp32")), run(spec_of(method, "bf16"))
    assert (full.precision, half.precision) == ("fp32", "bf16")
    assert half.losses != full.losses  # autocast was on: the curves differ
    tail = statistics.fmean(full.losses[-20:]), statistics.fmean(half.losses[-20:])
    assert abs(tail[1] - tail[0]) <= FINAL_RELATIVE * tail[0], tail
    assert statistics.fmean(abs(a - b) for a, b in zip(full.losses, half.losses, strict=True)) <= MEAN_ABSOLUTE
    assert full.losses[-1] < full.losses[0] / 3  # it learned: the comparison is between trained runs


def test_auto_is_float32_on_the_cpu() -> None:
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert resolve_precision("auto", torch.device("cuda")) == "bf16"
    assert resolve_precision("bf16", torch.device("cpu")) == "bf16"
    auto, full = run(spec_of("rope", "auto", steps=40)), run(spec_of("rope", "fp32", steps=40))
    assert auto.precision == "fp32"
    assert auto.losses == full.losses


def test_the_losses_read_in_batches_are_every_steps_and_progress_gets_the_last_read() -> None:
    steps = LOSS_READ_EVERY * 2 + 5  # not a multiple of the read interval
    reported: list[Progress] = []

    class Recording(NoHooks):
        def progress(self, progress: Progress) -> None:
            reported.append(progress)

    outcome = run(spec_of("rope", "fp32", steps=steps), hooks=Recording())
    assert len(outcome.losses) == steps
    assert [p.step for p in reported] == list(range(1, steps + 1))
    # each report carries the newest loss read by then (every LOSS_READ_EVERY steps; no checkpoints here)
    for progress in reported:
        newest = progress.step - progress.step % LOSS_READ_EVERY
        assert progress.loss == (outcome.losses[newest - 1] if newest else None)


def test_a_checkpoint_of_one_precision_never_resumes_the_other(tmp_path: Path) -> None:
    run(spec_of("rope", "bf16", steps=30), tmp_path)
    resumed = run(spec_of("rope", "bf16", steps=30), tmp_path)
    assert resumed.steps_run == 0  # the same run: already done
    other = run(spec_of("rope", "fp32", steps=30), tmp_path)
    assert other.steps_run == 30  # started over
    assert other.losses == run(spec_of("rope", "fp32", steps=30)).losses


@pytest.mark.parametrize(
    ("method", "data"),
    [
        ("rope", {"corpus": "stdlib"}),
        ("rope", {"task": "probes", "probes": ["passkey"]}),
        ("rope_mixed", {"task": "shapes"}),
        ("graphormer", {"task": "graph_distance", "num_nodes": 6, "max_distance": 3}),
    ],
    ids=["text", "probes", "images", "graphs"],
)
def test_every_family_trains_in_bf16(method: str, data: dict[str, Any]) -> None:
    spec = spec_of(method, "bf16", steps=2, **data)
    if "corpus" in data or "probes" in data:
        spec = spec.model_copy(update={"train": spec.train.model_copy(update={"length": 48, "batch_size": 2})})
    outcome = run(spec)
    assert outcome.precision == "bf16"
    assert all(torch.isfinite(torch.tensor(outcome.losses)))


def test_results_record_the_precision(tmp_path: Path) -> None:
    for precision, resolved in (("auto", "fp32"), ("bf16", "bf16")):
        result = run_job(
            "train", spec_of("rope", precision, steps=5), job_dir=tmp_path / precision, artifact_root=tmp_path,
            hooks=NoHooks(),
        )  # fmt: skip
        assert result["runs"][0]["precision"] == resolved
