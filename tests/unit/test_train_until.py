"""``train.until``: a run stops at the first held-out check that reaches its threshold (``train.steps`` the cap),
a run killed between two checks resumes and stops at the same step with the same weights, and results record the
steps each run needed (None: it hit the cap)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.jobspec import job_cost, validate_spec
from posenc.schemas.jobs import JobCreate, JobKind, JobSpec
from posenc.tasks import family_of
from posenc.tasks.base import LEARNED_AT, TokenTask
from posenc.tasks.probes import BASE_LEARNED, CONTROL, PROBES
from posenc.training.families import PreparedData, Trainer, trainer_for
from posenc.training.hooks import NoHooks, Progress
from posenc.training.jobs import run_job
from posenc.training.train import CHECKPOINT_NAME, TrainOutcome, Until, train

EVERY = 10
CHECKPOINT_EVERY = 30  # not a multiple of EVERY's every check: a kill lands between a checkpoint and a check


def copy_spec(until: dict[str, Any] | None, *, steps: int = 600, **train: Any) -> JobSpec:
    """A copy_single run small enough to learn in a few seconds on a CPU (one layer, 32 wide)."""
    return JobSpec.model_validate(
        {
            "methods": [{"method": "rope"}],
            "data": {"task": "copy_single", "size": 4},
            "model": {"layers": 1, "dim": 32, "heads": 2},
            "train": {
                "steps": steps,
                "batch_size": 16,
                "lr": 3e-3,
                "warmup_steps": 10,
                "checkpoint_every": CHECKPOINT_EVERY,
                "until": until,
                **train,
            },
            "eval": {"samples": 32, "sizes": [4]},
            "device": "cpu",
        }
    )


UNTIL = {"every": EVERY, "samples": 32}  # the family's own rule: exact match >= LEARNED_AT


class Crash(Exception):
    """A worker killed mid-run."""


class CrashAfter(NoHooks):
    def __init__(self, step: int) -> None:
        self.step = step

    def progress(self, progress: Progress) -> None:
        if progress.step == self.step:
            raise Crash(f"killed after step {self.step}")


class Setup:
    """The torch half of a spec, ready to train one seed with ``train.until``."""

    def __init__(self, spec: JobSpec, seed: int = 0) -> None:
        self.spec, self.seed = spec, seed
        self.trainer: Trainer[Any] = trainer_for(family_of(spec))
        self.data: PreparedData = self.trainer.prepare(None, None)
        self.config = self.trainer.model_config(spec.methods[0], len(self.data.vocab))
        until = spec.train.until
        self.until: Until | None = None if until is None else self.trainer.until(until, self.data, seed, "cpu")

    def run(self, directory: Path | None, hooks: Any = None) -> TrainOutcome:
        return train(
            self.config,
            self.seed,
            self.spec.train,
            self.data.batches,
            checkpoint_dir=directory,
            hooks=hooks,
            until=self.until,
        )


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Setup, TrainOutcome]:
    """One uninterrupted run that learns before its cap."""
    setup = Setup(copy_spec(UNTIL))
    return setup, setup.run(tmp_path_factory.mktemp("uninterrupted"))


def test_a_run_stops_at_the_first_check_that_reaches_the_threshold(learned: Any) -> None:
    setup, outcome = learned
    needed = outcome.steps_needed
    assert needed is not None
    assert needed < setup.spec.train.steps, "the tiny run should learn before its cap"
    assert needed % EVERY == 0
    assert len(outcome.losses) == outcome.steps_run == needed
    assert [step for step, _ in outcome.checks] == list(range(EVERY, needed + 1, EVERY))
    values = [value for _, value in outcome.checks]
    assert values[-1] is not None
    assert values[-1] >= LEARNED_AT
    assert all(value is None or value < LEARNED_AT for value in values[:-1])
    # the held-out data is the same at every check: scoring the stopped model again gives the last check's value
    assert setup.until is not None
    assert setup.until.check(outcome.model) == (values[-1], True)
    assert not outcome.model.training  # handed back in eval mode, as any run


def test_the_checks_leave_the_training_untouched(learned: Any, tmp_path: Path) -> None:
    """The same run without until, stopped by hand at the step the until run stopped at, has the same weights: the
    checks draw nothing from the batch stream or torch's global generator, and the lr follows the cap either way."""
    outcome = learned[1]
    plain = Setup(copy_spec(None, checkpoint_every=outcome.steps_needed))
    with pytest.raises(Crash):
        plain.run(tmp_path, CrashAfter(outcome.steps_needed))
    state = torch.load(tmp_path / CHECKPOINT_NAME, weights_only=True)
    assert state["step"] == outcome.steps_needed
    assert_same_weights(state["model"], outcome.model.state_dict())


def test_a_run_killed_between_checks_stops_at_the_same_step_with_the_same_weights(learned: Any, tmp_path: Path) -> None:
    setup, outcome = learned
    needed = outcome.steps_needed
    kill = needed - EVERY // 2  # between its last two checks, past at least one checkpoint
    assert kill > CHECKPOINT_EVERY
    assert kill % CHECKPOINT_EVERY != 0
    with pytest.raises(Crash):
        setup.run(tmp_path, CrashAfter(kill))
    resumed = setup.run(tmp_path)
    assert resumed.steps_run == needed - kill // CHECKPOINT_EVERY * CHECKPOINT_EVERY  # from its last checkpoint
    assert resumed.steps_needed == needed
    assert resumed.checks == outcome.checks
    assert resumed.losses == outcome.losses
    assert_same_weights(resumed.model.state_dict(), outcome.model.state_dict())
    # restarted after the stop: the checkpoint says it stopped, nothing more is trained
    again = setup.run(tmp_path)
    assert (again.steps_run, again.steps_needed, again.checks) == (0, needed, outcome.checks)
    assert_same_weights(again.model.state_dict(), outcome.model.state_dict())


def test_an_unreachable_threshold_runs_to_the_cap() -> None:
    setup = Setup(copy_spec({"score": 1.0, "every": EVERY, "samples": 32}, steps=2 * EVERY))
    outcome = setup.run(None)
    assert outcome.steps_needed is None
    assert len(outcome.losses) == outcome.steps_run == 2 * EVERY
    checks = outcome.checks
    assert checks is not None
    assert [step for step, _ in checks] == [EVERY, 2 * EVERY]
    assert all(value is not None and value < 1.0 for _, value in checks)


def test_the_held_out_examples_are_the_runs_own_and_fixed() -> None:
    family = family_of(copy_spec(UNTIL))
    assert isinstance(family, TokenTask)
    size = family.train_size()

    def drawn(source: TokenTask) -> list[list[int]]:
        return [item.prompt for item in source.eval_instances(size, source.eval_generator(size))]

    held = family.held_out(32, 7)
    assert drawn(held) == drawn(family.held_out(32, 7))  # the same at every check
    assert len(drawn(held)) == 32
    assert drawn(held) != drawn(family.held_out(32, 8))  # another seed, other examples
    assert drawn(held)[:5] != drawn(family)[:5]  # not the evaluation's own examples


def test_records_say_the_steps_each_run_needed(learned: Any, tmp_path: Path) -> None:
    outcome = learned[1]
    spec = copy_spec(UNTIL)
    progress: list[Progress] = []

    class Recording(NoHooks):
        def progress(self, report: Progress) -> None:
            progress.append(report)

    result = run_job("train", spec, job_dir=tmp_path / "job", artifact_root=tmp_path, hooks=Recording())
    [run] = result["runs"]
    assert run["steps"] == spec.train.steps
    assert run["steps_needed"] == outcome.steps_needed
    assert run["until"] == {"score": None, "every": EVERY, "reached": True, "checks": outcome.checks}
    assert run["final_loss"] == outcome.losses[-1]
    # progress counts the cap: the job's last report is its total
    assert progress[-1].step == progress[-1].total == spec.train.steps

    plain = run_job("train", copy_spec(None, steps=4), job_dir=tmp_path / "plain", artifact_root=tmp_path,
                    hooks=NoHooks())  # fmt: skip
    assert not {"steps_needed", "until"} & set(plain["runs"][0])


def test_a_benchmark_records_and_tables_the_steps_needed(tmp_path: Path) -> None:
    spec = copy_spec({"score": 1.0, "every": 2, "samples": 8}, steps=4)
    result = run_job("benchmark", spec, job_dir=tmp_path / "job", artifact_root=tmp_path, hooks=NoHooks())
    [run] = result["runs"]
    assert (run["steps"], run["steps_needed"], run["until"]["reached"]) == (4, None, False)
    assert [step for step, _ in run["until"]["checks"]] == [2, 4]
    assert result["table"]
    assert all(row["steps_needed"] is None for row in result["table"])


def test_a_run_learned_when_it_reached_until_where_the_family_has_no_rule(tmp_path: Path) -> None:
    """Text has no rule of having learned (``learned`` None); with ``until`` the threshold is the rule: a run that
    reached it learned, one that hit the cap did not, whatever its final scores."""

    def text(score: float) -> JobSpec:
        return JobSpec.model_validate(
            {
                "methods": [{"method": "rope"}],
                "data": {"corpus": "stdlib"},
                "model": {"layers": 1, "dim": 32, "heads": 2},
                "train": {
                    "length": 16,
                    "steps": 4,
                    "batch_size": 4,
                    "until": {"score": score, "every": 2, "samples": 4},
                },
                "eval": {"lengths": [16], "max_tokens": 256},
                "device": "cpu",
            }
        )

    results = {
        score: run_job("benchmark", text(score), job_dir=tmp_path / str(score), artifact_root=tmp_path, hooks=NoHooks())
        for score in (1e9, 1.0)  # any perplexity is at most 1e9; none is at most 1
    }
    [easy], [hard] = results[1e9]["runs"], results[1.0]["runs"]
    assert (easy["steps_needed"], easy["learned"]) == (2, True)
    assert (hard["steps_needed"], hard["learned"]) == (None, False)
    assert results[1.0]["not_learned"] == ["rope seed 0"]
    assert family_of(text(1.0)).learned(hard["in_distribution"]) is None  # the family's rule alone says nothing


@pytest.mark.parametrize(
    ("spec", "loc"),
    [
        ({"data": {"corpus": "stdlib"}, "train": {"until": {}}}, ("train", "until", "score")),
        ({"data": {"corpus": "stdlib"}, "train": {"until": {"score": 0.5}}}, ("train", "until", "score")),
        ({"data": {"task": "copy_single"}, "train": {"until": {"score": 1.5}}}, ("train", "until", "score")),
        ({"data": {"task": "copy"}, "train": {"steps": 50, "until": {"every": 60}}}, ("train", "until", "every")),
        (
            {
                "data": {"corpus": "stdlib"},
                "train": {"until": {"score": 3.0}},
                "extension": {"base": {"method": "rope"}, "factor": 2},
            },
            ("train", "until"),
        ),
        (
            {"data": {"task": "copy_single"}, "train": {"until": {}}, "checkpoint": "0123456789abcdef0123456789abcdef"},
            ("train", "until"),
        ),
    ],
)
def test_until_is_refused_where_it_cannot_be_honoured(spec: dict[str, Any], loc: tuple[str, ...]) -> None:
    kind: JobKind = "benchmark" if "extension" in spec else "extrapolate" if "checkpoint" in spec else "train"
    methods = [{"method": "rope_linear"}] if "extension" in spec else [{"method": "rope"}]
    with pytest.raises(InvalidInput) as refused:
        validate_spec(kind, JobSpec.model_validate({"methods": methods, **spec}))
    assert refused.value.loc == ("body", "spec", *loc)


def test_text_with_a_perplexity_threshold_is_accepted_and_its_checks_are_costed() -> None:
    spec = {"methods": [{"method": "rope"}], "data": {"corpus": "stdlib"}, "train": {"steps": 100}}
    validate_spec("train", JobSpec.model_validate({**spec, "train": {"steps": 100, "until": {"score": 3.0}}}))
    base = job_cost(JobCreate(kind="train", spec=JobSpec.model_validate(spec)))
    checked = {**spec, "train": {"steps": 100, "until": {"score": 3.0, "every": 10, "samples": 50}}}
    more = job_cost(JobCreate(kind="train", spec=JobSpec.model_validate(checked)))
    assert more > base


def assert_same_weights(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    assert left.keys() == right.keys()
    for key in left:
        assert torch.equal(left[key], right[key]), key


def test_the_probes_rule_needs_every_probe_the_control_included() -> None:
    family = family_of(JobSpec.model_validate({"methods": [{"method": "rope"}], "data": {"task": "probes"}}))
    other = next(name for name in PROBES if name != CONTROL)

    def cells(control: float) -> list[dict[str, Any]]:  # two depths each
        return [
            {"size": 128, "probe": probe, "depth": depth, "score": value}
            for probe, value in ((other, 1.0), (CONTROL, control))
            for depth in (0.0, 1.0)
        ]

    assert family.until_reached(cells(BASE_LEARNED / 2), None) == (BASE_LEARNED / 2, False)
    assert family.until_reached(cells(BASE_LEARNED), None) == (BASE_LEARNED, True)
    # a score is a threshold on the headline, the mean over probes and depths
    assert family.until_reached(cells(0.5), 0.75) == (0.75, True)
    assert family.until_reached(cells(0.5), 0.8) == (0.75, False)
