"""A job's peak memory per run, estimated from its spec before it is queued (``posenc.job_estimates``): the jobs
that once tried to allocate 17 GB and 4.4 TB on a worker are refused naming the field that drives them, small
jobs pass, and the estimate grows with the batch and the length."""

from __future__ import annotations

from typing import Any

import pytest

from posenc.errors import BudgetExceeded
from posenc.job_estimates import check_duration, check_memory, estimate_seconds, job_groups, job_memory
from posenc.schemas.jobs import JobCreate

GiB = 1024**3
BUDGET = 8 * GiB  # the default share (half) of a 16 GiB machine


def job(kind: str = "train", **spec: Any) -> JobCreate:
    return JobCreate.model_validate({"kind": kind, "spec": {"methods": [{"method": "rope"}], **spec}})


IMAGE_AT_4096 = job(data={"task": "shapes"}, train={"batch_size": 4096})
PROBES_AT_2_20 = job("benchmark", data={"task": "probes"}, eval={"lengths": [1_048_576]})
README_QUICKSTART = job(
    data={"task": "copy", "size": 8}, model={"layers": 2, "dim": 32, "heads": 2}, train={"steps": 200, "batch_size": 16}
)


def test_an_image_job_at_batch_4096_is_refused_naming_the_batch() -> None:
    with pytest.raises(BudgetExceeded) as caught:
        check_memory(IMAGE_AT_4096, BUDGET)
    assert caught.value.fields == (("body", "spec", "train", "batch_size"),)
    assert caught.value.size > BUDGET
    assert caught.value.limit == BUDGET
    assert "worker_memory_bytes" in str(caught.value)


def test_probes_evaluated_at_a_million_tokens_are_refused_naming_the_length() -> None:
    with pytest.raises(BudgetExceeded) as caught:
        check_memory(PROBES_AT_2_20, BUDGET)
    assert caught.value.fields == (("body", "spec", "eval", "lengths", 0),)
    assert caught.value.size > 1024 * GiB  # a (N, N) map at 2^20 tokens alone is 4 TiB


def test_the_probes_job_also_runs_past_the_time_limit_naming_the_length() -> None:
    with pytest.raises(BudgetExceeded) as caught:
        check_duration(PROBES_AT_2_20, 4 * 3600 - 300, "cpu", {})
    assert caught.value.fields == (("body", "spec", "eval", "lengths", 0),)
    assert caught.value.unit == "s"


def test_a_long_training_run_is_refused_naming_the_steps() -> None:
    long = job(data={"task": "copy", "size": 8}, train={"steps": 10_000_000, "batch_size": 16})
    with pytest.raises(BudgetExceeded) as caught:
        check_duration(long, 4 * 3600 - 300, "cpu", {})
    assert caught.value.fields == (("body", "spec", "train", "steps"),)


def test_a_small_job_passes_both() -> None:
    estimate = check_memory(README_QUICKSTART, BUDGET)
    assert estimate is not None
    assert estimate.peak < GiB
    check_duration(README_QUICKSTART, 4 * 3600 - 300, "cpu", {})


def test_a_text_job_at_default_lengths_names_the_training_length_when_evaluation_drives_it() -> None:
    big = job("extrapolate", data={"corpus": "stdlib"}, train={"length": 1024, "batch_size": 1, "steps": 1})
    estimate = job_memory(big)
    assert estimate is not None
    assert estimate.loc == ("body", "spec", "train", "length")  # the default lengths are 1 ... 8 x train.length


@pytest.mark.parametrize("data", [{"task": "copy", "size": 16}, {"task": "shapes"}, {"corpus": "stdlib"}])
def test_the_estimate_grows_with_the_batch(data: dict[str, Any]) -> None:
    peaks = []
    for batch in (1, 16, 256, 4096):
        estimate = job_memory(job(data=data, train={"batch_size": batch}))
        assert estimate is not None
        peaks.append(estimate.peak)
    assert peaks == sorted(peaks)
    assert peaks[-1] > peaks[0]


@pytest.mark.parametrize("method", ["rope", "alibi", "fox", "sinusoidal"])
def test_the_estimate_grows_with_the_evaluation_length(method: str) -> None:
    peaks = []
    for length in (128, 1024, 8192, 65536):
        spec = {"methods": [{"method": method}], "train": {"length": 128}, "eval": {"lengths": [length]}}
        estimate = job_memory(JobCreate.model_validate({"kind": "extrapolate", "spec": spec}))
        assert estimate is not None
        peaks.append(estimate.peak)
    assert peaks == sorted(peaks)
    assert peaks[-1] > 4 * peaks[0]


def test_methods_that_materialise_their_scores_count_them() -> None:
    def peak(method: str) -> int:
        estimate = job_memory(job(methods=[{"method": method}], train={"length": 1024, "batch_size": 16}))
        assert estimate is not None
        return estimate.peak

    assert peak("fox") > 2 * peak("rope")  # (B, H, N, N) maps per layer, against a fused kernel


def test_a_benchmark_is_its_largest_run_and_a_suite_every_task() -> None:
    small, large = {"method": "rope"}, {"method": "transformer_xl"}
    both = job_memory(job("benchmark", methods=[small, large], train={"length": 512}))
    alone = job_memory(job("benchmark", methods=[large], train={"length": 512}))
    assert both is not None
    assert alone is not None
    assert both.peak == alone.peak
    suite = job_memory(JobCreate.model_validate({"kind": "benchmark", "spec": {"suite": "quick", "methods": [small]}}))
    assert suite is not None
    assert suite.peak < GiB


def test_a_duration_estimate_scales_with_the_measured_speed() -> None:
    groups = job_groups(README_QUICKSTART)
    default = estimate_seconds(groups, "cpu", {})
    assert default > 0
    key = f"speed:cpu:{groups[0].family}:{groups[0].path}"
    assert estimate_seconds(groups, "cpu", {key: 2.0}) == pytest.approx(2 * default, abs=0.2)  # both rounded to 0.1 s
    assert estimate_seconds(groups, "cpu", {key: None}) == default


def test_a_measured_overhead_replaces_the_default_per_process() -> None:
    from posenc.job_estimates import SECONDS_PER, overhead_key

    one = job_groups(README_QUICKSTART)
    many = job_groups(JobCreate.model_validate({"kind": "benchmark", "spec": {
        "methods": [{"method": "rope"}], "data": {"task": "copy", "size": 4}, "seeds": list(range(64)),
        "train": {"steps": 1, "batch_size": 1}}}))  # fmt: skip
    processes = {"one": sum(g.features.get("process", 0.0) for g in one),
                 "many": sum(g.features.get("process", 0.0) for g in many)}  # fmt: skip
    assert processes == {"one": 1.0, "many": 65.0}  # the benchmark's own attempt and one per run
    for groups, count in ((one, 1.0), (many, 65.0)):
        default = estimate_seconds(groups, "cpu", {})
        slower = estimate_seconds(groups, "cpu", {overhead_key("cpu"): 0.5})
        assert slower == pytest.approx(default + count * (0.5 - SECONDS_PER["process"]), abs=0.1)


@pytest.mark.parametrize(
    ("compile", "queue", "compiles"),
    [("off", "gpu", 0), ("auto", "cpu", 0), ("auto", "gpu", 2), ("on", "cpu", 2), ("on", "gpu", 2)],
)
def test_each_run_that_compiles_adds_a_compile_unscaled_by_the_queue_s_speed(
    compile: str, queue: str, compiles: int
) -> None:
    from posenc.job_estimates import COMPILE_S, speed_key

    def groups(option: str) -> Any:
        return job_groups(JobCreate.model_validate({"kind": "benchmark", "spec": {
            "methods": [{"method": "rope"}], "data": {"task": "copy", "size": 4}, "seeds": [0, 1],
            "train": {"steps": 50, "batch_size": 4, "compile": option}}}))  # fmt: skip

    [group] = groups(compile)
    speeds = {speed_key(queue, group.family, group.path): 0.5}  # a fast queue: the compile stays what it is
    extra = estimate_seconds(groups(compile), queue, speeds) - estimate_seconds(groups("off"), queue, speeds)
    assert extra == pytest.approx(compiles * COMPILE_S, abs=0.02)
