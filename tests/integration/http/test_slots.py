"""No route does its work outside a compute slot: with every slot held, every POST route of the OpenAPI document
answers 503 (Retry-After) instead of working, while ``/healthz`` and the catalogue still answer at once; with the
slots free again the same requests succeed. A POST route without a request example fails the test, so a new route
is checked too."""

from __future__ import annotations

import time
from typing import Any

from starlette.testclient import TestClient

from service.examples import BODIES as EXAMPLES

# the OpenAPI document's request examples (service/examples.py): one valid body per POST route
BODIES: dict[str, dict[str, Any]] = {path: body for (method, path), body in EXAMPLES.items() if method == "post"}
NEEDS_REDIS = {"/v1/jobs"}  # with the slots free it goes on to the job store, which this app has none of


def test_every_post_route_waits_for_a_slot_while_health_answers(make_client: Any) -> None:
    client: TestClient = make_client(compute_concurrency=2, compute_wait_s=0.3)
    posts = sorted(
        path
        for path, operations in client.get("/openapi.json").json()["paths"].items()
        if "post" in operations and "{" not in path
    )
    assert set(posts) <= set(BODIES), f"POST routes with no body to test: {sorted(set(posts) - set(BODIES))}"
    assert {"/v1/bias", "/v1/models/resolve", "/v1/rope/compare", "/v1/jobs"} <= set(posts)

    slots = client.app.state.compute_slots  # type: ignore[attr-defined]
    held = [slots.try_acquire() for _ in range(slots.capacity)]
    assert all(held)
    try:
        for path in posts:
            started = time.perf_counter()
            response = client.post(path, json=BODIES[path])
            assert response.status_code == 503, f"{path} answered {response.status_code} with every slot held"
            assert int(response.headers["retry-after"]) >= 1
            assert time.perf_counter() - started < 2.0
            for probe in ("/healthz", "/v1/methods"):
                started = time.perf_counter()
                assert client.get(probe).status_code == 200
                assert time.perf_counter() - started < 1.0, probe
    finally:
        for _ in held:
            slots.release()

    for path in posts:
        response = client.post(path, json=BODIES[path])
        if path in NEEDS_REDIS:
            assert "compute slots" not in response.text, response.text
        else:
            assert response.status_code == 200, f"{path}: {response.text[:500]}"
