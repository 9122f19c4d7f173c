"""The job cost the gateway caps (``max_job_cost``), and API keys held only as digests."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import ValidationError

from posenc.jobspec import job_cost, job_tokens, model_macs_per_token
from posenc.schemas.jobs import JobCreate, JobSpec
from posenc.settings import Settings
from posenc.tasks import family_of
from posenc.training.evaluate import protocol_windows


def create(kind: str = "benchmark", **spec: Any) -> JobCreate:
    base: dict[str, Any] = {"methods": [{"method": "rope"}, {"method": "alibi"}], "data": {"corpus": "stdlib"}}
    if kind != "benchmark":
        base["methods"] = base["methods"][:1]
    return JobCreate.model_validate({"kind": kind, "spec": base | spec})


@pytest.mark.parametrize(
    ("protocol", "stride", "length", "max_tokens"),
    [
        ("nonoverlapping", None, 128, 65536),
        ("nonoverlapping", None, 100, 1000),
        ("sliding", None, 128, 4096),
        ("sliding", 7, 64, 1000),
        ("sliding", 64, 64, 64),
    ],
)
def test_text_eval_tokens_are_what_the_evaluation_windows_read(
    protocol: str, stride: int | None, length: int, max_tokens: int
) -> None:
    spec = JobSpec.model_validate(
        {
            "methods": [{"method": "rope"}],
            "eval": {"protocol": protocol, "stride": stride, "max_tokens": max_tokens},
        }
    )
    windows = protocol_windows(max_tokens, length, protocol, stride)  # type: ignore[arg-type]
    assert family_of(spec).eval_tokens(length) == len(windows) * length


def test_benchmark_tokens_multiply_runs_and_add_evaluation() -> None:
    job = create(
        train={"steps": 100, "batch_size": 4, "length": 32},
        eval={"lengths": [32, 64], "max_tokens": 256},
        seeds=[0, 1, 2],
    )
    per_run = 100 * 4 * 32 + 256 + 256
    assert job_tokens(job) == 2 * 3 * per_run


def test_the_cost_in_multiply_adds_covers_runs_steps_evaluation_and_the_model() -> None:
    """2 layers, width 64, feed-forward 4x: (4 + 8)·64² weights per layer, 2·T·64 attention per layer, a head
    of at most 256 classes; training counts 3 passes (forward and backward)."""
    model = {"layers": 2, "dim": 64, "heads": 4}
    job = create(
        train={"steps": 10, "batch_size": 4, "length": 32},
        eval={"lengths": [32, 64], "max_tokens": 256},
        seeds=[0, 1],
        model=model,
    )
    assert isinstance(job.spec, JobSpec)

    classes = family_of(job.spec).output_classes()  # the stdlib corpus' characters bound its vocabulary

    def macs(length: int) -> int:
        return 2 * (12 * 64 * 64 + 2 * length * 64) + classes * 64

    assert model_macs_per_token(job.spec, 32) == macs(32)
    per_run = 3 * 10 * 4 * 32 * macs(32) + 256 * macs(32) + 256 * macs(64)
    assert job_cost(job) == 2 * 2 * per_run
    # each knob moves it: a wider model, more steps, a longer evaluation
    wider = create(train={"steps": 10, "batch_size": 4, "length": 32}, eval={"lengths": [32, 64], "max_tokens": 256},
                   seeds=[0, 1], model=model | {"dim": 128})  # fmt: skip
    assert job_cost(wider) > 3 * job_cost(job)
    longer = create(train={"steps": 10, "batch_size": 4, "length": 32}, eval={"lengths": [32, 4096], "max_tokens": 256},
                    seeds=[0, 1], model=model)  # fmt: skip
    assert job_cost(longer) > job_cost(job)


def test_train_evaluates_at_its_size_and_tasks_count_samples_times_sequence() -> None:
    job = create("train", data={"task": "addition", "size": 10}, train={"steps": 10, "batch_size": 2})
    longest = 3 * 10 + 5  # the longest addition instance of 10-digit operands: BOS a + b SEP s EOS
    assert job_tokens(job) == 10 * 2 * longest + 100 * longest


def test_extrapolating_a_checkpoint_trains_nothing() -> None:
    job = create("extrapolate", checkpoint="abc", eval={"lengths": [16, 1000], "max_tokens": 500})
    # 31 windows of 16; 3 of the training length 128, which is always evaluated; at least one window of 1000
    assert job_tokens(job) == 496 + 384 + 1000
    assert isinstance(job.spec, JobSpec)
    assert job_cost(job) == sum(tokens * model_macs_per_token(job.spec, length)
                                for tokens, length in ((496, 16), (384, 128), (1000, 1000)))  # fmt: skip


def test_a_compute_job_counts_one() -> None:
    job = JobCreate.model_validate(
        {
            "kind": "compute",
            "spec": {"route": "bias", "request": {"method": "alibi", "num_heads": 1, "query_length": 2}},
        }
    )
    assert job_cost(job) == 1


def test_keys_are_kept_only_as_digests() -> None:
    digest = hashlib.sha256(b"plain-key").hexdigest()
    settings = Settings(api_keys=["plain-key", "sha256:" + digest.upper()], admin_api_keys=["root"])
    assert settings.api_keys == ["sha256:" + digest, "sha256:" + digest]
    assert settings.admin_api_keys == ["sha256:" + hashlib.sha256(b"root").hexdigest()]
    assert "plain-key" not in settings.model_dump_json()
    with pytest.raises(ValidationError, match="64 hex digits"):
        Settings(api_keys=["sha256:not-hex"])
