"""Health, metrics, OpenAPI and CORS of the real app."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from service.main import create_app

TENSOR_ROUTES = ("/v1/bias", "/v1/rotary", "/v1/encodings", "/v1/attention")
TENSOR_TYPES = {
    "application/json",
    "application/octet-stream",
    "application/vnd.safetensors",
    "application/x-npy",
}


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_metrics_count_requests_by_route_and_status(client: TestClient) -> None:
    client.get("/v1/methods/alibi")
    client.get("/v1/methods/nope_not_here")
    client.post("/v1/bias", json={"method": "alibi", "num_heads": 1, "query_length": 2})
    text = client.get("/metrics").text
    assert 'posenc_http_requests_total{method="GET",route="/v1/methods/{name}",status="200"} 1.0' in text
    assert 'posenc_http_requests_total{method="GET",route="/v1/methods/{name}",status="404"} 1.0' in text
    assert 'posenc_http_requests_total{method="POST",route="/v1/bias",status="200"} 1.0' in text
    assert 'posenc_http_request_duration_seconds_count{method="POST",route="/v1/bias"} 1.0' in text
    assert "posenc_compute_slots_in_use 0.0" in text
    assert "posenc_compute_slots_capacity 2.0" in text


def test_metrics_see_held_and_refused_slots(make_client: Any) -> None:
    client = make_client(compute_concurrency=1, compute_wait_s=0)
    slots = client.app.state.compute_slots  # type: ignore[attr-defined]
    assert slots.try_acquire()
    try:
        assert client.post("/v1/bias", json={"method": "alibi", "num_heads": 1, "query_length": 2}).status_code == 503
        text = client.get("/metrics").text
    finally:
        slots.release()
    assert "posenc_compute_slots_in_use 1.0" in text
    assert "posenc_compute_slots_rejected_total 1.0" in text


def test_docs_and_openapi(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    schema = client.get("/openapi.json").json()
    operation_ids = {op["operationId"] for path in schema["paths"].values() for op in path.values()}
    assert {
        "methods-list",
        "methods-retrieve",
        "compute-bias",
        "compute-rotary",
        "compute-encodings",
        "compute-attention",
        "health-healthz",
    } <= operation_ids
    for route in TENSOR_ROUTES:
        responses = schema["paths"][route]["post"]["responses"]
        assert set(responses["200"]["content"]) == TENSOR_TYPES, route
        assert "X-Tensor-Shape" in responses["200"]["headers"]
        for status in ("404", "406", "413", "422", "503"):
            assert set(responses[status]["content"]) == {"application/problem+json"}, (route, status)


def test_openapi_documents_binary_request_bodies(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    for route, model in (("/v1/rotary", "RotaryRequest"), ("/v1/attention", "AttentionRequest")):
        content = schema["paths"][route]["post"]["requestBody"]["content"]
        assert content["application/json"]["schema"] == {"$ref": f"#/components/schemas/{model}"}
        assert "__metadata__" in content["application/vnd.safetensors"]["description"]
        assert model in schema["components"]["schemas"]
    for ref_target in ("TensorData", "RandomTensor"):
        assert ref_target in schema["components"]["schemas"]


def test_cors_exposes_the_tensor_headers(make_client: Any) -> None:
    client = make_client(cors_origins=["https://notebook.example"])
    response = client.post(
        "/v1/bias",
        json={"method": "alibi", "num_heads": 1, "query_length": 2},
        headers={"Origin": "https://notebook.example", "Accept": "application/octet-stream"},
    )
    assert response.headers["access-control-allow-origin"] == "https://notebook.example"
    exposed = {h.strip().lower() for h in response.headers["access-control-expose-headers"].split(",")}
    assert {
        "x-tensor-shape",
        "x-tensor-dtype",
        "x-posenc-meta",
        "x-posenc-tensors",
        "location",
        "retry-after",
    } <= exposed
    preflight = client.options(
        "/v1/bias",
        headers={
            "Origin": "https://notebook.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "X-API-Key, Content-Type",
        },
    )
    assert preflight.status_code == 200


def test_no_cors_headers_without_origins(client: TestClient) -> None:
    response = client.get("/healthz", headers={"Origin": "https://elsewhere.example"})
    assert "access-control-allow-origin" not in response.headers


def test_compute_threads_come_back_when_the_app_starts_again(isolated_settings: Any) -> None:
    """Shutdown stops the compute threads; an app whose lifespan runs again (a test client reopened, a server
    restarted in process) computes again rather than failing on a stopped pool."""
    app = create_app(settings=isolated_settings())
    for _ in range(2):
        with TestClient(app) as client:
            assert (
                client.post("/v1/bias", json={"method": "alibi", "num_heads": 1, "query_length": 2}).status_code == 200
            )


def test_compute_runs_on_its_own_threads_and_tiny_work_inline() -> None:
    """Work goes to one of ``capacity`` compute threads; ``inline`` work runs on the event loop's thread; waiters
    get a freed slot first come, first served, and one that waits past ``wait_s`` is refused."""
    import asyncio
    import threading

    from service.errors import ProblemError
    from service.limits import ComputeSlots

    slots = ComputeSlots(1, 0.5)

    async def scenario() -> None:
        loop_thread = threading.current_thread().name
        assert (await slots.run(lambda: threading.current_thread().name)).startswith("posenc-compute")
        assert await slots.run(lambda: threading.current_thread().name, inline=True) == loop_thread
        assert slots.try_acquire()  # another request holds the only slot
        order: list[int] = []

        async def waiter(index: int) -> None:
            await slots.run(lambda: order.append(index))

        waiters = [asyncio.create_task(waiter(index)) for index in range(3)]
        await asyncio.sleep(0.05)
        slots.release()
        await asyncio.gather(*waiters)
        assert order == [0, 1, 2]
        assert slots.try_acquire()
        try:
            with pytest.raises(ProblemError) as refused:
                await slots.run(lambda: None)
            assert refused.value.status == 503
        finally:
            slots.release()

    try:
        asyncio.run(scenario())
    finally:
        slots.close()
