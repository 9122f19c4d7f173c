"""Every error class, each answered as application/problem+json with the field or limit it is about."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

ALIBI = {"method": "alibi", "num_heads": 2, "query_length": 4}
Q = {"random": {"shape": [1, 2, 4, 8]}}


# ----------------------------------------------------------------------------------------------- 404, 405
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/bias", ALIBI | {"method": "no_such"}),
        ("/v1/rotary", {"method": "no_such", "q": Q, "k": Q}),
        ("/v1/encodings", {"method": "no_such", "length": 4, "dim": 8}),
        ("/v1/attention", {"method": "no_such", "q": Q, "k": Q}),
    ],
)
def test_unknown_method_is_404(client: TestClient, wire: Any, path: str, body: dict[str, Any]) -> None:
    problem = wire.problem(client.post(path, json=body), 404)
    assert "no_such" in problem["detail"]
    assert problem["instance"] == path


def test_a_misspelt_method_is_a_404_naming_the_close_ones(client: TestClient, wire: Any) -> None:
    problem = wire.problem(client.post("/v1/bias", json={"method": "alibbi", "num_heads": 2, "query_length": 4}), 404)
    assert "did you mean 'alibi'" in problem["detail"]
    far = wire.problem(client.post("/v1/bias", json={"method": "qqqqqq", "num_heads": 2, "query_length": 4}), 404)
    assert "did you mean" not in far["detail"]


def test_unknown_route_is_404(client: TestClient, wire: Any) -> None:
    wire.problem(client.get("/v1/nothing-here"), 404)


def test_wrong_verb_is_405_with_allow(client: TestClient, wire: Any) -> None:
    response = client.get("/v1/bias")
    wire.problem(response, 405)
    assert response.headers["allow"] == "POST"


# ---------------------------------------------------------------------------------------------------- 413
def test_output_over_budget_points_to_the_toeplitz_form(make_client: Any, wire: Any) -> None:
    client = make_client(max_output_bytes=1_000_000)
    request = {"method": "alibi", "num_heads": 8, "query_length": 4096}
    problem = wire.problem(client.post("/v1/bias", json=request), 413)
    assert problem["size"] >= 8 * 4096 * 4096 * 4
    assert problem["limit"] == 1_000_000
    assert "form='toeplitz'" in problem["detail"]
    assert "/v1/jobs" in problem["detail"]
    # ... and the way round it works
    toeplitz = client.post("/v1/bias", json=request | {"form": "toeplitz"}, headers={"Accept": "application/x-npy"})
    assert toeplitz.status_code == 200


def test_attention_over_budget_counts_the_scores_workspace(make_client: Any, wire: Any) -> None:
    client = make_client(max_output_bytes=4 * 1 * 2 * 64 * 64 * 2)  # weights alone would fit
    q = {"random": {"shape": [1, 2, 64, 8]}}
    problem = wire.problem(client.post("/v1/attention", json={"method": "rope", "q": q, "k": q}), 413)
    assert problem["size"] > problem["limit"]
    assert "toeplitz" not in problem["detail"]


def test_json_over_its_element_cap_points_to_binary_types(make_client: Any, wire: Any) -> None:
    client = make_client(max_json_elements=100)
    problem = wire.problem(client.post("/v1/bias", json=ALIBI | {"query_length": 8}), 413)
    assert problem["size"] == 2 * 8 * 8
    assert problem["limit"] == 100
    assert "application/octet-stream" in problem["detail"]
    binary = client.post("/v1/bias", json=ALIBI | {"query_length": 8}, headers={"Accept": "application/octet-stream"})
    assert binary.status_code == 200


def test_inputs_over_budget_before_decoding(make_client: Any, wire: Any) -> None:
    client = make_client(max_input_elements=1000)
    q = {"random": {"shape": [1, 2, 100, 8]}}  # 1600 elements, never generated
    problem = wire.problem(client.post("/v1/rotary", json={"method": "rope", "q": q, "k": q}), 413)
    assert problem["size"] == 3200
    assert problem["limit"] == 1000


def test_body_over_the_cap(make_client: Any, wire: Any) -> None:
    client = make_client(max_body_bytes=2000)
    data = [0.5] * 1024
    q = {"dtype": "float32", "shape": [1, 1, 128, 8], "data": data}
    problem = wire.problem(client.post("/v1/rotary", json={"method": "rope", "q": q, "rotate": "query"}), 413)
    assert problem["limit"] == 2000

    def chunks() -> Any:  # no Content-Length: counted while it arrives
        yield b'{"method": "rope", "q": '
        yield b" " * 4000

    problem = wire.problem(
        client.post("/v1/rotary", content=chunks(), headers={"Content-Type": "application/json"}), 413
    )
    assert problem["limit"] == 2000


# ---------------------------------------------------------------------------------------------------- 422
def test_missing_field_is_a_fastapi_validation_error(client: TestClient, wire: Any) -> None:
    problem = wire.problem(client.post("/v1/bias", json={"method": "alibi"}), 422)
    assert ["body", "num_heads"] in wire.locs(problem)
    # with num_heads, the missing layout (query_length, grid or graph) is named at the body
    problem = wire.problem(client.post("/v1/bias", json={"method": "alibi", "num_heads": 2}), 422)
    assert wire.locs(problem) == [["body"]]
    assert "give exactly one of 'query_length' (1D), 'grid' (2D/3D) or 'graph'" in problem["detail"]


def test_bad_json_body_is_400(client: TestClient, wire: Any) -> None:
    """Not JSON at all is a malformed request (400); tests/integration/http/test_problem_documents.py has the rest."""
    response = client.post("/v1/rotary", content=b"{not json", headers={"Content-Type": "application/json"})
    problem = wire.problem(response, 400)
    assert problem["errors"][0]["loc"] == ["body"]


def test_unknown_param_names_the_key(client: TestClient, wire: Any) -> None:
    problem = wire.problem(client.post("/v1/bias", json=ALIBI | {"params": {"slope": 1}}), 422)
    assert wire.locs(problem) == [["body", "params", "slope"]]
    assert "max_bias" in problem["errors"][0]["msg"]  # says which ones exist


def test_bad_param_value_names_the_field(client: TestClient, wire: Any) -> None:
    request = {
        "method": "rope_yarn",
        "q": Q,
        "k": Q,
        "params": {"factor": 0.5, "original_max_position_embeddings": 4},
    }
    problem = wire.problem(client.post("/v1/rotary", json=request), 422)
    assert wire.locs(problem) == [["body", "params", "factor"]]


def test_missing_required_param(client: TestClient, wire: Any) -> None:
    problem = wire.problem(client.post("/v1/rotary", json={"method": "rope_linear", "q": Q, "k": Q}), 422)
    assert wire.locs(problem) == [["body", "params", "factor"]]


def test_q_must_be_four_dimensional(client: TestClient, wire: Any) -> None:
    q = {"random": {"shape": [2, 4, 8]}}
    problem = wire.problem(client.post("/v1/rotary", json={"method": "rope", "q": q, "k": q}), 422)
    assert wire.locs(problem) == [["body", "q", "shape"]]
    assert "(B, H, N, D)" in problem["detail"]


def test_odd_head_dim_names_the_rule(client: TestClient, wire: Any) -> None:
    q = {"random": {"shape": [1, 1, 4, 7]}}
    for path in ("/v1/rotary", "/v1/attention"):
        problem = wire.problem(client.post(path, json={"method": "rope", "q": q, "k": q}), 422)
        assert wire.locs(problem) == [["body", "q", "shape"]]
        assert "even" in problem["detail"]


def test_odd_rotary_dim(client: TestClient, wire: Any) -> None:
    request = {"method": "rope", "q": Q, "rotate": "query", "rotary_dim": 5}
    problem = wire.problem(client.post("/v1/rotary", json=request), 422)
    assert wire.locs(problem) == [["body", "rotary_dim"]]


def test_k_is_required_when_both_are_rotated(client: TestClient, wire: Any) -> None:
    problem = wire.problem(client.post("/v1/rotary", json={"method": "rope", "q": Q}), 422)
    assert wire.locs(problem) == [["body", "k"]]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_inputs_are_422(client: TestClient, wire: Any, value: str) -> None:
    data: list[Any] = [0.0] * 32
    data[3] = value
    q = {"dtype": "float32", "shape": [1, 1, 4, 8], "data": data}
    problem = wire.problem(client.post("/v1/rotary", json={"method": "rope", "q": q, "rotate": "query"}), 422)
    assert wire.locs(problem) == [["body", "q", "data"]]


def test_wrong_kind_of_method_is_422(client: TestClient, wire: Any) -> None:
    problem = wire.problem(client.post("/v1/bias", json=ALIBI | {"method": "rope"}), 422)
    assert wire.locs(problem) == [["body", "method"]]


def test_unsupported_content_type_is_415(client: TestClient, wire: Any) -> None:
    wire.problem(client.post("/v1/rotary", content=b"q=1", headers={"Content-Type": "text/plain"}), 415)


# ---------------------------------------------------------------------------------------------------- 503
def test_saturated_compute_is_503_with_retry_after(make_client: Any, wire: Any) -> None:
    client = make_client(compute_concurrency=1, compute_wait_s=0.2)
    slots = client.app.state.compute_slots  # type: ignore[attr-defined]
    assert slots.try_acquire()  # a long computation holds the only slot
    try:
        response = client.post("/v1/bias", json=ALIBI)
        problem = wire.problem(response, 503)
        assert response.headers["retry-after"] == "1"
        assert "busy" in problem["detail"]
    finally:
        slots.release()
    assert client.post("/v1/bias", json=ALIBI).status_code == 200  # free again


def test_concurrent_requests_queue_within_the_wait(make_client: Any) -> None:
    """Requests that find the slot busy but get it within compute_wait_s are served, not refused."""
    client = make_client(compute_concurrency=1, compute_wait_s=5.0)
    slots = client.app.state.compute_slots  # type: ignore[attr-defined]
    assert slots.try_acquire()
    threading.Timer(0.3, slots.release).start()
    assert client.post("/v1/bias", json=ALIBI).status_code == 200


# ----------------------------------------------------------------------------------------------- 401, 429
def test_api_key_required_when_configured(make_client: Any, wire: Any) -> None:
    client = make_client(api_keys=["secret-one", "secret-two"])
    missing = client.get("/v1/methods")
    wire.problem(missing, 401)
    assert missing.headers["www-authenticate"] == "APIKey"
    wire.problem(client.get("/v1/methods", headers={"X-API-Key": "wrong"}), 401)
    wire.problem(client.post("/v1/bias", json=ALIBI), 401)
    assert client.get("/v1/methods", headers={"X-API-Key": "secret-two"}).status_code == 200
    assert client.get("/healthz").status_code == 200  # liveness needs no key


def test_rate_limit_per_key_in_memory(make_client: Any, wire: Any) -> None:
    client = make_client(api_keys=["a", "b"], rate_limit_per_minute=3)
    if time.time() % 60 > 55:  # fixed one-minute windows: stay inside one
        time.sleep(60 - time.time() % 60 + 0.1)
    for _ in range(3):
        assert client.get("/v1/methods", headers={"X-API-Key": "a"}).status_code == 200
    limited = client.get("/v1/methods", headers={"X-API-Key": "a"})
    wire.problem(limited, 429)
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert client.get("/v1/methods", headers={"X-API-Key": "b"}).status_code == 200  # per key


@pytest.mark.parametrize("path", ["/v1/rotary", "/v1/attention"])
def test_a_rotated_width_the_user_did_not_send_is_blamed_on_q_s_shape(client: TestClient, wire: Any, path: str) -> None:
    """rope_2d_axial needs a rotated width divisible by 4; with no rotary_dim it is q's head dim (6 here)."""
    q = {"random": {"shape": [1, 1, 4, 6], "seed": 0}}
    problem = wire.problem(client.post(path, json={"method": "rope_2d_axial", "q": q, "k": q, "grid": [2, 2]}), 422)
    assert wire.locs(problem) == [["body", "q", "shape"]]
    assert "D = 6" in problem["detail"]
    if path == "/v1/rotary":  # sent, it is blamed on itself
        sent = {"method": "rope_2d_axial", "q": q, "k": q, "grid": [2, 2], "rotary_dim": 6}
        assert wire.locs(wire.problem(client.post(path, json=sent), 422)) == [["body", "rotary_dim"]]
