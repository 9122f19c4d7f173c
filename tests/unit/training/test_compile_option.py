"""``train.compile``'s meaning per device, and what it leaves out of a run's identity (the training with a real
compile, its cache shared by two workers and its fallback are in tests/integration/test_jobs_compile.py)."""

from __future__ import annotations

import pytest
import torch

from posenc.schemas.jobs import TrainSpec
from posenc.training.model import ModelConfig
from posenc.training.train import Batch, _fingerprint, resolve_compile, train


@pytest.mark.parametrize(
    ("option", "device", "compiled"),
    [("auto", "cpu", False), ("auto", "cuda", True), ("on", "cpu", True), ("off", "cuda", False)],
)
def test_auto_compiles_on_cuda_only(option: str, device: str, compiled: bool) -> None:
    assert resolve_compile(option, torch.device(device)) is compiled


def test_an_unknown_option_is_refused() -> None:
    with pytest.raises(ValueError, match="compile"):
        resolve_compile("max-autotune", torch.device("cpu"))


def test_compiled_or_eager_is_the_same_run_to_a_checkpoint() -> None:
    config = ModelConfig(vocab_size=16, layers=1, dim=16, heads=2, method="rope")
    prints = {_fingerprint(config, 0, TrainSpec(compile=option), "fp32") == _fingerprint(config, 0, TrainSpec(), "fp32")
              for option in ("on", "off", "auto")}  # fmt: skip
    assert prints == {True}


def test_an_eager_run_says_it_ran_eager() -> None:
    config = ModelConfig(vocab_size=16, layers=1, dim=16, heads=2, method="rope")

    def batches(generator: torch.Generator) -> Batch:
        ids = torch.randint(0, 16, (2, 9), generator=generator)  # (B, T + 1)
        return Batch(inputs=ids[:, :-1], targets=ids[:, 1:])

    outcome = train(config, 0, TrainSpec(steps=3, warmup_steps=1), batches)
    assert outcome.compile is not None
    assert outcome.compile.to_json() == {
        "requested": "auto",
        "compiled": False,
        "error": None,
        "first_step_s": None,
        "cache_hits": 0,
        "cache_misses": 0,
    }
