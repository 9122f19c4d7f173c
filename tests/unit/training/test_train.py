"""The training loop: deterministic, resumable bit-exactly from a checkpoint, cancellable within a step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc.schemas.jobs import JobSpec, TrainSpec
from posenc.tasks import TokenTask, family_of
from posenc.training.data import char_corpus, text_batch, token_batch
from posenc.training.evaluate import evaluate_tokens
from posenc.training.hooks import JobCancelled, Progress
from posenc.training.model import ModelConfig
from posenc.training.train import Batch, BatchSource, TrainOutcome, lr_factor, train

SPEC = TrainSpec(length=16, steps=12, batch_size=4, lr=3e-3, warmup_steps=3, checkpoint_every=4)


def tiny_setup(text_file: Path, method: str = "rope") -> tuple[ModelConfig, BatchSource]:
    corpus = char_corpus(text_file.read_text())
    config = ModelConfig(
        vocab_size=corpus.vocab_size, layers=1, dim=16, heads=2, method=method, train_length=SPEC.length
    )

    def batches(generator: torch.Generator) -> Batch:
        return Batch(*text_batch(corpus.train, SPEC.length, SPEC.batch_size, generator))

    return config, batches


def assert_same_run(first: TrainOutcome, second: TrainOutcome) -> None:
    assert first.losses == second.losses
    for (name, a), (_, b) in zip(first.model.state_dict().items(), second.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_lr_schedule_warms_up_then_decays_to_ten_percent() -> None:
    assert [lr_factor(s, 4, 20) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 4, 20) == pytest.approx(1.0)
    assert lr_factor(12, 4, 20) == pytest.approx(0.55)
    assert lr_factor(20, 4, 20) == pytest.approx(0.1)


def test_training_is_deterministic_and_learns(text_file: Path) -> None:
    config, batches = tiny_setup(text_file)
    first = train(config, 0, SPEC, batches)
    assert_same_run(first, train(config, 0, SPEC, batches))
    assert len(first.losses) == SPEC.steps
    assert first.losses[-1] < first.losses[0]
    assert first.losses != train(config, 1, SPEC, batches).losses


class RecordingHooks:
    """Records progress; cancels after ``cancel_after`` reports; ``crash_after`` simulates a kill."""

    def __init__(self, cancel_after: int | None = None, crash_after: int | None = None) -> None:
        self.reports: list[Progress] = []
        self.notes: list[str] = []
        self.cancel_after = cancel_after
        self.crash_after = crash_after
        self.cancel_checks = 0

    def progress(self, progress: Progress) -> None:
        self.reports.append(progress)
        if progress.step == self.crash_after:
            raise KeyboardInterrupt  # any exception but a cancellation: the worker died here

    def should_cancel(self) -> bool:
        self.cancel_checks += 1
        return self.cancel_after is not None and len(self.reports) >= self.cancel_after

    def note(self, message: str) -> None:
        self.notes.append(message)


@pytest.mark.parametrize("method", ["rope", "alibi"])
def test_resume_after_a_kill_ends_bit_identical_to_an_uninterrupted_run(
    text_file: Path, tmp_path: Path, method: str
) -> None:
    config, batches = tiny_setup(text_file, method)
    uninterrupted = train(config, 0, SPEC, batches, checkpoint_dir=tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        train(config, 0, SPEC, batches, checkpoint_dir=tmp_path / "b", hooks=RecordingHooks(crash_after=6))
    hooks = RecordingHooks()
    resumed = train(config, 0, SPEC, batches, checkpoint_dir=tmp_path / "b", hooks=hooks)
    assert resumed.steps_run == SPEC.steps - 4  # from the checkpoint at step 4, not from scratch
    assert [r.step for r in hooks.reports] == list(range(5, SPEC.steps + 1))
    assert_same_run(uninterrupted, resumed)
    finished = train(config, 0, SPEC, batches, checkpoint_dir=tmp_path / "b")  # final checkpoint: nothing to do
    assert finished.steps_run == 0
    assert_same_run(uninterrupted, finished)


def test_a_checkpoint_of_another_run_is_not_resumed(text_file: Path, tmp_path: Path) -> None:
    config, batches = tiny_setup(text_file)
    train(config, 0, SPEC, batches, checkpoint_dir=tmp_path)
    other_seed = train(config, 1, SPEC, batches, checkpoint_dir=tmp_path)
    assert other_seed.steps_run == SPEC.steps
    assert_same_run(other_seed, train(config, 1, SPEC, batches))


def test_cancellation_raises_within_one_step(text_file: Path) -> None:
    config, batches = tiny_setup(text_file)
    hooks = RecordingHooks(cancel_after=3)
    with pytest.raises(JobCancelled):
        train(config, 0, SPEC, batches, hooks=hooks)
    assert [r.step for r in hooks.reports] == [1, 2, 3]  # checked before every step
    assert hooks.cancel_checks == 4


def test_draws_from_torchs_global_generator_follow_the_run_seed(text_file: Path) -> None:
    """A run seeds torch's global generator from its seed: whatever draws without a generator of its own (as
    dropout would) gives the same run whatever the process drew before."""
    config, batches = tiny_setup(text_file)
    spec = SPEC.model_copy(update={"steps": 4})

    def noisy(generator: torch.Generator) -> Batch:
        batch = batches(generator)
        noise = torch.randint(0, config.vocab_size, batch.inputs.shape)  # (B, T) from the global generator
        return Batch((batch.inputs + noise) % config.vocab_size, batch.targets)

    torch.manual_seed(123)
    first = train(config, 0, spec, noisy)
    torch.manual_seed(456)
    assert_same_run(first, train(config, 0, spec, noisy))


COPY_SIZE = 8


def train_fox_on_copy(params: dict[str, object]) -> float:
    """In-distribution greedy exact match of a tiny FoX model (2 layers, d = 64, 4 heads) trained 800 steps on
    copy of up to 8 symbols (about 12 s on one CPU core)."""
    copy = family_of(
        JobSpec.model_validate({"methods": [{"method": "fox"}], "data": {"task": "copy", "size": COPY_SIZE}})
    )
    assert isinstance(copy, TokenTask)
    length = copy.tokens(COPY_SIZE)
    spec = TrainSpec(length=length, steps=800, batch_size=32, lr=3e-3, warmup_steps=80, checkpoint_every=800)
    config = ModelConfig(
        vocab_size=len(copy.vocab()), layers=2, dim=64, heads=4, method="fox", params=params, train_length=length
    )

    def batches(generator: torch.Generator) -> Batch:
        drawn = token_batch(copy.train_instances(spec.batch_size, generator))
        return Batch(drawn.inputs, drawn.targets, drawn.loss_mask)

    model = train(config, 0, spec, batches).model
    [cell] = evaluate_tokens(model, copy, COPY_SIZE)
    return float(cell["exact_match"])


def test_fox_fits_copy_with_its_training_default_and_not_with_the_authors_init() -> None:
    """The authors' b_f = 0 costs ln 2 of logit per token of distance on every head, and a tiny model does not
    fit copy in 800 steps (0.00 on seeds 0-7 measured); the decay-time init 4..64, posenc's training default,
    fits it (0.99-1.00 on the same seeds). One torch thread: on a busy machine a second one costs 10x."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train_fox_on_copy({}) >= 0.9
        assert train_fox_on_copy({"fgate_bias_init": False}) <= 0.2
    finally:
        torch.set_num_threads(threads)
