"""A run whose loss diverges is a result, not a crash: its record spells the non-finite losses as JSON does
for tensors ("nan"), the job writes its result, the run is not learned and the leaderboard's diagnosis says
``diverged``. KERPLE's learned r1, r2 stay in the reference's ranges through training, so a large step no longer
takes the log kernel to NaN."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import posenc.training.jobs as jobs
from posenc.files import read_json, spell_non_finite
from posenc.schemas.jobs import JobSpec
from posenc.tasks import family_of
from posenc.training.families import trainer_for
from posenc.training.hooks import NoHooks
from posenc.training.leaderboard import diagnose_run
from posenc.training.model import PositionalEncoding
from posenc.training.train import TrainOutcome, train


def spec_of(method: str, lr: float = 3e-3, steps: int = 20) -> JobSpec:
    return JobSpec.model_validate(
        {
            "methods": [{"method": method}],
            "data": {"task": "copy_single", "size": 4},
            "model": {"layers": 1, "dim": 32, "heads": 2},
            "train": {"steps": steps, "batch_size": 8, "lr": lr, "warmup_steps": 0, "until": {"every": 10}},
            "eval": {"sizes": [4, 8], "samples": 8},
            "device": "cpu",
        }
    )


def test_non_finite_numbers_are_spelled_everywhere_in_a_record() -> None:
    record = {"a": math.nan, "b": [1.0, math.inf, (-math.inf, 2)], "c": {"d": 0.5}, "e": "x"}
    assert spell_non_finite(record) == {"a": "nan", "b": [1.0, "inf", ["-inf", 2]], "c": {"d": 0.5}, "e": "x"}


def test_a_diverged_run_is_recorded_and_diagnosed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss of the last steps made NaN after the real training (a fault injected where the optimizer would
    have produced it): the benchmark still writes its result."""

    def diverging(*args: Any, **kwargs: Any) -> TrainOutcome:
        outcome = train(*args, **kwargs)
        return dataclasses.replace(outcome, losses=[*outcome.losses[:-5], *[math.nan] * 5])

    monkeypatch.setattr(jobs, "train", diverging)
    result = jobs.run_job("benchmark", spec_of("rope"), job_dir=tmp_path / "job", artifact_root=tmp_path,
                          hooks=NoHooks())  # fmt: skip
    [run] = result["runs"]
    assert run["final_loss"] == "nan"
    assert run["loss_curve"][-1][1] == "nan"
    assert read_json(tmp_path / "job" / "result.json")["runs"][0]["final_loss"] == "nan"
    assert diagnose_run(run, True) == "diverged"


@pytest.mark.parametrize("method", ["kerple_log", "kerple_power"])
def test_kerple_parameters_stay_in_the_reference_ranges_through_training(method: str) -> None:
    spec = spec_of(method, lr=1.0, steps=30)  # the largest learning rate a job takes
    trainer = trainer_for(family_of(spec))
    data = trainer.prepare(None, None)
    outcome = train(trainer.model_config(spec.methods[0], len(data.vocab)), 0, spec.train, data.batches)
    assert all(math.isfinite(loss) for loss in outcome.losses)
    [pe] = [module for module in outcome.model.modules() if isinstance(module, PositionalEncoding)]
    r1, r2 = pe.learned["r1"].detach(), pe.learned["r2"].detach()
    assert float(r1.min()) >= 0.01 - 1e-7
    assert float(r2.min()) >= 0.01 - 1e-7
    if method == "kerple_power":
        assert float(r2.max()) <= 2.0
    assert bool(torch.any(r1 != pe.learned["r1"].new_tensor(0.01)))  # trained, not pinned everywhere
