"""POST /v1/rope/serve_check through the real app: a report, a refusal over a budget naming the fields that drive
it, and an invalid size naming its field."""

from __future__ import annotations

from collections.abc import Callable

from starlette.testclient import TestClient


def test_serve_check_reports_exact_correct_schedules_and_catches_dynamic_ntk(client: TestClient) -> None:
    setup = {
        "method": "rope_dynamic_ntk",
        "params": {"factor": 2.0, "original_max_position_embeddings": 12},
        "rotary_dim": 16,
    }
    body = {"setup": setup, "heads": 2, "length": 24, "chunk_sizes": [8], "prefill": 6, "sinks": 2, "window": 6}
    response = client.post("/v1/rope/serve_check", json=body)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["setup"]["length_dependent"] is True
    assert report["summary"]["correct_exact"] is True
    variants = {variant["label"]: variant for variant in report["variants"]}
    for variant in variants.values():
        if variant["schedule"] == "correct":
            assert (variant["max_error"], variant["first_wrong"]) == (0.0, None), variant
    # the first decode step past original_max_position_embeddings = 12: query 12, key 1 (key 0 is at angle 0)
    assert variants["stale_cached_keys_decode[prefill=6]"]["first_wrong"] == {"sequence": 0, "query": 12, "key": 1}
    # chunk [8, 16) is the first after another whose length (16) passes 12: its first query, key 1
    assert variants["stale_cached_keys[chunk=8]"]["first_wrong"] == {"sequence": 0, "query": 8, "key": 1}
    assert "stale_cached_keys[chunk=8]" in report["summary"]["sensitive_to"]
    # transformers' padded batch (24 and 12 tokens by default) is rotated for its longest row: the 12-token row,
    # unscaled alone, is not its own recomputation
    batch = variants["transformers_left_padded_batch"]
    assert batch["schedule"] == "transformers"
    assert batch["sequence_errors"][0] == 0.0
    assert batch["sequence_errors"][1] > 0.0
    assert batch["first_wrong"] == {"sequence": 1, "query": 1, "key": 0}
    # the default requests (24, then 12): 12 is not below original_max_position_embeddings, so transformers'
    # dynamic state keeps the 24-token frequencies for it
    requests = variants["transformers_requests"]
    assert requests["sequence_errors"][0] == 0.0
    assert requests["first_wrong"] == {"sequence": 1, "query": 1, "key": 0}
    assert {"transformers_left_padded_batch", "transformers_requests"} <= set(report["summary"]["transformers_differs"])


def test_serve_check_over_the_work_budget_is_a_413_naming_the_fields(make_client: Callable[..., TestClient]) -> None:
    client = make_client(max_request_work=50_000_000)
    body = {"setup": {"method": "alibi", "rotary_dim": 64}, "length": 512}
    response = client.post("/v1/rope/serve_check", json=body)
    assert response.status_code == 413, response.text
    problem = response.json()
    assert "max_request_work" in problem["detail"], problem
    drivers = [error["loc"] for error in problem["errors"]]
    assert ["body", "length"] in drivers, drivers
    assert ["body", "setup", "rotary_dim"] in drivers, drivers


def test_serve_check_refuses_a_chunk_longer_than_the_sequence_naming_it(client: TestClient) -> None:
    body = {"setup": {"method": "rope", "rotary_dim": 16}, "length": 16, "chunk_sizes": [4, 32]}
    response = client.post("/v1/rope/serve_check", json=body)
    assert response.status_code == 422, response.text
    assert ["body", "chunk_sizes", 1] in [error["loc"] for error in response.json()["errors"]], response.json()
    nope = client.post("/v1/rope/serve_check", json={"setup": {"method": "fox"}, "length": 8})
    assert nope.status_code == 422, nope.text
    assert ["body", "setup", "method"] in [error["loc"] for error in nope.json()["errors"]], nope.json()
