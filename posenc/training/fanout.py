"""Benchmarks that fan out: each (method, seed) run is a job of its own, on any worker; the benchmark's own job
puts the runs together once all have ended. The worker-side glue around :mod:`posenc.training.jobs`, whose
``run_unit`` and ``assemble_benchmark`` do the work; the job store (``posenc.jobstore``) keeps the parent and
its children, the Celery task (``workers.tasks``) calls these three:

- :func:`plan`       the runs of a benchmark: one per distinct (method index, seed), with its progress total;
                     for a suite, one per (task, method index, seed);
- :func:`run_child`  one run, in its own process: trains (or resumes from its checkpoint) and evaluates under
                     the benchmark's directory, ``job_dir/checkpoints/<index>-<method>-seed<s>/``, and keeps its
                     record there (a rerun of a finished run returns that record);
- :func:`assemble`   the benchmark's result from the runs' records, in ``units`` order, as ``run_job`` builds it
                     in one process: the same table for the same spec (training is deterministic per seed).

Every run directory is written by its own child only; ``assemble`` reads them once every child has succeeded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc.files import read_json, write_json_atomic
from posenc.jobspec import validate_spec
from posenc.schemas.jobs import JobSpec
from posenc.tasks import family_of
from posenc.tasks.suites import suite_specs
from posenc.training.families import trainer_for
from posenc.training.hooks import JobHooks
from posenc.training.jobs import (
    RESULT_NAME,
    JobProgress,
    Unit,
    assemble_benchmark,
    assemble_suite,
    assemble_suite_task,
    run_dir,
    run_unit,
    suite_task_work,
    unit_steps,
    units,
)


def _parts(spec: JobSpec, job_dir: Path) -> list[tuple[int | None, JobSpec, Path]]:
    """The benchmarks a job runs: itself (position None, in ``job_dir``), or a suite's tasks, each with its spec
    and the directory its runs live under."""
    if spec.suite is None:
        return [(None, spec, job_dir)]
    return [
        (position, task, suite_task_work(job_dir, position, task)) for position, task in enumerate(suite_specs(spec))
    ]


def plan(spec: JobSpec) -> list[dict[str, Any]]:
    """The runs of benchmark ``spec``, each ``{"method": label, "index", "seed", "total"}`` (``total``: its
    progress steps), and for a suite's runs ``"task"`` (its name) and ``"position"`` (its place in the suite).
    A seed listed twice is one run (its record serves both places in the table)."""
    validate_spec("benchmark", spec)
    runs: dict[tuple[int | None, int, int], dict[str, Any]] = {}
    for position, part, _ in _parts(spec, Path()):
        family = family_of(part)
        where = {} if position is None else {"task": family.task, "position": position}
        for unit in units(part):
            total = unit_steps(part, family, unit.index)
            run = {"method": unit.label, "index": unit.index, "seed": unit.seed, "total": total}
            runs.setdefault((position, unit.index, unit.seed), where | run)
    return list(runs.values())


def run_spec(spec: JobSpec, position: int | None, index: int, seed: int) -> JobSpec | None:
    """The one-run benchmark a run of ``spec`` amounts to (its cost is the run's: ``posenc.jobspec.job_cost``);
    None for a study's arm, whose work depends on whether it trained the base model."""
    part = spec if position is None else suite_specs(spec)[position]
    if part.extension is not None:
        return None
    return part.model_copy(update={"methods": [part.methods[index]], "seeds": [seed]})


def _unit(spec: JobSpec, index: int, seed: int) -> Unit:
    for unit in units(spec):
        if (unit.index, unit.seed) == (index, seed):
            return unit
    raise ValueError(f"the benchmark has no run of method {index} with seed {seed}")


def run_child(
    spec: JobSpec,
    index: int,
    seed: int,
    *,
    job_dir: Path,
    hooks: JobHooks,
    position: int | None = None,
    device: str = "cpu",
    data_dir: Path | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Run (or resume, or return the kept record of) the run of method ``index`` with ``seed`` of benchmark
    ``spec`` (of its task at ``position`` for a suite), whose directory is ``job_dir``; progress counts this
    run's steps only."""
    validate_spec("benchmark", spec)
    parts = _parts(spec, job_dir)
    matching = [part for part in parts if part[0] == position]
    if not matching:
        raise ValueError(f"the benchmark has no task at position {position}")
    _, part, work = matching[0]
    family = family_of(part)
    unit = _unit(part, index, seed)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    trainer = trainer_for(family)
    data = trainer.prepare(data_dir, None)
    progress = JobProgress(hooks=hooks, total=unit_steps(part, family, index))
    return run_unit(
        part, unit, job_dir=work, data=data, trainer=trainer, progress=progress, device=device, data_dir=data_dir
    )


def assemble(spec: JobSpec, job_dir: Path, *, device: str) -> dict[str, Any]:
    """The benchmark's (or suite's) result and its artifacts from the records its runs kept; returned as kept
    when a previous attempt got that far."""
    result_file = job_dir / RESULT_NAME
    if result_file.is_file():
        recorded: dict[str, Any] = read_json(result_file)
        return recorded
    results = []
    for position, part, work in _parts(spec, job_dir):
        records = []
        for unit in units(part):
            record_file = run_dir(work, part, unit) / RESULT_NAME
            if not record_file.is_file():
                raise RuntimeError(f"run {unit.name} ended without its record ({record_file.name} is missing)")
            records.append(read_json(record_file))
        if position is None:
            results.append(assemble_benchmark(part, records, work))
        else:
            results.append(assemble_suite_task(position, part, records, job_dir))
    result = results[0] if spec.suite is None else assemble_suite(spec, results, job_dir)
    result["device"] = device
    write_json_atomic(result_file, result)
    return result
