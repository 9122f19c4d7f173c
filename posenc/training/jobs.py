"""Job kinds: what the Celery task runs. :func:`run_job` runs a whole job in one process; a benchmark may
instead fan out, one child job per (method, seed) run (:func:`run_unit`), the parent putting the runs together
(:func:`assemble_benchmark`). The checks a spec must pass (by the gateway before enqueueing, and again here)
are ``posenc.jobspec``'s and its task family's (``posenc.tasks``).

Kinds
    train        one method, one or more seeds; writes ``model.safetensors`` + ``model.json`` (first seed;
                 ``model-seed<s>.*`` for the others) and ``loss_curve.json``; returns the final loss, the
                 in-distribution scores and whether each run learned its training sizes, tokens/s and a loss
                 curve.
    extrapolate  evaluates the model of a finished train job (``spec.checkpoint`` = its id) or trains one per
                 seed first; rows per evaluation size.
    benchmark    methods x seeds with the same budget; ``result["table"]`` is long-format rows (see
                 ``posenc.training.report``) plus a summary, the runs, the family's own summaries (the probes'
                 effective length); ``table.csv``, ``table.json`` and the plots.

Every result says what its sizes are (``result["data"]``, the family's ``describe``: unit, training size,
sizes, tokens per size) and, per run, its in-distribution scores and ``learned``: with ``train.until``, whether
the run reached its threshold before the cap; without, the family's rule (the headline metric at the training
size at least 0.9; None for perplexity and the probes). ``not_learned`` lists the runs that did not learn ("rope seed
2"); where learning is per probe (the probes) every probe a run did not learn ("rope seed 1: passkey"), also as
``not_learned_probes`` (``{"method", "seed", "probe"}``), per run in ``runs``, and in each table row's
``learned``. ``score_series`` is ``plot.png``'s data (``posenc.training.report.series_json``).

Idempotent and resumable (service.md §1.7): ``job_dir/result.json`` is written last and returned as is when a
redelivered job finds it; each run keeps its training checkpoint and, once done, its record under
``job_dir/checkpoints/<index>-<method>-seed<s>/``, so a redelivery resumes mid-training or skips it. Progress
counts one step per training step and one per evaluated size, over the whole job (or the run, for a child).

Device: ``run_job`` uses its ``device`` argument; resolving ``spec.device``/settings (``auto``) is the
caller's job.
"""

from __future__ import annotations

import fcntl
import math
import statistics
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc.errors import InvalidInput
from posenc.extension import BASE_LABEL, arms, finetune_job_spec, regime
from posenc.files import read_json, spell_non_finite, write_bytes_atomic, write_json_atomic
from posenc.jobspec import validate_spec
from posenc.pe import get_method
from posenc.schemas.jobs import JobKind, JobSpec, MethodRef
from posenc.tasks import Family, family_of
from posenc.tasks.base import SPEC
from posenc.tasks.suites import SUITES, mean_reciprocal_rank, suite_specs
from posenc.training.families import PreparedData, Trainer, trainer_for
from posenc.training.files import load_model, save_model
from posenc.training.findings import findings
from posenc.training.hooks import JobCancelled, JobHooks, Progress
from posenc.training.leaderboard import suite_results
from posenc.training.model import attention_paths_of, count_parameters
from posenc.training.report import (
    heatmap_png,
    leaderboard_png,
    plot_png,
    score_series,
    series_json,
    summarize,
    write_benchmark_artifacts,
)
from posenc.training.train import Model, ProgressScope, build_model, train

LOSS_CURVE_POINTS = 200
RUN_CURVE_POINTS = 50  # each run's own loss curve in a benchmark's or a train job's runs (the page draws them)
RESULT_NAME = "result.json"
CONFIG_RULE = (
    "per layer, as POST /v1/models/resolve gives it: method, θ, scaling factors, rotated share and NoPE layers kept; "
    "context lengths in the params scaled by train.length / original; windows, chunks and the temperature's floor "
    "scale = a quarter of train.length; the shortest repeating unit of the source's layers tiled over this model's; "
    "not carried: the pairing (a permutation of q/k features, nothing for a model trained from scratch), the "
    "softmax scale, head counts and widths (the job's model)"
)
NOT_TAGS = frozenset({"size", "samples", "tokens", "windows", "protocol", "stride"})


# ------------------------------------------------------------------------------------------------ progress
@dataclass
class JobProgress:
    """Counts steps over the whole job and forwards them to the hooks."""

    hooks: JobHooks
    total: int
    done: int = 0

    def advance(self, steps: int, stage: str, loss: float | None = None) -> None:
        self.done += steps
        self.hooks.progress(Progress(step=self.done, total=self.total, loss=loss, stage=stage))

    def check_cancel(self) -> None:
        if self.hooks.should_cancel():
            raise JobCancelled(f"cancelled at step {self.done} of {self.total}")


# ------------------------------------------------------------------------------------------------ runs
@dataclass(frozen=True)
class Unit:
    """One (method, seed) run of a job: the method's index in ``spec.methods`` and its table label."""

    index: int
    seed: int
    label: str

    @property
    def name(self) -> str:
        return f"{self.label} seed {self.seed}"


def entries(spec: JobSpec) -> list[tuple[str, MethodRef]]:
    """What the runs of a job train, by name: its method entries, or a context-extension study's arms
    (``posenc.training.extension.arms``: the base model, each rule, fine-tuned or not)."""
    if spec.extension is not None:
        return [(arm.label, arm.ref) for arm in arms(spec)]
    return [(ref.name, ref) for ref in spec.methods]


def units(spec: JobSpec) -> list[Unit]:
    """Every (entry, seed) run, entries outermost: labels are entry names, ``#index`` for a repeated one."""
    names = [name for name, _ in entries(spec)]
    labels = [name if names.count(name) == 1 else f"{name}#{index}" for index, name in enumerate(names)]
    return [Unit(index, seed, labels[index]) for index in range(len(names)) for seed in spec.seeds]


def run_dir(job_dir: Path, spec: JobSpec, unit: Unit) -> Path:
    return job_dir / "checkpoints" / f"{unit.index:02d}-{entries(spec)[unit.index][0]}-seed{unit.seed}"


def unit_steps(spec: JobSpec, family: Family, index: int = 0) -> int:
    """Progress steps of one benchmark run: its training steps and one per evaluated size. A study's arm counts
    the base model's training (done or reused) and its fine-tune."""
    steps = spec.train.steps + len(family.eval_sizes())
    if spec.extension is not None and arms(spec)[index].finetune:
        steps += spec.extension.finetune_steps
    return steps


def in_distribution(family: Family, cells: list[dict[str, Any]]) -> dict[str, float | None]:
    """The run's scores at the training size: each metric's mean over the cells there (a probe's groups)."""
    there = [cell for cell in cells if cell["size"] == family.train_size()]
    scores: dict[str, float | None] = {}
    for metric in family.metrics:
        values = [cell[metric] for cell in there if cell.get(metric) is not None]
        scores[metric] = statistics.fmean(values) if values else None
    return scores


def _train(
    spec: JobSpec,
    trainer: Trainer[Any],
    ref: MethodRef,
    seed: int,
    data: PreparedData,
    directory: Path,
    progress: JobProgress,
    device: str,
    label: str,
) -> tuple[Model, dict[str, Any]]:
    """Train (or resume) one (method, seed) under ``directory``; returns the model and its training record. With
    ``train.until`` the record also has ``steps_needed`` (the step it reached the threshold at; None: it hit the
    cap) and ``until`` (the threshold, the checks' spacing, whether it was reached, every check's [step, value]);
    progress counts the cap's steps either way."""
    config = trainer.model_config(ref, len(data.vocab))
    until = spec.train.until
    outcome = train(
        config,
        seed,
        spec.train,
        data.batches,
        checkpoint_dir=directory,
        hooks=progress.hooks,
        device=device,
        scope=ProgressScope(offset=progress.done, total=progress.total, stage=f"train {label}"),
        until=None if until is None else trainer.until(until, data, seed, device),
    )
    progress.done += spec.train.steps
    record: dict[str, Any] = {
        "seed": seed,
        "steps": spec.train.steps,
        "steps_run": outcome.steps_run,
        "final_loss": outcome.final_loss,
        "tokens_per_s": outcome.tokens_per_s,
        "train_seconds": outcome.seconds,
        "parameters": count_parameters(outcome.model),
        "precision": outcome.precision,
        "flops_per_token": outcome.flops_per_token,
        "mfu": outcome.mfu,
        "compile": None if outcome.compile is None else outcome.compile.to_json(),
        "attention_paths": attention_paths_of(outcome.model, device),
        "losses": outcome.losses,
    }
    if until is not None:
        needed = outcome.steps_needed
        if needed is not None:
            progress.advance(0, f"train {label}: learned at step {needed} of {spec.train.steps}")
        record["steps_needed"] = needed
        record["until"] = {
            "score": until.score,
            "every": until.every,
            "reached": needed is not None,
            "checks": outcome.checks,
        }
    # a diverged run's losses (and checks) are not finite: spelled, so that its record is written and read back
    return outcome.model, spell_non_finite(record)


def _learned(family: Family, scores: Mapping[str, float | None], record: Mapping[str, Any]) -> bool | None:
    """Whether a run learned its training sizes: with ``train.until``, whether it reached the threshold before the
    cap (its held-out checks are the learned rule); without, its family's rule on the final scores."""
    if "until" in record:
        return bool(record["until"]["reached"])
    return family.learned(scores)


def _evaluate(
    model: Model,
    data: PreparedData,
    trainer: Trainer[Any],
    sizes: list[int],
    device: str,
    progress: JobProgress | None,
    label: str,
) -> list[dict[str, Any]]:
    """The cells of every evaluation size (see ``posenc.training.families``)."""
    cells: list[dict[str, Any]] = []
    for size in sizes:
        if progress is not None:
            progress.check_cancel()
        cells.extend(trainer.score(model, data, size, device))
        if progress is not None:
            progress.advance(1, f"eval {label} size {size}")
    return cells


def run_unit(
    spec: JobSpec,
    unit: Unit,
    *,
    job_dir: Path,
    data: PreparedData,
    trainer: Trainer[Any],
    progress: JobProgress,
    device: str,
    data_dir: Path | None = None,
) -> dict[str, Any]:
    """Train and evaluate one run of a benchmark (or skip it: its record is kept once done); the record is
    ``{"method", "label", "seed", "cells", "in_distribution", "learned", "final_loss", "tokens_per_s",
    "train_seconds", "parameters"}`` (and a study's arm's ``"arm"`` and ``"base"``; with ``train.until``,
    ``"steps_needed"`` and ``"until"``, see ``_train``)."""
    directory = run_dir(job_dir, spec, unit)
    done_file = directory / RESULT_NAME
    if done_file.is_file():
        recorded: dict[str, Any] = read_json(done_file)
        progress.advance(unit_steps(spec, trainer.family, unit.index), f"skip {unit.name} (done)")
        return recorded
    if spec.extension is not None:
        result = _run_arm(spec, unit, job_dir, directory, data, trainer, progress, device, data_dir)
        write_json_atomic(done_file, result)
        return result
    ref = spec.methods[unit.index]
    model, record = _train(spec, trainer, ref, unit.seed, data, directory, progress, device, unit.name)
    cells = _evaluate(model, data, trainer, trainer.family.eval_sizes(), device, progress, unit.name)
    scores = in_distribution(trainer.family, cells)
    losses = record.pop("losses")
    record.pop("steps_run")
    result = {
        "loss_curve": subsample_curve(losses, RUN_CURVE_POINTS),
        "method": ref.method_name,
        "label": unit.label,
        **_pattern_fields(trainer.family, ref),
        **record,
        "cells": cells,
        "in_distribution": scores,
        "learned": _learned(trainer.family, scores, record),
    }
    write_json_atomic(done_file, result)
    return result


# ------------------------------------------------------------------------------------------------ studies
def base_dir(job_dir: Path, seed: int) -> Path:
    return job_dir / "checkpoints" / f"base-seed{seed}"


@contextmanager
def base_lock(job_dir: Path, seed: int) -> Iterator[None]:
    """Held while a seed's base model is trained or loaded: one arm trains it, the others wait and then load it.
    An ``fcntl`` lock on a file beside it, released by the kernel if its holder dies."""
    path = base_dir(job_dir, seed).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _study_base(
    spec: JobSpec,
    unit: Unit,
    job_dir: Path,
    data: PreparedData,
    trainer: Trainer[Any],
    progress: JobProgress,
    device: str,
) -> tuple[Model, dict[str, Any]]:
    """The seed's base model of a context-extension study, trained by the first arm that gets here and loaded
    (its final checkpoint resumed, no step run) by every other; with its record ``base.json``: who trained it,
    its training, its in-distribution scores."""
    extension = spec.extension
    assert extension is not None
    family = trainer.family
    directory = base_dir(job_dir, unit.seed)
    with base_lock(job_dir, unit.seed):
        model, record = _train(
            spec, trainer, extension.base, unit.seed, data, directory, progress, device, f"base seed {unit.seed}"
        )
        record_file = directory / "base.json"
        if record["steps_run"] > 0 or not record_file.is_file():
            cells = _evaluate(model, data, trainer, [family.train_size()], device, None, BASE_LABEL)
            scores = in_distribution(family, cells)
            base = {
                "method": extension.base.method,
                "params": extension.base.params,
                "seed": unit.seed,
                "trained_by": unit.name,
                "steps": record["steps"],
                "final_loss": record["final_loss"],
                "train_seconds": record["train_seconds"],
                "in_distribution": scores,
                "learned": family.learned(scores),
            }
            write_json_atomic(record_file, base)
            trained_here = True
        else:
            base = read_json(record_file)
            trained_here = False
    if trained_here:
        message = (f"base model seed {unit.seed}: trained by run '{unit.name}' ({record['steps']} steps, "
                   f"{record['train_seconds']:.0f} s)")  # fmt: skip
    else:
        message = f"base model seed {unit.seed}: reused by run '{unit.name}' (trained by run '{base['trained_by']}')"
    progress.hooks.note(message)
    progress.advance(0, message)
    return model, base | {"trained_here": trained_here}


def _run_arm(
    spec: JobSpec,
    unit: Unit,
    job_dir: Path,
    directory: Path,
    data: PreparedData,
    trainer: Trainer[Any],
    progress: JobProgress,
    device: str,
    data_dir: Path | None,
) -> dict[str, Any]:
    """One arm of a context-extension study (``posenc.training.extension``) on one seed: the base model, with the
    arm's rule in place of its rotation, fine-tuned if the arm is, then evaluated at every size."""
    extension = spec.extension
    assert extension is not None
    arm = arms(spec)[unit.index]
    base_model, base = _study_base(spec, unit, job_dir, data, trainer, progress, device)
    finetune: dict[str, Any] | None = None
    if arm.finetune:
        tuned = finetune_job_spec(spec, arm)
        tuned_trainer = trainer_for(family_of(tuned))
        tuned_data = tuned_trainer.prepare(data_dir, data.vocab)
        outcome = train(
            tuned_trainer.model_config(arm.ref, len(data.vocab)),
            unit.seed,
            tuned.train,
            tuned_data.batches,
            checkpoint_dir=directory,
            hooks=progress.hooks,
            device=device,
            scope=ProgressScope(offset=progress.done, total=progress.total, stage=f"fine-tune {unit.name}"),
            initial_state=base_model.state_dict(),
        )
        progress.done += tuned.train.steps
        model = outcome.model
        finetune = {
            "steps": tuned.train.steps,
            "length": tuned.train.length,
            "lr": tuned.train.lr,
            "final_loss": spell_non_finite(outcome.final_loss),
            "train_seconds": outcome.seconds,
            "tokens_per_s": outcome.tokens_per_s,
        }
    elif arm.is_base:
        model = base_model
    else:
        model = build_model(trainer.model_config(arm.ref, len(data.vocab)), unit.seed)
        model.load_state_dict(base_model.state_dict())
        model = model.to(next(base_model.parameters()).device).eval()
    cells = _evaluate(model, data, trainer, trainer.family.eval_sizes(), device, progress, unit.name)
    return {
        "method": arm.ref.method,
        "label": unit.label,
        "params": arm.ref.params,
        "seed": unit.seed,
        "arm": {"rule": None if arm.is_base else arm.ref.method, "finetune": finetune},
        "base": base,
        "final_loss": finetune["final_loss"] if finetune else base["final_loss"],
        "tokens_per_s": finetune["tokens_per_s"] if finetune else None,
        "train_seconds": finetune["train_seconds"] if finetune else 0.0,
        "parameters": count_parameters(model),
        "cells": cells,
        "in_distribution": in_distribution(trainer.family, cells),
        # whether the run learned its training sizes is the base model's: a rule may cost some accuracy at
        # L_train, which is a finding of the study, not a run that failed to learn
        "learned": base["learned"],
    }


# ------------------------------------------------------------------------------------------------ results
def _tags(family: Family, cells: list[dict[str, Any]]) -> list[str]:
    return sorted({key for cell in cells for key in cell} - NOT_TAGS - set(family.metrics))


def table_rows(family: Family, records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The long-format rows of every run's cells, and the tags they carry."""
    tags = _tags(family, [cell for record in records for cell in record["cells"]])
    rows: list[dict[str, Any]] = []
    for record in records:
        headline = record["in_distribution"].get(family.metric)
        # train.until: the steps the run needed (None: it hit the cap), beside its learned flag
        needed = {"steps_needed": record["steps_needed"]} if "until" in record else {}
        for cell in record["cells"]:
            for metric in family.metrics:
                if metric in cell:
                    rows.append(
                        {
                            "method": record["label"],
                            "seed": record["seed"],
                            "size": cell["size"],
                            **{tag: cell.get(tag) for tag in tags},
                            "metric": metric,
                            "value": cell[metric],
                            "learned": record["learned"],
                            "in_distribution": headline,
                            **needed,
                        }
                    )
    return rows, tags


def run_summaries(family: Family, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("label", "seed", "in_distribution", "learned", "final_loss", "tokens_per_s", "train_seconds")
    until_keys = ("steps", "steps_needed", "until")  # train.until's runs: the cap, the steps needed, the checks
    # (a run recorded before runs kept their loss curve has none)
    return [
        {key: record[key] for key in keys}
        | {key: record[key] for key in until_keys if "until" in record}
        | {"loss_curve": record.get("loss_curve", [])}
        | {
            key: record[key]
            for key in ("precision", "flops_per_token", "mfu", "compile", "attention_paths")
            if key in record
        }  # (newer)
        for record in records
    ]


def learned_per_probe(rows: list[dict[str, Any]], failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where learning is per probe, each row's ``learned``: whether its run learned the row's probe (False for the
    ``failures``' (method, seed, probe), True for the rest) instead of the run's None."""
    failed = {(failure["method"], failure["seed"], failure["probe"]) for failure in failures}
    return [row | {"learned": (row["method"], row["seed"], row.get("probe")) not in failed} for row in rows]


def _probes_of(failures: list[dict[str, Any]], method: str, seed: int) -> list[str]:
    return [failure["probe"] for failure in failures if (failure["method"], failure["seed"]) == (method, seed)]


def not_learned_runs(rows: list[dict[str, Any]], failures: list[dict[str, Any]] | None = None) -> list[str]:
    """The result's ``not_learned``: "method seed s" for every run that did not learn its training sizes; where
    learning is per probe (``failures``, the probes' ``not_learned_probes``), "method seed s: probe" for every
    probe a run did not learn, so a run that learned the control but not passkey is listed with passkey."""
    if failures is not None:
        return sorted({f"{failure['method']} seed {failure['seed']}: {failure['probe']}" for failure in failures})
    return sorted({row["method"] + f" seed {row['seed']}" for row in rows if row["learned"] is False})


def assemble_benchmark(spec: JobSpec, records: list[dict[str, Any]], job_dir: Path) -> dict[str, Any]:
    """A benchmark's result from its runs' records (in ``units`` order), its artifacts written to ``job_dir``."""
    family = family_of(spec)
    rows, tags = table_rows(family, records)
    summary = summarize(rows, family.train_size(), tags)
    extra = family.extra_results(rows)
    failures = extra.get("not_learned_probes")  # where learning is per probe (probes): [{method, seed, probe}]
    if failures is not None:
        rows = learned_per_probe(rows, failures)
    group = family.group_tag
    control = extra.get("control", {}).get("probe")  # drawn in its own panel
    plots = {"plot.png": plot_png(rows, family.metric, family.train_size(), family.title(), family.unit,
                                  family.chance(), panel_tag=group, control=control)}  # fmt: skip
    for tag in tags:
        if tag == group:
            continue
        if group is None or group not in tags:
            plots[f"heatmap-{tag}.png"] = heatmap_png(rows, family.metric, tag, family.unit, family.title())
            continue
        for value in sorted({row[group] for row in rows if row.get(tag) is not None}):
            chosen = [row for row in rows if row[group] == value]
            title = f"{family.title()}: {value}"
            plots[f"heatmap-{tag}-{value}.png"] = heatmap_png(chosen, family.metric, tag, family.unit, title)
    leaderboard = extra.get("leaderboard")
    if leaderboard:
        plots["leaderboard.png"] = leaderboard_png(
            leaderboard, "median", extra.get("leaderboard_label", "score"), extra.get("leaderboard_title", "")
        )
    artifacts = write_benchmark_artifacts(job_dir, rows, summary, plots, tags)
    runs = run_summaries(family, records)
    if failures is not None:
        runs = [run | {"not_learned_probes": _probes_of(failures, run["label"], run["seed"])} for run in runs]
    result = {
        "kind": "benchmark",
        "data": family.describe(),
        "table": rows,
        "summary": summary,
        "runs": runs,
        "not_learned": not_learned_runs(rows, failures),
        "score_series": series_json(score_series(rows, family.metric, group), family.metric, control),
        "training_params": _training_params(spec),
        "setups": {
            record["label"]: {key: record[key] for key in ("pattern", "config", "layers") if key in record}
            for record in records
            if "layers" in record
        },
        **({} if spec.extension is None else {"study": _study_fields(spec, records)}),
        **extra,
        "artifacts": artifacts,
    }
    result["findings"] = findings(result, baseline=None if spec.extension is None else BASE_LABEL)
    return result


def _study_fields(spec: JobSpec, records: list[dict[str, Any]]) -> dict[str, Any]:
    """A context-extension study's set-up and its base models (one per seed: who trained it, its training and
    in-distribution scores)."""
    extension = spec.extension
    assert extension is not None
    bases = {record["seed"]: {k: v for k, v in record["base"].items() if k != "trained_here"} for record in records}
    tuned = finetune_job_spec(spec, arms(spec)[0]).train
    bands, warnings = regime(spec)  # how the setup's pairs fall into each rule's bands, beside the source model's
    return {
        "kind": "context_extension",
        "base": extension.base.model_dump(exclude_defaults=True),
        "baseline": BASE_LABEL,
        "factor": extension.factor,
        "train_length": spec.train.length,
        "finetune": None
        if not extension.finetune_steps
        else {"steps": tuned.steps, "length": tuned.length, "lr": tuned.lr, "warmup_steps": tuned.warmup_steps},
        "base_models": [bases[seed] for seed in sorted(bases)],
        "base_trained": {
            str(seed): sum(1 for r in records if r["seed"] == seed and r["base"]["trained_here"])
            for seed in sorted(bases)
        },
        "bands": bands,
        "regime_warnings": warnings,
    }


def _pattern_fields(family: Family, ref: MethodRef) -> dict[str, Any]:
    """A layer pattern's name and every layer's setup as trained (``posenc.patterns.LayerSetup``); {} else."""
    setups = family.layer_setups(ref)
    if setups is None:
        return {}
    fields: dict[str, Any] = {"pattern": ref.pattern, "layers": [setup.to_json() for setup in setups]}
    if ref.config is not None:
        fields["config"] = {
            "source": ref.config_name,
            "preset": isinstance(ref.config, str),
            "unit": len(family.layer_unit(ref)),
            "rule": CONFIG_RULE,
        }
    return fields


def _training_params(spec: JobSpec) -> list[dict[str, Any]]:
    """Per method: the params it was given, the params training used (the registry's training defaults filled
    in) and the note saying which defaults those are. A study's: per arm, its rule's params as given and as
    filled from the study."""
    if spec.extension is not None:
        given = {ref.name: ref.params for ref in spec.methods}
        return [
            {
                "label": arm.label,
                "method": arm.ref.method,
                "params": arm.ref.params if arm.is_base else given[arm.label.removesuffix("+ft")],
                "trained_with": arm.ref.params,
                "finetune": arm.finetune,
                "note": "the base model's method"
                if arm.is_base
                else "the rule's params the arm leaves out are "
                "the study's: base from the base model, factor, original_max_position_embeddings = train.length",
            }
            for arm in arms(spec)
        ]
    described = []
    for ref in spec.methods:
        if ref.patterned:
            described.append(
                {
                    "method": ref.method,
                    "params": ref.params,
                    "pattern": ref.pattern,
                    **({} if ref.config is None else {"config": ref.config_name}),
                    "trained_with": None,
                    "note": "a layer pattern: every layer's setup is in the result's 'layers'",
                }
            )
            continue
        method = get_method(ref.method_name)
        described.append(
            {
                "method": ref.method,
                "params": ref.params,
                "trained_with": method.training_params(ref.params),
                "note": method.training_params_note(ref.params),
            }
        )
    return described


def subsample_curve(losses: list[float], points: int = LOSS_CURVE_POINTS) -> list[list[float]]:
    """[[step, loss], ...] with at most ``points`` entries, always including the last step."""
    if not losses:
        return []
    stride = max(1, math.ceil(len(losses) / points))
    steps = list(range(stride, len(losses) + 1, stride))
    if steps[-1] != len(losses):
        steps.append(len(losses))
    return [[step, losses[step - 1]] for step in steps]


# ------------------------------------------------------------------------------------------------ kinds
def _run_train(
    spec: JobSpec, trainer: Trainer[Any], job_dir: Path, data: PreparedData, progress: JobProgress, device: str
) -> dict[str, Any]:
    family = trainer.family
    ref = spec.methods[0]
    runs: list[dict[str, Any]] = []
    curves: dict[str, list[float]] = {}
    for position, seed in enumerate(spec.seeds):
        label = f"{ref.name} seed {seed}"
        directory = job_dir / "checkpoints" / f"00-{ref.name}-seed{seed}"
        model, record = _train(spec, trainer, ref, seed, data, directory, progress, device, label)
        cells = _evaluate(model, data, trainer, [family.train_size()], device, None, label)
        scores = in_distribution(family, cells)
        stem = "model" if position == 0 else f"model-seed{seed}"
        metadata = {
            "vocab": list(data.vocab),
            "method": ref.method,
            "params": ref.params,
            "seed": seed,
            "data": spec.data.model_dump(),
            "train": spec.train.model_dump(),
            "family": family.name,
        }
        save_model(model, metadata, job_dir, stem)
        curves[str(seed)] = record.pop("losses")
        record.pop("steps_run")
        runs.append(
            {
                **record,
                "in_distribution": scores,
                "learned": _learned(family, scores, record),
                "model": f"{stem}.safetensors",
                "loss_curve": subsample_curve(curves[str(seed)], RUN_CURVE_POINTS),
            }
        )
    write_json_atomic(job_dir / "loss_curve.json", {"method": ref.method, "losses_by_seed": curves})
    first = runs[0]
    return {
        "kind": "train",
        "method": ref.method,
        "params": ref.params,
        **_pattern_fields(family, ref),
        "training_params": _training_params(spec)[0],
        "data": family.describe() | {"sizes": [family.train_size()]},
        "final_loss": first["final_loss"],
        "in_distribution": first["in_distribution"],
        "learned": first["learned"],
        "tokens_per_s": first["tokens_per_s"],
        "parameters": first["parameters"],
        "loss_curve": subsample_curve(curves[str(spec.seeds[0])]),
        "runs": runs,
        "artifacts": sorted(
            {
                "loss_curve.json",
                *(r["model"] for r in runs),
                *(r["model"].replace(".safetensors", ".json") for r in runs),
            }
        ),
    }


def _extrapolate_checkpoint(
    spec: JobSpec, artifact_root: Path, data_dir: Path | None, progress: JobProgress, device: str
) -> dict[str, Any]:
    """Evaluate ``artifact_root/<spec.checkpoint>/model.*`` on the data and vocabulary it was trained with."""
    assert spec.checkpoint is not None
    source = artifact_root / spec.checkpoint
    if not (source / "model.json").is_file():
        raise InvalidInput((*SPEC, "checkpoint"), f"job {spec.checkpoint!r} has no trained model")
    metadata = read_json(source / "model.json")
    trained = spec.model_copy(
        update={
            "data": type(spec.data).model_validate(metadata["data"]),
            "train": type(spec.train).model_validate(metadata["train"]),
        }
    )
    family = family_of(trained)
    if family.model not in ("text", "tokens"):
        raise InvalidInput(
            (*SPEC, "checkpoint"),
            f"job {spec.checkpoint!r} trained an {family.name} model; extrapolate from a checkpoint evaluates "
            "sequence models only (run a benchmark or an extrapolate job without a checkpoint)",
        )
    model, _ = load_model(source, device=device)
    if metadata["method"] != spec.methods[0].method:
        raise InvalidInput(
            (*SPEC, "methods", 0, "method"),
            f"checkpoint {spec.checkpoint!r} was trained with {metadata['method']!r}, not {spec.methods[0].method!r}",
        )
    trainer = trainer_for(family)
    data = trainer.prepare(data_dir, tuple(metadata["vocab"]))
    cells = _evaluate(model, data, trainer, family.eval_sizes(), device, progress, metadata["method"])
    record = {"label": metadata["method"], "seed": int(metadata["seed"]), "cells": cells}
    return _extrapolate_result(family, metadata["method"], metadata["params"], [record], spec.checkpoint)


def _extrapolate_result(
    family: Family, method: str, params: dict[str, Any], records: list[dict[str, Any]], checkpoint: str | None
) -> dict[str, Any]:
    """Rows per (seed, size, tags), each with its ratio to the same seed's score at the training size."""
    rows: list[dict[str, Any]] = []
    runs = []
    for record in records:
        cells = record["cells"]
        scores = in_distribution(family, cells)
        learned = family.learned(scores)
        reference = scores.get(family.metric)
        for cell in cells:
            value = cell.get(family.metric)
            ratio = value / reference if reference and value is not None else None
            rows.append({"seed": record["seed"], **cell, "ratio": ratio, "learned": learned})
        runs.append({"seed": record["seed"], "in_distribution": scores, "learned": learned})
    return {
        "kind": "extrapolate",
        "method": method,
        "params": params,
        "checkpoint": checkpoint,
        "data": family.describe(),
        "rows": rows,
        "runs": runs,
    }


# ------------------------------------------------------------------------------------------------ suites
def task_dir_name(position: int, spec: JobSpec) -> str:
    """A suite task's folder: its artifacts in ``job_dir/<name>/``, its runs under ``job_dir/checkpoints/<name>``."""
    return f"task-{position:02d}-{family_of(spec).task}"


def assemble_suite(spec: JobSpec, tasks: list[dict[str, Any]], job_dir: Path) -> dict[str, Any]:
    """A suite's result: every task's benchmark result (artifacts named inside their folders), the methods'
    mean reciprocal rank over (task, seed) with ``mrr.png``, and the suite's description."""
    suite = SUITES[spec.suite or ""]
    mrr = mean_reciprocal_rank(tasks)
    plots = {}
    if mrr:
        entries = [{"method": entry["method"], "median": entry["mrr"], "per_seed": []} for entry in mrr]
        plots["mrr.png"] = leaderboard_png(
            entries, "median", "mean reciprocal rank over (task, seed)", f"suite {spec.suite}: {suite.description}"
        )
    for name, data in plots.items():
        write_bytes_atomic(job_dir / name, data)
    return {
        "kind": "benchmark",
        "suite": spec.suite,
        "description": suite.description,
        "budget": suite.budget,
        "tasks": tasks,
        "mrr": mrr,
        **suite_results(spec, tasks),
        "artifacts": [*plots, *(name for task in tasks for name in task["artifacts"])],
    }


def _run_suite(spec: JobSpec, job_dir: Path, data_dir: Path | None, hooks: JobHooks, device: str) -> dict[str, Any]:
    task_specs = suite_specs(spec)
    progress = JobProgress(
        hooks=hooks, total=sum(total_steps("benchmark", task, family_of(task)) for task in task_specs)
    )
    tasks = []
    for position, task_spec in enumerate(task_specs):
        trainer = trainer_for(family_of(task_spec))
        data = trainer.prepare(data_dir, None)
        work = suite_task_work(job_dir, position, task_spec)
        records = [
            run_unit(
                task_spec,
                unit,
                job_dir=work,
                data=data,
                trainer=trainer,
                progress=progress,
                device=device,
                data_dir=data_dir,
            )
            for unit in units(task_spec)
        ]
        tasks.append(assemble_suite_task(position, task_spec, records, job_dir))
    return assemble_suite(spec, tasks, job_dir)


def suite_task_work(job_dir: Path, position: int, task_spec: JobSpec) -> Path:
    """Where a suite task's runs keep their checkpoints and records (each in its ``run_dir`` below this)."""
    return job_dir / "checkpoints" / task_dir_name(position, task_spec)


def assemble_suite_task(
    position: int, task_spec: JobSpec, records: list[dict[str, Any]], job_dir: Path
) -> dict[str, Any]:
    """One suite task's benchmark result from its runs' records, its artifacts in ``job_dir/<task folder>/``."""
    name = task_dir_name(position, task_spec)
    (job_dir / name).mkdir(parents=True, exist_ok=True)
    result = assemble_benchmark(task_spec, records, job_dir / name)
    result["artifacts"] = [f"{name}/{artifact}" for artifact in result["artifacts"]]
    return result


def total_steps(kind: JobKind, spec: JobSpec, family: Family) -> int:
    runs = len(spec.methods) * len(spec.seeds)
    if kind == "train":
        return runs * spec.train.steps
    if kind == "extrapolate" and spec.checkpoint is not None:
        return len(family.eval_sizes())
    return sum(unit_steps(spec, family, unit.index) for unit in units(spec))


def run_job(
    kind: JobKind,
    spec: JobSpec,
    *,
    job_dir: Path,
    artifact_root: Path,
    hooks: JobHooks,
    device: str = "cpu",
    data_dir: Path | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Run (or resume, or return the recorded result of) one job in this process; the result is JSON-able."""
    family = validate_spec(kind, spec)
    result_file = job_dir / RESULT_NAME
    if result_file.is_file():
        recorded: dict[str, Any] = read_json(result_file)
        return recorded
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    job_dir.mkdir(parents=True, exist_ok=True)
    progress = JobProgress(hooks=hooks, total=total_steps(kind, spec, family))  # a suite counts its own
    if spec.suite is not None:
        result = _run_suite(spec, job_dir, data_dir, hooks, device)
    elif kind == "extrapolate" and spec.checkpoint is not None:
        result = _extrapolate_checkpoint(spec, artifact_root, data_dir, progress, device)
    else:
        trainer = trainer_for(family)
        data = trainer.prepare(data_dir, None)
        if kind == "train":
            result = _run_train(spec, trainer, job_dir, data, progress, device)
        else:
            records = [
                run_unit(
                    spec,
                    unit,
                    job_dir=job_dir,
                    data=data,
                    trainer=trainer,
                    progress=progress,
                    device=device,
                    data_dir=data_dir,
                )
                for unit in units(spec)
            ]
            if kind == "extrapolate":
                ref = spec.methods[0]
                result = _extrapolate_result(family, ref.method_name, ref.params, records, None)
            else:
                result = assemble_benchmark(spec, records, job_dir)
    result["device"] = device
    write_json_atomic(result_file, result)
    return result
