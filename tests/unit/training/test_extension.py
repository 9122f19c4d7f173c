"""Context-extension studies: one base model per seed, trained once and reused by every arm;
each rule applied to its weights at evaluation only or after a fine-tune; the rules' params filled from the
study; what a study cannot run refused naming the field; its cost counts the base once per seed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.extension import arm_ref, arms, finetune_spec
from posenc.jobspec import job_cost, validate_spec
from posenc.schemas.jobs import JobCreate, JobSpec
from posenc.training.fanout import plan, run_child
from posenc.training.files import read_json
from posenc.training.jobs import assemble_benchmark, run_job, units
from posenc.training.model import ModelConfig
from posenc.training.train import build_model, train
from tests.unit.training.conftest import RecordingHooks

TRAIN_LENGTH = 48


def study(methods: list[dict[str, Any]], *, seeds: tuple[int, ...] = (0,), **extension: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "methods": methods,
            "extension": extension,
            "data": {"task": "probes", "probes": ["passkey"]},
            "model": {"layers": 1, "dim": 32, "heads": 2},
            "train": {"length": TRAIN_LENGTH, "steps": 12, "batch_size": 4, "checkpoint_every": 6},
            "eval": {"lengths": [32, 48, 96], "samples": 3},
            "seeds": list(seeds),
        }
    )


def cells_by_size(record: dict[str, Any]) -> dict[tuple[Any, ...], float]:
    return {(cell["size"], cell.get("probe"), cell.get("depth")): cell["score"] for cell in record["cells"]}


# ---------------------------------------------------------------------------------------------- the arms
def test_arms_are_the_base_then_each_rule_then_their_fine_tuned_copies() -> None:
    spec = study([{"method": "rope_linear"}, {"method": "rope_yarn", "label": "yarn"}], finetune_steps=5)
    assert [(arm.label, arm.ref.method, arm.finetune) for arm in arms(spec)] == [
        ("base", "rope", False),
        ("rope_linear", "rope_linear", False),
        ("yarn", "rope_yarn", False),
        ("base+ft", "rope", True),
        ("rope_linear+ft", "rope_linear", True),
        ("yarn+ft", "rope_yarn", True),
    ]
    no_tune = study([{"method": "rope_linear"}])
    assert [arm.label for arm in arms(no_tune)] == ["base", "rope_linear"]
    assert [unit.label for unit in units(study([{"method": "rope_ntk"}], seeds=(3, 4)))] == [
        "base", "base", "rope_ntk", "rope_ntk"
    ]  # fmt: skip


def test_a_rule_gets_the_study_s_values_for_the_params_it_leaves_out_and_keeps_its_own() -> None:
    spec = study([{"method": "rope_yarn"}], factor=4, base={"method": "rope", "params": {"base": 500.0}})
    filled = arm_ref(spec, spec.methods[0]).params
    assert filled == {"base": 500.0, "factor": 4.0, "original_max_position_embeddings": TRAIN_LENGTH}
    own = study([{"method": "rope_llama3", "params": {"factor": 3.0, "base": 20000.0}}])
    assert arm_ref(own, own.methods[0]).params == {
        "factor": 3.0,
        "base": 20000.0,
        "original_max_position_embeddings": TRAIN_LENGTH,
    }
    # the base model's θ by default is rope's own default, not the rule's (Llama 3's is 500,000)
    assert arm_ref(study([{"method": "rope_llama3"}]), study([{"method": "rope_llama3"}]).methods[0]).params[
        "base"
    ] == pytest.approx(10000.0)
    # a rule without a factor (NTK-by-parts has one; plain rope as ABF has none) gets only what it takes
    abf = study([{"method": "rope", "params": {"base": 40000.0}, "label": "abf"}])
    assert arm_ref(abf, abf.methods[0]).params == {"base": 40000.0}


def test_the_fine_tune_trains_at_factor_times_the_length_by_default() -> None:
    spec = study([{"method": "rope_linear"}], factor=2, finetune_steps=30)
    tuned = finetune_spec(spec)
    assert (tuned.length, tuned.steps, tuned.warmup_steps, tuned.lr) == (96, 30, 3, spec.train.lr)
    given = finetune_spec(study([{"method": "rope_linear"}], finetune_steps=8, finetune_length=64, finetune_lr=1e-4))
    assert (given.length, given.steps, given.lr) == (64, 8, 1e-4)


# ---------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("methods", "extension", "loc"),
    [
        ([{"method": "alibi"}], {}, ("methods", 0, "method")),
        ([{"method": "rope", "pattern": "smollm3"}], {}, ("methods", 0, "pattern")),
        ([{"method": "rope_linear"}, {"method": "rope_linear"}], {}, ("methods", 1, "label")),
        ([{"method": "rope_linear", "label": "base"}], {}, ("methods", 0, "label")),
        ([{"method": "rope_linear"}], {"base": {"method": "nope"}}, ("extension", "base", "method")),
        (
            [{"method": "rope_linear"}],
            {"base": {"method": "rope", "pattern": "llama4"}},
            ("extension", "base", "pattern"),
        ),
    ],
)
def test_what_a_study_cannot_run_is_refused_naming_the_field(
    methods: list[dict[str, Any]], extension: dict[str, Any], loc: tuple[Any, ...]
) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_spec("benchmark", study(methods, **extension))
    assert caught.value.loc == ("body", "spec", *loc)


def test_a_study_is_a_benchmark_on_lengths_in_tokens() -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_spec("extrapolate", study([{"method": "rope_linear"}]))
    assert caught.value.loc == ("body", "spec", "extension")
    copy = JobSpec.model_validate(
        {"methods": [{"method": "rope_linear"}], "extension": {}, "data": {"task": "copy", "size": 4},
         "train": {"steps": 2}, "eval": {"samples": 2}}
    )  # fmt: skip
    with pytest.raises(InvalidInput) as caught:
        validate_spec("benchmark", copy)
    assert caught.value.loc == ("body", "spec", "extension")
    assert "tokens" in caught.value.msg


def test_the_cost_counts_the_base_once_per_seed_and_each_fine_tune() -> None:
    def cost(**extension: Any) -> int:
        return job_cost(JobCreate(kind="benchmark", spec=study([{"method": "rope_linear"}], **extension)))

    plain = JobSpec.model_validate(study([{"method": "rope_linear"}]).model_dump() | {"extension": None})
    one_run = job_cost(JobCreate(kind="benchmark", spec=plain))  # one training and one evaluation
    evaluation_only = cost()
    training = one_run - (evaluation_only - one_run)  # two arms evaluated: the second evaluation is the difference
    assert evaluation_only > one_run
    assert training > 0
    tuned = cost(finetune_steps=12)
    # + 2 fine-tuned arms (base+ft, rule+ft) each evaluated, and their fine-tunes at twice the length
    evaluation = evaluation_only - one_run
    assert tuned - evaluation_only - 2 * evaluation > 2 * training


# ---------------------------------------------------------------------------------------------- runs
@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobSpec, dict[str, Any], RecordingHooks, Path]:
    spec = study(
        [
            {"method": "rope_linear", "params": {"factor": 1.0}, "label": "linear1"},
            {"method": "rope_dynamic_ntk"},
            {"method": "rope_linear"},
        ],
        seeds=(0, 1),
        finetune_steps=4,
    )
    job_dir = tmp_path_factory.mktemp("study")
    hooks = RecordingHooks()
    result = run_job("benchmark", spec, job_dir=job_dir, artifact_root=job_dir, hooks=hooks)
    return spec, result, hooks, job_dir


def test_the_base_model_of_each_seed_is_trained_once_and_every_other_arm_reuses_it(
    finished: tuple[JobSpec, dict[str, Any], RecordingHooks, Path],
) -> None:
    spec, result, hooks, _ = finished
    trained = [note for note in hooks.notes if ": trained by run" in note]
    reused = [note for note in hooks.notes if ": reused by run" in note]
    assert trained == [
        "base model seed 0: trained by run 'base seed 0' (12 steps, " + trained[0].split("(12 steps, ")[1],
        "base model seed 1: trained by run 'base seed 1' (12 steps, " + trained[1].split("(12 steps, ")[1],
    ]
    assert len(reused) == len(units(spec)) - 2
    assert result["study"]["base_trained"] == {"0": 1, "1": 1}
    assert [base["trained_by"] for base in result["study"]["base_models"]] == ["base seed 0", "base seed 1"]


def test_a_rule_that_changes_nothing_scores_exactly_as_the_base_model(
    finished: tuple[JobSpec, dict[str, Any], RecordingHooks, Path],
) -> None:
    _, result, _, job_dir = finished
    records = {(r["label"], r["seed"]): r for r in _records(job_dir)}
    for seed in (0, 1):
        base = cells_by_size(records[("base", seed)])
        # PI at factor 1 is RoPE; dynamic NTK changes nothing up to its original length (48 here)
        assert cells_by_size(records[("linear1", seed)]) == base
        dynamic = cells_by_size(records[("rope_dynamic_ntk", seed)])
        assert {key: value for key, value in dynamic.items() if key[0] <= TRAIN_LENGTH} == {
            key: value for key, value in base.items() if key[0] <= TRAIN_LENGTH
        }
    assert {row["method"] for row in result["table"]} == {
        "base", "linear1", "rope_dynamic_ntk", "rope_linear", "base+ft", "linear1+ft", "rope_dynamic_ntk+ft",
        "rope_linear+ft",
    }  # fmt: skip


def test_an_evaluation_only_arm_is_the_base_model_s_weights_with_the_rule_s_rotation(
    finished: tuple[JobSpec, dict[str, Any], RecordingHooks, Path],
) -> None:
    spec, _, _, job_dir = finished
    state = torch.load(job_dir / "checkpoints" / "base-seed0" / "train_state.pt", weights_only=True)["model"]
    config = ModelConfig(vocab_size=state["token_embedding.weight"].shape[0], layers=1, dim=32, heads=2, method="rope")
    base = build_model(config, seed=0)
    base.load_state_dict(state)
    rule = build_model(
        ModelConfig(**{**config.to_json(), "method": "rope_linear", "params": arm_ref(spec, spec.methods[2]).params}),
        seed=5,
    )
    rule.load_state_dict(state)  # the same weights, keys for keys: a rotation has no weights of its own
    ids = torch.randint(0, config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert not torch.allclose(base(ids), rule(ids))
        same = build_model(ModelConfig(**{**config.to_json(), "method": "rope_linear", "params": {"factor": 1.0}}))
        same.load_state_dict(state)
        torch.testing.assert_close(base(ids), same(ids), rtol=0, atol=0)


def test_a_fine_tuned_arm_starts_from_the_base_model_and_trains_at_the_longer_length(
    finished: tuple[JobSpec, dict[str, Any], RecordingHooks, Path],
) -> None:
    _, result, _, job_dir = finished
    records = {(r["label"], r["seed"]): r for r in _records(job_dir)}
    tuned = records[("rope_linear+ft", 0)]
    assert tuned["arm"]["finetune"]["steps"] == 4
    assert tuned["arm"]["finetune"]["length"] == 2 * TRAIN_LENGTH
    assert tuned["base"]["trained_by"] == "base seed 0"
    assert not tuned["base"]["trained_here"]
    assert result["study"]["finetune"] == {"steps": 4, "length": 96, "lr": 2e-3, "warmup_steps": 0}
    assert math.isfinite(tuned["final_loss"])
    assert tuned["learned"] == records[("base", 0)]["learned"]


def test_train_from_given_weights_starts_there_not_at_the_seed_s_draw() -> None:
    spec = study([{"method": "rope_linear"}]).train.model_copy(update={"steps": 1, "lr": 1e-12, "warmup_steps": 0})
    config = ModelConfig(vocab_size=10, layers=1, dim=16, heads=2, method="rope")
    start = build_model(config, seed=9).state_dict()

    def batches(generator: torch.Generator) -> Any:
        from posenc.training.train import Batch

        ids = torch.randint(0, 10, (2, 9), generator=generator)
        return Batch(ids[:, :-1], ids[:, 1:])

    from_weights = train(config, 0, spec, batches, initial_state=start).model.state_dict()
    from_seed = train(config, 0, spec, batches).model.state_dict()
    for name, tensor in start.items():
        torch.testing.assert_close(from_weights[name], tensor, rtol=0, atol=1e-9)
    assert any(not torch.equal(from_seed[name], tensor) for name, tensor in start.items())


def test_a_study_that_fans_out_gives_the_same_table_with_the_base_still_trained_once(tmp_path: Path) -> None:
    spec = study([{"method": "rope_ntk"}, {"method": "rope_yarn"}], finetune_steps=2)
    runs = plan(spec)
    assert [(run["method"], run["total"]) for run in runs] == [
        ("base", 12 + 3), ("rope_ntk", 12 + 3), ("rope_yarn", 12 + 3), ("base+ft", 12 + 2 + 3),
        ("rope_ntk+ft", 12 + 2 + 3), ("rope_yarn+ft", 12 + 2 + 3),
    ]  # fmt: skip
    hooks = RecordingHooks()
    records = [
        run_child(spec, run["index"], run["seed"], job_dir=tmp_path / "fanned", hooks=hooks) for run in reversed(runs)
    ]
    assert [note for note in hooks.notes if ": trained by" in note] == [  # the first to run trains it
        "base model seed 0: trained by run 'rope_yarn+ft seed 0' (12 steps, " + hooks.notes[0].split("(12 steps, ")[1]
    ]
    assert sum("reused" in note for note in hooks.notes) == len(runs) - 1
    together = run_job("benchmark", spec, job_dir=tmp_path / "one", artifact_root=tmp_path, hooks=RecordingHooks())
    fanned = assemble_benchmark(spec, list(reversed(records)), tmp_path / "fanned")
    assert fanned["table"] == together["table"]


def _records(job_dir: Path) -> list[dict[str, Any]]:
    return [read_json(path) for path in sorted((job_dir / "checkpoints").glob("*/result.json"))]


def test_dynamic_ntk_on_the_base_weights_changes_the_logits_only_past_the_original_length() -> None:
    config = ModelConfig(vocab_size=10, layers=1, dim=32, heads=2, method="rope")
    base = build_model(config, seed=0)
    params = {"factor": 2.0, "original_max_position_embeddings": TRAIN_LENGTH}
    dynamic = build_model(ModelConfig(**{**config.to_json(), "method": "rope_dynamic_ntk", "params": params}))
    dynamic.load_state_dict(base.state_dict())
    for length, changed in ((TRAIN_LENGTH // 2, False), (TRAIN_LENGTH, False), (TRAIN_LENGTH + 1, True), (96, True)):
        ids = torch.randint(0, 10, (1, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            assert (not torch.equal(base(ids), dynamic(ids))) is changed, length
