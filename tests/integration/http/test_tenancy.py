"""Trust between API keys, through the real app and a real Redis: a job belongs to the key that created it.

Jobs are created through the API with no worker running (they stay queued), which is all ownership needs; a
finished job with an artifact is made the way a worker makes it (``JobStore.claim`` then ``finish`` with the
artifact file on disk). Nothing is mocked.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from prometheus_client import generate_latest
from starlette.testclient import TestClient

from posenc import runtime
from posenc.jobstore import JobStore, list_artifacts

pytestmark = pytest.mark.integration

KEY_A, KEY_B, ADMIN = "key-a-0123456789", "key-b-9876543210", "admin-key-5555"
A, B, ROOT = {"X-API-Key": KEY_A}, {"X-API-Key": KEY_B}, {"X-API-Key": ADMIN}


def owner_of(key: str) -> str:
    """The owner id the gateway records: a prefix of the key's SHA-256 digest."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def train_request(*, steps: int = 10, batch_size: int = 2, size: int = 6) -> dict[str, Any]:
    """A tiny train job on the built-in copy task (no corpus file)."""
    return {
        "kind": "train",
        "spec": {
            "methods": [{"method": "rope"}],
            "data": {"task": "copy", "size": size},
            "model": {"layers": 1, "dim": 16, "heads": 2},
            "train": {"steps": steps, "batch_size": batch_size, "warmup_steps": 0},
            "eval": {"samples": 4},
            "device": "cpu",
        },
    }


@pytest.fixture
def tenants(make_client: Callable[..., TestClient], redis_url: str, tmp_path: Path) -> Callable[..., TestClient]:
    """A gateway with two user keys (one configured as its digest) and an admin key, on this test's Redis."""

    def build(**overrides: Any) -> TestClient:
        settings: dict[str, Any] = {
            "redis_url": redis_url,
            "state_dir": tmp_path / "state",
            "artifact_dir": tmp_path / "artifacts",
            "api_keys": [KEY_A, "sha256:" + hashlib.sha256(KEY_B.encode()).hexdigest().upper()],
            "admin_api_keys": [ADMIN],
            "public_health": False,
            "auth_failures_per_minute": 20,
            "max_active_jobs_per_key": 8,
        }
        return make_client(**(settings | overrides))

    return build


def create(client: TestClient, headers: dict[str, str], **request: Any) -> str:
    response = client.post("/v1/jobs", json=request or train_request(), headers=headers)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


def missing_body(client: TestClient, headers: dict[str, str], job_id: str, path: str = "", method: str = "GET") -> Any:
    """The 404 body of a job id that does not exist, with ``job_id`` in its place: what a foreign job must get."""
    fresh = uuid.uuid4().hex
    response = client.request(method, f"/v1/jobs/{fresh}{path}", headers=headers)
    assert response.status_code == 404, response.text
    return response.json() | {
        "detail": response.json()["detail"].replace(fresh, job_id),
        "instance": response.json()["instance"].replace(fresh, job_id),
    }


def assert_like_missing(
    response: httpx.Response, client: TestClient, headers: dict[str, str], job_id: str, path: str = ""
) -> None:
    assert response.status_code == 404, response.text
    assert response.headers["content-type"] == "application/problem+json"
    expected = missing_body(client, headers, job_id, path, response.request.method)
    assert response.json() == expected
    assert response.json()["detail"] == f"no job {job_id!r}"


def stored_text(r: redis.Redis) -> str:
    """Every key and value under ``posenc:``, as text, to show what Redis holds."""
    parts: list[str] = []
    for key in r.scan_iter("posenc:*"):
        kind = r.type(key)
        parts.append(str(key))
        if kind == "string":
            parts.append(str(r.get(key)))
        elif kind == "hash":
            parts += [str(field) + "=" + str(value) for field, value in r.hgetall(key).items()]
        elif kind == "list":
            parts += [str(item) for item in r.lrange(key, 0, -1)]
        elif kind == "set":
            parts += [str(item) for item in r.smembers(key)]
        elif kind == "zset":
            parts += [str(item) for item in r.zrange(key, 0, -1)]
    return " ".join(parts)


def finish_with_artifact(redis_url: str, artifact_dir: Path, job_id: str, name: str, content: bytes) -> None:
    """What a worker does: claim the job, write its file, finish with the artifact list."""
    store = JobStore(redis.Redis.from_url(redis_url, decode_responses=True), ttl_s=3600)
    claim = store.claim(job_id, worker="test-worker", lease_ttl_s=30, max_attempts=3)
    assert claim.outcome == "claimed"
    job_dir = artifact_dir / job_id
    job_dir.mkdir(parents=True)
    (job_dir / name).write_bytes(content)
    assert store.finish(job_id, claim.fence, "succeeded", result={}, artifacts=list_artifacts(job_dir))


# ----------------------------------------------------------------------------------------------- ownership
def test_another_keys_job_reads_and_cancels_like_a_missing_one(tenants: Callable[..., TestClient]) -> None:
    client = tenants()
    job_id = create(client, A)
    assert client.get(f"/v1/jobs/{job_id}", headers=A).status_code == 200

    assert_like_missing(client.get(f"/v1/jobs/{job_id}", headers=B), client, B, job_id)
    assert_like_missing(client.post(f"/v1/jobs/{job_id}/cancel", headers=B), client, B, job_id, "/cancel")
    assert client.get(f"/v1/jobs/{job_id}", headers=A).json()["status"] == "queued"  # B's cancel did nothing

    cancelled = client.post(f"/v1/jobs/{job_id}/cancel", headers=A)
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")


def test_listing_shows_a_key_only_its_own_jobs_from_its_own_index(
    tenants: Callable[..., TestClient], redis_url: str
) -> None:
    client = tenants()
    mine = {create(client, A), create(client, A)}
    theirs = {create(client, B)}
    assert {job["id"] for job in client.get("/v1/jobs", headers=A).json()["data"]} == mine
    assert {job["id"] for job in client.get("/v1/jobs", headers=B).json()["data"]} == theirs
    assert {job["id"] for job in client.get("/v1/jobs?status=queued", headers=B).json()["data"]} == theirs

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    # Each key lists from its own index; the record names its owner by a digest prefix, never the key.
    assert set(r.zrange(f"posenc:owner:{owner_of(KEY_A)}:jobs", 0, -1)) == mine
    assert set(r.zrange(f"posenc:owner:{owner_of(KEY_B)}:jobs", 0, -1)) == theirs
    for job_id in mine:
        assert r.hget(f"posenc:job:{job_id}", "owner") == owner_of(KEY_A)
    stored = stored_text(r)
    assert owner_of(KEY_A) in stored
    assert KEY_A not in stored
    assert KEY_B not in stored


def test_admin_key_sees_lists_and_cancels_every_job(tenants: Callable[..., TestClient]) -> None:
    client = tenants()
    of_a, of_b = create(client, A), create(client, B)
    own = create(client, ROOT)
    assert {job["id"] for job in client.get("/v1/jobs", headers=ROOT).json()["data"]} == {of_a, of_b, own}
    assert client.get(f"/v1/jobs/{of_b}", headers=ROOT).status_code == 200
    assert client.post(f"/v1/jobs/{of_a}/cancel", headers=ROOT).json()["status"] == "cancelled"
    assert_like_missing(client.get(f"/v1/jobs/{own}", headers=A), client, A, own)  # admin's jobs are its own


def test_idempotency_keys_are_per_api_key(tenants: Callable[..., TestClient]) -> None:
    client = tenants()
    headers_a, headers_b = A | {"Idempotency-Key": "nightly-1"}, B | {"Idempotency-Key": "nightly-1"}
    first = client.post("/v1/jobs", json=train_request(), headers=headers_a)
    assert first.status_code == 202
    of_b = client.post("/v1/jobs", json=train_request(), headers=headers_b)
    assert of_b.status_code == 202
    assert "idempotent-replayed" not in of_b.headers
    assert of_b.json()["id"] != first.json()["id"]  # B's own job, never A's

    again_a = client.post("/v1/jobs", json=train_request(), headers=headers_a)
    again_b = client.post("/v1/jobs", json=train_request(), headers=headers_b)
    assert (again_a.json()["id"], again_a.headers["idempotent-replayed"]) == (first.json()["id"], "true")
    assert (again_b.json()["id"], again_b.headers["idempotent-replayed"]) == (of_b.json()["id"], "true")


def test_another_keys_artifacts_are_404_and_a_nul_name_is_404(
    tenants: Callable[..., TestClient], redis_url: str, tmp_path: Path
) -> None:
    client = tenants()
    job_id = create(client, A)
    finish_with_artifact(redis_url, tmp_path / "artifacts", job_id, "table.csv", b"method,ppl\nrope,1.5\n")

    own = client.get(f"/v1/jobs/{job_id}/artifacts/table.csv", headers=A)
    assert (own.status_code, own.content) == (200, b"method,ppl\nrope,1.5\n")
    foreign = client.get(f"/v1/jobs/{job_id}/artifacts/table.csv", headers=B)
    assert_like_missing(foreign, client, B, job_id, "/artifacts/table.csv")
    assert client.get(f"/v1/jobs/{job_id}/artifacts/table.csv", headers=ROOT).status_code == 200

    for name in ("a%00b", "table.csv%00", "%00"):
        nul = client.get(f"/v1/jobs/{job_id}/artifacts/{name}", headers=A)
        assert nul.status_code == 404, nul.text
        assert nul.headers["content-type"] == "application/problem+json"
        assert "has no artifact" in nul.json()["detail"]


def test_an_extrapolate_job_cannot_read_another_keys_checkpoint(tenants: Callable[..., TestClient]) -> None:
    client = tenants()
    trained = create(client, A)
    request = train_request() | {"kind": "extrapolate"}
    request["spec"] = request["spec"] | {"checkpoint": trained}
    foreign = client.post("/v1/jobs", json=request, headers=B)
    assert foreign.status_code == 422, foreign.text
    missing = client.post("/v1/jobs", json=request | {"spec": request["spec"] | {"checkpoint": "nope"}}, headers=B)
    assert foreign.json()["errors"][0]["loc"] == ["body", "spec", "checkpoint"]
    assert foreign.json()["errors"][0]["msg"] == missing.json()["errors"][0]["msg"].replace("'nope'", repr(trained))
    assert client.post("/v1/jobs", json=request, headers=A).status_code == 202


# ------------------------------------------------------------------------------------------------- limits
def test_a_key_at_its_active_jobs_limit_gets_429_naming_it_even_after_a_restart(
    tenants: Callable[..., TestClient], wire: Any
) -> None:
    client = tenants(max_active_jobs_per_key=2)
    first, _ = create(client, A), create(client, A)
    limited = client.post("/v1/jobs", json=train_request(), headers=A | {"Idempotency-Key": "third"})
    problem = wire.problem(limited, 429)
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.headers["x-should-retry"] == "false"  # the SDK raises at once instead of waiting in vain
    assert "POSENC_MAX_ACTIVE_JOBS_PER_KEY" in problem["detail"]
    assert "limit of 2" in problem["detail"]
    assert (problem["limit"], problem["size"]) == (2, 2)
    assert create(client, B)  # the limit is per key

    restarted = tenants(max_active_jobs_per_key=2)  # another gateway process: the count lives in Redis
    wire.problem(restarted.post("/v1/jobs", json=train_request(), headers=A), 429)

    assert restarted.post(f"/v1/jobs/{first}/cancel", headers=A).status_code == 200
    # The refused request's Idempotency-Key was freed: the same request now creates its job.
    retried = restarted.post("/v1/jobs", json=train_request(), headers=A | {"Idempotency-Key": "third"})
    assert retried.status_code == 202, retried.text
    assert "idempotent-replayed" not in retried.headers
    wire.problem(restarted.post("/v1/jobs", json=train_request(), headers=A), 429)


def expected_cost(steps: int, batch_size: int, size: int) -> int:
    """train_request's cost in multiply-adds, worked out by hand: one method, one seed, a model of 1 layer,
    width 16, feed-forward 4x and the copy task's 24 output classes (4 specials, 20 letters), so one token at
    sequence length T costs (4 + 2·4)·16² + 2·T·16 + 24·16 = 3456 + 32·T; a copy example of size n is
    T = 2n + 3 tokens; training is 3 passes of steps x batch_size of them, and a train job evaluates samples (4)
    of them at its training size."""
    tokens = 2 * size + 3
    per_token = 3456 + 32 * tokens
    return 3 * steps * batch_size * tokens * per_token + 4 * tokens * per_token


def test_a_job_over_the_cost_cap_is_413_with_size_limit_and_setting(
    tenants: Callable[..., TestClient], make_client: Callable[..., TestClient], wire: Any, redis_url: str
) -> None:
    client = tenants()
    huge = client.post("/v1/jobs", json=train_request(steps=10_000_000, batch_size=4096, size=4096), headers=A)
    problem = wire.problem(huge, 413)
    assert problem["size"] == expected_cost(10_000_000, 4096, 4096)
    assert problem["limit"] == 10**15
    assert "POSENC_MAX_JOB_COST" in problem["detail"]
    assert str(problem["size"]) in problem["detail"]

    # The cap holds without keys too; a compute job counts 1 (its own byte budget applies).
    capped = make_client(redis_url=redis_url, max_job_cost=expected_cost(10, 2, 6))
    assert capped.post("/v1/jobs", json=train_request(steps=10)).status_code == 202
    over = wire.problem(capped.post("/v1/jobs", json=train_request(steps=11)), 413)
    assert (over["size"], over["limit"]) == (expected_cost(11, 2, 6), expected_cost(10, 2, 6))
    compute = {
        "kind": "compute",
        "spec": {"route": "bias", "request": {"method": "alibi", "num_heads": 1, "query_length": 2}},
    }
    assert make_client(redis_url=redis_url, max_job_cost=1).post("/v1/jobs", json=compute).status_code == 202


# --------------------------------------------------------------------------------------- authentication
def test_a_job_request_counts_once_against_the_per_key_rate_limit(
    tenants: Callable[..., TestClient], wire: Any
) -> None:
    client = tenants(rate_limit_per_minute=2)
    away_from_the_minute_boundary()
    job_id = create(client, A)  # the router's guard and the route's principal are one dependency, run once
    assert client.get(f"/v1/jobs/{job_id}", headers=A).status_code == 200
    wire.problem(client.get(f"/v1/jobs/{job_id}", headers=A), 429)
    assert client.get(f"/v1/jobs/{job_id}", headers=ROOT).status_code == 200  # per key


def away_from_the_minute_boundary() -> None:
    """Fixed one-minute windows: keep the whole test inside one of them."""
    if time.time() % 60 > 55:
        time.sleep(60 - time.time() % 60 + 0.1)


def blocked_response_retry_after(client: TestClient) -> str:
    """The Retry-After of a request without a key from a blocked address."""
    return client.get("/v1/jobs").headers["retry-after"]


def test_failed_authentications_are_limited_per_address(
    tenants: Callable[..., TestClient], wire: Any, redis_url: str
) -> None:
    client = tenants(auth_failures_per_minute=3)
    away_from_the_minute_boundary()
    assert client.get("/v1/methods", headers=A).status_code == 200  # a good key is no failure
    for wrong in ("guess-1", "guess-2", ""):
        wire.problem(client.get("/v1/jobs", headers={"X-API-Key": wrong} if wrong else {}), 401)
    blocked = wire.problem(client.get("/v1/jobs", headers={"X-API-Key": "guess-4"}), 429)
    assert "POSENC_AUTH_FAILURES_PER_MINUTE" in blocked["detail"]
    assert 1 <= int(blocked_response_retry_after(client)) <= 60
    # The address's failures never refuse a valid key (clients behind one proxy share an address).
    assert client.get("/v1/jobs", headers=A).status_code == 200
    # Counted in Redis: another gateway process refuses the address's bad requests too.
    wire.problem(tenants(auth_failures_per_minute=3).get("/v1/methods", headers={"X-API-Key": "guess-5"}), 429)
    counters = redis.Redis.from_url(redis_url, decode_responses=True).keys("posenc:ratelimit:authfail:*")
    assert len(counters) == 1
    metrics = generate_latest(client.app.state.metrics.registry).decode()  # type: ignore[attr-defined]
    assert 'posenc_auth_failures_total{reason="blocked"} 2.0' in metrics
    assert 'posenc_auth_failures_total{reason="invalid"} 2.0' in metrics
    assert 'posenc_auth_failures_total{reason="missing"} 1.0' in metrics


def test_metrics_and_readyz_details_need_a_key_unless_public(
    tenants: Callable[..., TestClient], wire: Any, redis_url: str
) -> None:
    client = tenants()
    assert client.get("/healthz").status_code == 200
    wire.problem(client.get("/metrics"), 401)
    wire.problem(client.get("/metrics", headers={"X-API-Key": "wrong"}), 401)
    assert "posenc_http_requests_total" in client.get("/metrics", headers=B).text

    not_ready = wire.problem(client.get("/readyz"), 503)  # no worker yet: the status code, no details
    assert "workers" not in not_ready["detail"]
    assert "workers: none alive" in wire.problem(client.get("/readyz", headers=A), 503)["detail"]

    store = JobStore(redis.Redis.from_url(redis_url, decode_responses=True), ttl_s=3600)
    store.beat_worker("celery@secret-host-7", ["cpu"], ttl_s=60)  # the heartbeat a live worker writes
    bare = client.get("/readyz")
    assert (bare.status_code, bare.json()) == (200, {"status": "ready"})
    assert "secret-host-7" not in bare.text
    detailed = client.get("/readyz", headers=A)
    assert detailed.json()["workers"] == [{"hostname": "celery@secret-host-7", "queues": ["cpu"]}]
    wire.problem(client.get("/readyz", headers={"X-API-Key": "wrong"}), 401)

    public = tenants(public_health=True)
    assert public.get("/metrics").status_code == 200
    assert public.get("/readyz").json()["workers"][0]["hostname"] == "celery@secret-host-7"
    wire.problem(public.get("/v1/jobs"), 401)  # only health opens up


def test_without_keys_the_service_stays_single_tenant(make_client: Callable[..., TestClient], redis_url: str) -> None:
    client = make_client(redis_url=redis_url, max_active_jobs_per_key=1)
    ids = {create(client, {}), create(client, {})}  # no per-key limit without keys
    assert {job["id"] for job in client.get("/v1/jobs").json()["data"]} == ids
    assert client.get("/metrics").status_code == 200
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    assert {r.hget(f"posenc:job:{job_id}", "owner") for job_id in ids} == {"anonymous"}


# ------------------------------------------------------------------------------------ no internal address
def test_redis_down_503_does_not_show_the_redis_address(make_client: Callable[..., TestClient], wire: Any) -> None:
    port = runtime.free_port()  # nothing listens there
    client = make_client(redis_url=f"redis://127.0.0.1:{port}/0")
    answers = [
        client.post("/v1/jobs", json=train_request()),
        client.get("/v1/jobs"),
        client.get(f"/v1/jobs/{uuid.uuid4().hex}"),
        client.get("/readyz"),
    ]
    for response in answers:
        problem = wire.problem(response, 503)
        assert response.headers["retry-after"] == "5"
        assert str(port) not in response.text
        assert "127.0.0.1" not in response.text
        assert "redis" in problem["detail"].lower()
