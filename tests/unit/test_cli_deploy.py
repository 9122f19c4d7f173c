"""The deployment files and the Celery configuration: what docker compose and the workers are told.

Docker cannot run here, so the compose file's structure is checked instead; the containers run the same
`posenc` commands the integration tests run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from posenc.settings import Settings
from workers.app import celery_config
from workers.names import QUEUES, RUN_JOB, queue_for_device

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return loaded


def _duration_s(value: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return int(value[:-1]) * units[value[-1]]


def test_compose_services_depend_on_a_healthy_persistent_redis(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"redis", "gateway", "worker-cpu", "worker-gpu", "flower"}
    redis = services["redis"]
    assert "--appendonly" in redis["command"]
    assert "yes" in redis["command"]
    assert redis["command"][redis["command"].index("--maxmemory-policy") + 1] == "noeviction"
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert any(v.endswith(":/data") for v in redis["volumes"])
    for name in ("gateway", "worker-cpu", "worker-gpu", "flower"):
        service = services[name]
        assert service["depends_on"]["redis"]["condition"] == "service_healthy", name
        assert service["environment"]["POSENC_REDIS_URL"].startswith("redis://redis:6379"), name
    assert set(compose["volumes"]) >= {"redis-data", "artifacts"}


def test_compose_runs_the_posenc_commands_with_a_shared_artifact_volume(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["gateway"]["command"][:2] == ["posenc", "serve"]
    assert services["worker-cpu"]["command"][:4] == ["posenc", "worker", "--queues", "cpu"]
    assert services["worker-gpu"]["command"][:4] == ["posenc", "worker", "--queues", "gpu"]
    artifact_dir = services["gateway"]["environment"]["POSENC_ARTIFACT_DIR"]
    for name in ("gateway", "worker-cpu", "worker-gpu"):
        assert f"artifacts:{artifact_dir}" in services[name]["volumes"], name


def test_compose_workers_stop_softly_and_the_gpu_worker_reserves_one_gpu(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("worker-cpu", "worker-gpu"):
        worker = services[name]
        soft = float(worker["environment"]["POSENC_WORKER_SOFT_SHUTDOWN_TIMEOUT_S"])
        assert worker["environment"]["REMAP_SIGTERM"] == "SIGQUIT", name
        assert _duration_s(worker["stop_grace_period"]) > soft, name
    gpu = services["worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    command = gpu["command"]
    assert command[command.index("--concurrency") + 1] == "1"
    assert gpu["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]


def test_compose_flower_is_optional_and_needs_basic_auth(compose: dict[str, Any]) -> None:
    flower = compose["services"]["flower"]
    assert flower["profiles"] == ["monitoring"]
    auth = [arg for arg in flower["command"] if arg.startswith("--basic-auth=")]
    assert auth == ["--basic-auth=${FLOWER_BASIC_AUTH:?set FLOWER_BASIC_AUTH=user:password}"]


def test_dockerfile_is_slim_cpu_torch_and_non_root() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert dockerfile.startswith("#")
    assert "FROM python:3.11-slim" in dockerfile
    assert "https://download.pytorch.org/whl/cpu" in dockerfile
    assert "pip install . " in dockerfile or "pip install .\n" in dockerfile
    user_lines = [line for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert user_lines
    assert user_lines[-1] != "USER root"
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored
    assert ".git" in ignored


def test_celery_config_is_what_long_jobs_on_redis_need() -> None:
    settings = Settings(
        redis_url="redis://127.0.0.1:6399/0",
        job_soft_time_limit_s=7000,
        job_time_limit_s=7200,
        job_visibility_margin_s=600,
    )
    config = celery_config(settings)
    assert config["task_acks_late"] is True
    assert config["task_reject_on_worker_lost"] is True
    assert config["worker_prefetch_multiplier"] == 1
    assert config["task_track_started"] is True
    assert config["worker_cancel_long_running_tasks_on_connection_loss"] is True
    assert config["task_create_missing_queues"] is False
    assert config["accept_content"] == ["json"]
    assert config["task_serializer"] == config["result_serializer"] == "json"
    assert [q.name for q in config["task_queues"]] == list(QUEUES)
    assert config["task_routes"][RUN_JOB] == {"queue": "cpu"}
    assert config["worker_max_tasks_per_child"] == 1
    assert config["worker_pool"] == "prefork"
    assert config["task_time_limit"] == 7200
    assert config["task_soft_time_limit"] < config["task_time_limit"]
    # The visibility timeout is set in all three places and exceeds the hard limit by the margin.
    assert config["visibility_timeout"] == 7800
    assert config["broker_transport_options"]["visibility_timeout"] == 7800
    assert config["result_backend_transport_options"]["visibility_timeout"] == 7800


def test_celery_config_refuses_to_run_without_redis() -> None:
    with pytest.raises(RuntimeError, match="POSENC_REDIS_URL"):
        celery_config(Settings(redis_url=None))


def test_jobs_that_ask_for_cuda_go_to_the_gpu_queue() -> None:
    assert queue_for_device("cuda") == "gpu"
    assert queue_for_device("cpu") == "cpu"
    assert queue_for_device("auto") == "cpu"


def test_a_soft_time_limit_at_or_above_the_hard_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="job_soft_time_limit_s"):
        Settings(job_soft_time_limit_s=3600, job_time_limit_s=3600)
