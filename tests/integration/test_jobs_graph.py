"""A graph benchmark through the job API: a real worker trains graph transformers at one graph size and
evaluates them at several; rows carry `num_nodes`, and graph methods are compared with `nope` in one job."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration


def test_a_graph_benchmark_reports_accuracy_by_graph_size(start_gateway: Any, start_worker: Any, jobs: Any) -> None:
    spec = {
        "methods": [{"method": "graphormer"}, {"method": "laplacian_pe"}, {"method": "nope"}],
        "data": {"task": "graph_distance", "num_nodes": 6, "max_distance": 3, "graph_family": "er"},
        "model": {"layers": 1, "dim": 16, "heads": 2},
        "train": {"steps": 8, "batch_size": 8, "warmup_steps": 2, "checkpoint_every": 4},
        "eval": {"num_nodes": [5, 6, 9], "samples": 16},
        "seeds": [0, 1],
        "device": "cpu",
    }
    gateway = start_gateway()
    start_worker()
    with gateway.client() as client:
        created = client.post("/v1/jobs", json={"kind": "benchmark", "spec": spec})
        assert created.status_code == 202, created.text
        done = jobs.wait(client, created.json()["id"], jobs.is_terminal)
        assert done["status"] == "succeeded", done
        result = done["result"]
        assert (result["data"]["sizes"], result["data"]["train_size"], result["data"]["unit"]) == (
            [5, 6, 9],
            6,
            "nodes",
        )
        rows = result["table"]
        assert {(row["method"], row["seed"], row["size"]) for row in rows} == {
            (method, seed, nodes)
            for method in ("graphormer", "laplacian_pe", "nope")
            for seed in (0, 1)
            for nodes in (5, 6, 9)
        }
        assert all(row["metric"] == "accuracy" and 0.0 <= row["value"] <= 1.0 for row in rows)
        plot = client.get(f"/v1/jobs/{done['id']}/artifacts/plot.png")
        assert plot.status_code == 200
        assert plot.content[:8] == b"\x89PNG\r\n\x1a\n"

        # a train job of one graph method keeps its model and reports the in-distribution accuracy
        one = {**spec, "methods": [{"method": "graphormer"}], "seeds": [0]}
        created = client.post("/v1/jobs", json={"kind": "train", "spec": one})
        assert created.status_code == 202, created.text
        trained = jobs.wait(client, created.json()["id"], jobs.is_terminal)
        assert trained["status"] == "succeeded", trained
        assert trained["result"]["data"]["train_size"] == 6
        assert 0.0 <= trained["result"]["in_distribution"]["accuracy"] <= 1.0
        assert "model.safetensors" in trained["result"]["artifacts"]


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"methods": [{"method": "alibi_2d"}]}, ["body", "spec", "methods", 0, "method"]),
        ({"methods": [{"method": "fox"}]}, ["body", "spec", "methods", 0, "method"]),
        ({"eval": {"lengths": [8]}}, ["body", "spec", "eval", "lengths"]),
        ({"eval": {"num_nodes": [2]}}, ["body", "spec", "eval", "num_nodes", 0]),
        ({"data": {"task": "graph_distance", "num_nodes": 300}}, ["body", "spec", "data", "num_nodes"]),
        ({"data": {"task": "copy", "num_nodes": 8}}, ["body", "spec", "data", "num_nodes"]),
    ],
)
def test_bad_graph_specs_are_422_naming_the_field(
    start_gateway: Any, change: dict[str, Any], loc: list[str | int]
) -> None:
    spec = {"methods": [{"method": "graphormer"}], "data": {"task": "graph_distance"}, **change}
    gateway = start_gateway()
    with gateway.client() as client:
        refused = client.post("/v1/jobs", json={"kind": "benchmark", "spec": spec})
        assert refused.status_code == 422, refused.text
        assert loc in [error["loc"] for error in refused.json()["errors"]], refused.json()
