"""One settings object for the gateway, the workers and the ``posenc`` command (env prefix ``POSENC_``).

Lives in ``posenc`` (torch-free) because both ``service`` and ``workers`` read it and neither may
import the other.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024
GiB = 1024 * MiB


def _default_state_dir() -> Path:
    return Path.home() / ".local" / "state" / "posenc"


WORKER_MEMORY_SHARE = 0.5  # of the machine's memory: a job's default budget, the rest for other processes


def _default_worker_memory() -> int:
    """Half of this machine's physical memory (``os.sysconf``); 8 GiB where it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * WORKER_MEMORY_SHARE)
    except (ValueError, OSError, AttributeError):
        return 8 * GiB


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="POSENC_", extra="ignore")

    # ---- where things live
    redis_url: str | None = Field(
        default=None, description="unset: `posenc serve` starts a private redis-server in state_dir"
    )
    state_dir: Path = Field(
        default_factory=_default_state_dir,
        description="embedded Redis data, artifacts and logs (default ~/.local/state/posenc)",
    )
    artifact_dir: Path | None = Field(default=None, description="default: state_dir/artifacts")
    data_dir: Path | None = Field(
        default=None,
        description="where job corpora live (tinyshakespeare.txt, text files a spec names); no corpus file "
        "is read outside it and data_dirs",
    )
    data_dirs: list[Path] = Field(
        default_factory=list, description="more directories job corpora may be read from (JSON list)"
    )

    # ---- gateway
    host: str = Field(default="127.0.0.1", description="gateway bind address (`posenc serve --host`)")
    port: int = Field(default=8000, description="gateway port (`posenc serve --port`)")
    max_output_bytes: int = Field(
        default=256 * MiB,
        ge=1,
        description="largest memory one request may allocate: its outputs and workspace, in bytes (413 above)",
    )
    max_job_output_bytes: int = Field(
        default=8 * GiB, ge=1, description="largest outputs and workspace of a compute job (413 at submission)"
    )
    max_json_elements: int = Field(
        default=1_000_000, ge=1, description="largest answer sent as application/json, in numbers (elements)"
    )
    max_request_work: int = Field(
        default=1_000_000_000,
        ge=1,
        description="largest CPU work of one request, in work units (about 1 ns of one core each, so about a "
        "second by default; estimated from "
        "the request before any work: positions x rotary pairs x layers and the like; bench/request_costs.py "
        "times each route against its estimate); 413 above",
    )
    inline_max_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description="the small-request threshold, in bytes of outputs and workspace: work this small (and within "
        "inline_max_work) runs on the event loop, where handing it to a compute thread would cost more; anything "
        "larger waits for a compute slot",
    )
    inline_max_work: int = Field(
        default=100_000, ge=0, description="the small-request threshold in work units (see inline_max_bytes)"
    )
    max_input_elements: int = Field(default=16 * MiB, description="largest total of input tensor elements")
    max_body_bytes: int = Field(default=128 * MiB, description="largest request body (413 above)")
    max_json_body_bytes: int = Field(
        default=16 * MiB,
        ge=1,
        description="largest JSON request body (413 above): parsed JSON takes several times its size in memory, "
        "so larger tensors go as application/vnd.safetensors",
    )
    compute_concurrency: int = Field(default=2, ge=1, description="compute requests running at once")
    compute_wait_s: float = Field(default=2.0, ge=0, description="wait for a compute slot before a 503")
    api_keys: list[str] = Field(
        default_factory=list,
        description="keys in plain text or as sha256:<hex digest of the key> (kept only as digests); "
        "empty: no authentication (loopback only)",
    )
    admin_api_keys: list[str] = Field(
        default_factory=list,
        description="keys (plain or sha256:<hex>) that also see, list and cancel every key's jobs",
    )
    auth_failures_per_minute: int = Field(
        default=20,
        ge=1,
        description="failed authentications one client address may make in a minute before its requests "
        "without a valid key are answered 429 for the rest of that minute; a valid key is never refused by this "
        "count (only by rate_limit_per_minute)",
    )
    public_health: bool = Field(
        default=False,
        description="with API keys set, serve /metrics and /readyz details without a key",
    )
    rate_limit_per_minute: int | None = Field(default=None, ge=1, description="per API key, kept in Redis")
    cors_origins: list[str] = Field(default_factory=list, description="browser origins allowed (JSON list)")

    # ---- torch
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="auto: CUDA when present")
    torch_threads: int | None = Field(
        default=None,
        ge=1,
        description="torch's intra-op threads; default: a worker's job gets cores / worker_concurrency, the gateway "
        "cores / compute_concurrency (each compute slot its share)",
    )
    compile_kernels: bool = Field(
        default=True,
        description="large float32 rotations use a one-pass kernel that torch.compile builds in a background "
        "thread on first use (eager until it is ready, and if compiling fails); false: always eager",
    )

    # ---- jobs
    worker_concurrency: int = Field(default=1, ge=1, description="jobs one worker runs at once")
    worker_preload: bool = Field(
        default=True,
        description="import torch and the job code in the worker parent (no torch op, no CUDA) so that each "
        "job's fresh process is a cheap fork; false: each job's process imports them itself (about 3 s)",
    )
    job_soft_time_limit_s: int = Field(default=4 * 3600 - 300, description="a job is stopped cleanly after this")
    job_time_limit_s: int = Field(default=4 * 3600, description="a job's process is killed after this")
    job_max_attempts: int = Field(default=3, ge=1, description="deliveries before a job is failed for good")
    job_ttl_s: int = Field(default=7 * 24 * 3600, description="how long job records and results are kept")
    job_tombstone_ttl_s: int = Field(
        default=30 * 24 * 3600, ge=0, description="after job_ttl_s, how long GET still answers 'expired'"
    )
    job_visibility_margin_s: int = Field(
        default=3600, ge=60, description="Redis visibility timeout = hard time limit + this margin"
    )
    job_lease_ttl_s: float = Field(
        default=30.0,
        gt=0,
        description="a running job's lease; expired = its worker is gone, the job is requeued",
    )
    job_sweep_interval_s: float = Field(
        default=15.0, gt=0, description="how often each worker looks for running jobs whose lease expired"
    )
    job_publish_grace_s: float = Field(
        default=30.0,
        gt=0,
        description="a queued job whose message is still unpublished after this is published by a worker sweep",
    )
    job_progress_interval_s: float = Field(default=0.5, ge=0, description="least time between progress writes")
    test_pause_before_claim_s: float = Field(
        default=0.0,
        ge=0,
        description="TEST ONLY: the task sleeps this long before claiming its job, so a test can kill the worker "
        "between taking the message and the claim; leave it at 0",
    )
    job_poll_after_s: int = Field(default=2, ge=1, description="Retry-After hint while a job is not terminal")
    idempotency_ttl_s: int = Field(default=24 * 3600, ge=1, description="how long an Idempotency-Key is kept")
    max_active_jobs_per_key: int = Field(
        default=8,
        ge=1,
        description="with API keys set, jobs one key may have queued or running at once (429 above)",
    )
    max_job_cost: int = Field(
        default=10**15,
        ge=1,
        description="largest cost of one training job, in multiply-adds estimated from the spec: methods x seeds "
        "x (3 x train steps x batch_size x train length + the evaluation tokens) x the model's multiply-adds per "
        "token (its width, depth and attention span); 413 above; compute jobs count 1 (about 4 h of a 2-core CPU "
        "at the default)",
    )
    worker_memory_bytes: int = Field(
        default_factory=_default_worker_memory,
        ge=1,
        description="largest peak memory of one run of a training job, estimated from the spec (weights, AdamW "
        "state, activations at the batch and at the longest evaluation size, attention maps, method tables); 413 "
        "above; default half of the machine's memory (set it to a worker's, or its GPU's, when the gateway runs "
        "elsewhere)",
    )
    worker_heartbeat_interval_s: float = Field(default=5.0, gt=0, description="worker liveness beat (readyz)")
    worker_soft_shutdown_timeout_s: float = Field(
        default=30.0, ge=0, description="on stop, running jobs get this long before they are requeued"
    )

    @field_validator("api_keys", "admin_api_keys")
    @classmethod
    def _keep_only_digests(cls, keys: list[str]) -> list[str]:
        # A key is held as the digest it is checked against, so no plain key outlives parsing the settings.
        return [key_digest_form(key) for key in keys]

    @model_validator(mode="after")
    def _soft_limit_below_hard(self) -> Settings:
        # The soft limit lets a job fail cleanly; at or above the hard limit the child is killed first.
        if self.job_soft_time_limit_s >= self.job_time_limit_s:
            raise ValueError("job_soft_time_limit_s must be below job_time_limit_s")
        return self

    @property
    def visibility_timeout_s(self) -> int:
        """Redis visibility timeout: above the hard time limit, so a running job is never redelivered."""
        return self.job_time_limit_s + self.job_visibility_margin_s

    @property
    def resolved_artifact_dir(self) -> Path:
        return self.artifact_dir if self.artifact_dir is not None else self.state_dir / "artifacts"


KEY_DIGEST_PREFIX = "sha256:"
_HEX_DIGEST = re.compile(r"^[0-9a-fA-F]{64}$")


def key_digest_form(key: str) -> str:
    """``sha256:<hex>`` of a plain key; a key already in that form is checked and lower-cased. Operators may
    configure digests so the plain keys never appear in their config."""
    if key.startswith(KEY_DIGEST_PREFIX):
        digest = key.removeprefix(KEY_DIGEST_PREFIX)
        if not _HEX_DIGEST.match(digest):
            raise ValueError("a key given as 'sha256:<hex>' needs the 64 hex digits of its SHA-256 digest")
        return KEY_DIGEST_PREFIX + digest.lower()
    if not key:
        raise ValueError("an API key may not be empty")
    return KEY_DIGEST_PREFIX + hashlib.sha256(key.encode()).hexdigest()


@lru_cache
def get_settings() -> Settings:
    return Settings()
