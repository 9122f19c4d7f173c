"""One settings object for the gateway, the workers and the ``posenc`` command (env prefix ``POSENC_``).

Lives in ``posenc`` (torch-free) because both ``service`` and ``workers`` read it and neither may
import the other.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024
GiB = 1024 * MiB


def _default_state_dir() -> Path:
    return Path.home() / ".local" / "state" / "posenc"


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
        default=None, description="where named corpora are looked up (e.g. tinyshakespeare.txt)"
    )

    # ---- gateway
    host: str = Field(default="127.0.0.1", description="gateway bind address (`posenc serve --host`)")
    port: int = Field(default=8000, description="gateway port (`posenc serve --port`)")
    max_output_bytes: int = Field(default=256 * MiB, description="largest tensor output of a compute route")
    max_job_output_bytes: int = Field(
        default=8 * GiB, ge=1, description="largest outputs and workspace of a compute job (413 at submission)"
    )
    max_json_elements: int = Field(default=1_000_000, description="largest output sent as application/json")
    max_input_elements: int = Field(default=16 * MiB, description="largest total of input tensor elements")
    max_body_bytes: int = Field(default=128 * MiB, description="largest request body (413 above)")
    compute_concurrency: int = Field(default=2, ge=1, description="compute requests running at once")
    compute_wait_s: float = Field(default=2.0, ge=0, description="wait for a compute slot before a 503")
    api_keys: list[str] = Field(default_factory=list, description="empty: no authentication (loopback only)")
    rate_limit_per_minute: int | None = Field(default=None, ge=1, description="per API key, kept in Redis")
    cors_origins: list[str] = Field(default_factory=list, description="browser origins allowed (JSON list)")

    # ---- torch
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="auto: CUDA when present")
    torch_threads: int | None = Field(default=None, ge=1, description="default: cores / worker concurrency")

    # ---- jobs
    worker_concurrency: int = Field(default=1, ge=1, description="jobs one worker runs at once")
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
    job_poll_after_s: int = Field(default=2, ge=1, description="Retry-After hint while a job is not terminal")
    idempotency_ttl_s: int = Field(default=24 * 3600, ge=1, description="how long an Idempotency-Key is kept")
    worker_heartbeat_interval_s: float = Field(default=5.0, gt=0, description="worker liveness beat (readyz)")
    worker_soft_shutdown_timeout_s: float = Field(
        default=30.0, ge=0, description="on stop, running jobs get this long before they are requeued"
    )

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


@lru_cache
def get_settings() -> Settings:
    return Settings()
