"""Jobs: validation before enqueueing, and train / extrapolate / benchmark end to end on tiny models."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.corpora import CORPUS_RULE
from posenc.errors import InvalidInput
from posenc.jobspec import validate_spec
from posenc.pe import UnknownMethodError, get_method
from posenc.schemas.jobs import JobKind, JobSpec
from posenc.tasks import base, family_of
from posenc.training.files import load_model
from posenc.training.hooks import JobCancelled, Progress
from posenc.training.jobs import run_job


class Hooks:
    def __init__(self, cancel_at: int | None = None) -> None:
        self.reports: list[Progress] = []
        self.notes: list[str] = []
        self.cancel_at = cancel_at

    def progress(self, progress: Progress) -> None:
        self.reports.append(progress)

    def should_cancel(self) -> bool:
        return self.cancel_at is not None and bool(self.reports) and self.reports[-1].step >= self.cancel_at

    def note(self, message: str) -> None:
        self.notes.append(message)


def tiny_spec(corpus: Path | None, method_names: list[str], **overrides: Any) -> JobSpec:
    """A text job on ``corpus`` (length 16, evaluated at 16 and 32 tokens), or the copy task (sizes up to 6 items,
    evaluated at 2 and 6) without one."""
    train: dict[str, Any] = {"steps": 6, "batch_size": 4, "checkpoint_every": 2, "warmup_steps": 2}
    raw: dict[str, Any] = {
        "methods": [{"method": m} for m in method_names],
        "data": {"corpus": str(corpus)} if corpus is not None else {"task": "copy", "size": 6},
        "model": {"layers": 1, "dim": 16, "heads": 2},
        "train": train | {"length": 16} if corpus is not None else train,
        "eval": {"lengths": [16, 32], "max_tokens": 256} if corpus is not None else {"sizes": [2, 6], "samples": 8},
        "seeds": [0],
    }
    raw.update(overrides)
    return JobSpec.model_validate(raw)


# ------------------------------------------------------------------------------------------- validation
def test_validation_refuses_what_the_schema_cannot_check(text_file: Path) -> None:
    with pytest.raises(UnknownMethodError):
        validate_spec("train", tiny_spec(text_file, ["no_such_method"]))
    with pytest.raises(InvalidInput, match="greater than 1") as bad_param:
        validate_spec("train", tiny_spec(text_file, ["rope"], methods=[{"method": "rope", "params": {"base": -1}}]))
    assert bad_param.value.loc == ("body", "spec", "methods", 0, "params", "base")
    with pytest.raises(InvalidInput, match="2D positions") as refused:
        validate_spec("train", tiny_spec(text_file, ["sinusoidal_2d"]))
    assert refused.value.loc == ("body", "spec", "methods", 0, "method")
    with pytest.raises(InvalidInput, match="exactly one method"):
        validate_spec("train", tiny_spec(text_file, ["rope", "alibi"]))
    with pytest.raises(InvalidInput, match="only an extrapolate job"):
        validate_spec("train", tiny_spec(text_file, ["rope"], checkpoint="abc"))
    with pytest.raises(InvalidInput, match="id of a finished train job"):
        validate_spec("extrapolate", tiny_spec(text_file, ["rope"], checkpoint="../etc"))
    with pytest.raises(InvalidInput, match=r"takes its training size at data\.size") as tokens_for_a_task:
        validate_spec("train", tiny_spec(None, ["rope"], train={"length": 40, "steps": 6}))
    assert tokens_for_a_task.value.loc == ("body", "spec", "train", "length")
    with pytest.raises(InvalidInput, match=r"eval\.sizes") as lengths_for_a_task:
        validate_spec("benchmark", tiny_spec(None, ["rope"], eval={"lengths": [16]}))
    assert lengths_for_a_task.value.loc == ("body", "spec", "eval", "lengths")
    with pytest.raises(InvalidInput, match="at least one size"):
        validate_spec("benchmark", tiny_spec(text_file, ["rope"], eval={"lengths": []}))
    validate_spec("benchmark", tiny_spec(text_file, ["rope", "alibi", "sinusoidal"]))


def test_learned_methods_need_an_init_and_a_table_covering_the_eval_lengths(
    text_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    learned = get_method("learned_absolute")
    with monkeypatch.context() as patched:
        patched.setattr(base, "get_method", lambda name: dataclasses.replace(learned, learned_init=None))
        with pytest.raises(InvalidInput, match="learned_init"):
            validate_spec("train", tiny_spec(text_file, ["learned_absolute"]))

    short_table = [{"method": "learned_absolute", "params": {"max_positions": 20}}]
    with pytest.raises(InvalidInput, match="past the learned table") as refused:
        validate_spec("extrapolate", tiny_spec(text_file, [], methods=short_table))
    assert refused.value.loc == ("body", "spec", "methods", 0, "params")
    covering = [{"method": "learned_absolute", "params": {"max_positions": 32}}]
    validate_spec("extrapolate", tiny_spec(text_file, [], methods=covering))


def test_default_evaluation_sizes_are_in_the_familys_unit(text_file: Path) -> None:
    text = family_of(tiny_spec(text_file, ["rope"], eval={}))
    assert (text.unit, text.train_size(), text.eval_sizes()) == ("tokens", 16, [16, 32, 64, 128])
    copy = family_of(tiny_spec(None, ["rope"], eval={}))
    assert (copy.unit, copy.train_size()) == ("items", 6)
    assert copy.eval_sizes() == [*range(1, 13), 18, 24]  # every size to 2n, then 3n and 4n
    assert copy.tokens(6) == 15  # BOS x1..x6 SEP x1..x6 EOS
    given = family_of(tiny_spec(None, ["rope"], eval={"sizes": [9, 12]}))
    assert given.eval_sizes() == [6, 9, 12]  # the training size is always evaluated


def test_a_corpus_outside_the_data_dirs_is_refused_before_and_when_the_job_runs(
    text_file: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text(text_file.read_text())
    for name in ["/etc/passwd", str(outside), "../outside.txt", str(tmp_path / "data" / "absent.txt")]:
        with pytest.raises(InvalidInput) as at_submission:
            validate_spec("train", tiny_spec(Path(name), ["rope"]))
        assert (at_submission.value.loc, at_submission.value.msg) == (("body", "spec", "data", "corpus"), CORPUS_RULE)
        with pytest.raises(InvalidInput) as on_the_worker:
            run("train", tiny_spec(Path(name), ["rope"]), tmp_path / "job")
        assert on_the_worker.value.msg == CORPUS_RULE
    assert not (tmp_path / "job").exists()  # refused before anything was written
    validate_spec("train", tiny_spec(Path("corpus.txt"), ["rope"]))  # a name relative to the data dir
    validate_spec("train", tiny_spec(outside, ["rope"]), data_dirs=[tmp_path])  # the gateway passes its own dirs
    with pytest.raises(InvalidInput, match="under the data directories"):
        validate_spec("train", tiny_spec(text_file, ["rope"]), data_dirs=[tmp_path / "elsewhere"])


# ----------------------------------------------------------------------------------------------- kinds
def run(kind: JobKind, spec: JobSpec, job_dir: Path, hooks: Hooks | None = None) -> dict[str, Any]:
    return run_job(kind, spec, job_dir=job_dir, artifact_root=job_dir.parent, hooks=hooks or Hooks())


def test_benchmark_end_to_end_table_csv_png_and_resume(text_file: Path, tmp_path: Path) -> None:
    spec = tiny_spec(text_file, ["rope", "alibi"], seeds=[0, 1])
    hooks = Hooks()
    result = run("benchmark", spec, tmp_path / "job", hooks)
    json.dumps(result, allow_nan=False)  # JSON-able, no tensors

    table = result["table"]
    assert len(table) == 2 * 2 * 2 * 2  # methods x seeds x lengths x {ppl, nll}
    assert set(table[0]) == {"method", "seed", "size", "metric", "value", "learned", "in_distribution"}
    assert result["data"]["unit"] == "tokens"
    assert (result["data"]["train_size"], result["data"]["sizes"]) == (16, [16, 32])
    assert result["data"]["tokens"] == {"16": 16, "32": 32}
    assert all(row["learned"] is None for row in table)  # perplexity has no threshold
    assert {(r["method"], r["metric"]) for r in table} == {(m, k) for m in ("rope", "alibi") for k in ("ppl", "nll")}
    for row in table:
        if row["metric"] == "ppl":
            nll = next(
                r["value"]
                for r in table
                if r["metric"] == "nll"
                and r["method"] == row["method"]
                and r["seed"] == row["seed"]
                and r["size"] == row["size"]
            )
            assert row["value"] == pytest.approx(torch.tensor(nll, dtype=torch.float64).exp().item())
    ratios = {(s["method"], s["metric"], s["size"]): s["ratio"] for s in result["summary"]}
    assert ratios[("rope", "ppl", 16)] == 1.0
    assert {s["reference_size"] for s in result["summary"]} == {16}

    with (tmp_path / "job" / "table.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(table)
    assert list(rows[0]) == ["method", "seed", "size", "metric", "value", "learned", "in_distribution"]
    assert (tmp_path / "job" / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "job" / "table.json").read_text())["table"] == table
    # each run carries its own loss curve, at its own steps 1 ... steps, ending at its final loss
    assert len(result["runs"]) == 4
    for run_record in result["runs"]:
        steps = [step for step, _ in run_record["loss_curve"]]
        assert steps == list(range(1, 7)), run_record["label"]
        assert run_record["loss_curve"][-1][1] == pytest.approx(run_record["final_loss"])
    assert len({json.dumps(r["loss_curve"]) for r in result["runs"]}) == 4  # four runs, four curves

    total = 4 * (6 + 2)  # runs x (steps + eval lengths)
    assert [r.step for r in hooks.reports] == list(range(1, total + 1))
    assert all(r.total == total for r in hooks.reports)

    assert run("benchmark", spec, tmp_path / "job") == result  # redelivered after the end: the recorded result
    (tmp_path / "job" / "result.json").unlink()
    redelivered = Hooks()
    assert run("benchmark", spec, tmp_path / "job", redelivered)["table"] == table
    assert all((r.stage or "").startswith("skip") for r in redelivered.reports)  # finished sub-runs are skipped


def test_a_cancelled_benchmark_resumes_to_the_same_table(text_file: Path, tmp_path: Path) -> None:
    spec = tiny_spec(text_file, ["alibi", "rope"])
    with pytest.raises(JobCancelled):
        run("benchmark", spec, tmp_path / "a", Hooks(cancel_at=11))  # inside the second method's training
    resumed = run("benchmark", spec, tmp_path / "a")
    assert resumed["table"] == run("benchmark", spec, tmp_path / "b")["table"]


def test_train_then_extrapolate_the_saved_checkpoint(text_file: Path, tmp_path: Path) -> None:
    spec = tiny_spec(text_file, ["alibi"], seeds=[3, 4])
    trained = run("train", spec, tmp_path / "train-1")
    assert (trained["data"]["train_size"], trained["data"]["unit"]) == (16, "tokens")
    scores = trained["in_distribution"]
    assert scores["ppl"] == pytest.approx(torch.tensor(scores["nll"]).exp().item())
    assert trained["loss_curve"][-1][0] == 6
    assert len(trained["runs"]) == 2
    assert trained["runs"][0]["loss_curve"] == trained["loss_curve"]  # the first seed's is the job's
    assert trained["runs"][1]["loss_curve"][-1] == [6, pytest.approx(trained["runs"][1]["final_loss"])]
    for name in ("model.safetensors", "model.json", "model-seed4.safetensors", "loss_curve.json"):
        assert (tmp_path / "train-1" / name).is_file(), name
    model, metadata = load_model(tmp_path / "train-1")
    assert metadata["seed"] == 3
    assert metadata["method"] == "alibi"
    assert len(metadata["vocab"]) == model.config.vocab_size

    evaluated = run("extrapolate", spec.model_copy(update={"checkpoint": "train-1"}), tmp_path / "extra-1")
    assert evaluated["data"]["protocol"] == "nonoverlapping"
    assert evaluated["checkpoint"] == "train-1"
    assert [row["size"] for row in evaluated["rows"]] == [16, 32]
    assert evaluated["rows"][0]["nll"] == pytest.approx(scores["nll"])  # the same model, the same data
    assert evaluated["rows"][0]["ratio"] == 1.0

    with pytest.raises(InvalidInput, match="no trained model"):
        run("extrapolate", spec.model_copy(update={"checkpoint": "missing"}), tmp_path / "extra-2")


def test_extrapolate_trains_first_and_names_the_sliding_protocol(text_file: Path, tmp_path: Path) -> None:
    spec = tiny_spec(text_file, ["rope"], eval={"lengths": [16, 32], "protocol": "sliding", "max_tokens": 128})
    result = run("extrapolate", spec, tmp_path / "job")
    assert result["data"]["protocol"] == "sliding"
    assert [(r["size"], r["stride"], r["tokens"]) for r in result["rows"]] == [(16, 8, 128), (32, 16, 128)]


def test_task_benchmark_reports_exact_match(tmp_path: Path) -> None:
    result = run("benchmark", tiny_spec(None, ["nope", "alibi"]), tmp_path / "job")
    assert {row["metric"] for row in result["table"]} == {"exact_match", "token_accuracy"}
    assert all(0.0 <= row["value"] <= 1.0 for row in result["table"])
    assert result["data"]["protocol"] == "greedy_exact_match"
    assert (result["data"]["unit"], result["data"]["sizes"]) == ("items", [2, 6])
    for run_record in result["runs"]:  # six steps learn nothing: flagged, not read as a failure to extrapolate
        assert run_record["learned"] is (run_record["in_distribution"]["exact_match"] >= 0.9)
    assert result["not_learned"] == sorted(f"{r['label']} seed {r['seed']}" for r in result["runs"] if not r["learned"])


def test_a_method_whose_table_is_shorter_than_the_evaluation_is_refused_before_queueing(text_file: Path) -> None:
    """Huang's signed table covers |i - j| < max_position: the job's longest evaluation sequence is checked at
    submission (one query against every key), not discovered minutes into the job."""
    methods = [{"method": "huang", "params": {"max_position": 100}}]
    with pytest.raises(InvalidInput, match="max_position") as refused:
        validate_spec("benchmark", tiny_spec(text_file, [], methods=methods, eval={"lengths": [32, 256]}))
    assert refused.value.loc == ("body", "spec", "methods", 0, "params", "max_position")
    validate_spec("benchmark", tiny_spec(text_file, [], methods=methods, eval={"lengths": [32, 64]}))
