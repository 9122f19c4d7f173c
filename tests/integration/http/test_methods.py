"""GET /v1/methods and /v1/methods/{name}: the catalogue as the registry has it."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from posenc.pe import MethodSpec, list_methods
from posenc.schemas.methods import Kind, MethodInfo


def test_lists_every_registered_method(client: TestClient) -> None:
    response = client.get("/v1/methods")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == len(body["data"]) == len(list_methods())
    assert [item["name"] for item in body["data"]] == [spec.name for spec in list_methods()]
    for item in body["data"]:
        MethodInfo.model_validate(item)
        assert item["params_schema"]["type"] == "object"


@pytest.mark.parametrize("kind", [Kind.ABSOLUTE, Kind.BIAS, Kind.ROTARY])
def test_filters_by_kind(client: TestClient, kind: Kind) -> None:
    body = client.get("/v1/methods", params={"kind": kind.value}).json()
    assert {item["name"] for item in body["data"]} == {spec.name for spec in list_methods(kind)}
    assert all(item["kind"] == kind.value for item in body["data"])
    assert body["count"] >= 1


@pytest.mark.parametrize("spec", list_methods(), ids=lambda spec: spec.name)
def test_retrieves_each_method_with_defaults(client: TestClient, spec: MethodSpec) -> None:
    response = client.get(f"/v1/methods/{spec.name}")
    assert response.status_code == 200
    assert response.json() == spec.info().model_dump(mode="json")


def test_unknown_method_is_404(client: TestClient, wire: Any) -> None:
    problem = wire.problem(client.get("/v1/methods/no_such_method"), 404)
    assert "no_such_method" in problem["detail"]


def test_unknown_kind_is_422(client: TestClient, wire: Any) -> None:
    problem = wire.problem(client.get("/v1/methods", params={"kind": "banana"}), 422)
    assert ["query", "kind"] in wire.locs(problem)


def test_lists_every_task_with_the_unit_its_family_reads_and_the_suites(client: TestClient) -> None:
    from posenc.schemas.jobs import JobSpec
    from posenc.tasks import family_of, known_tasks
    from posenc.tasks.suites import SUITES

    response = client.get("/v1/tasks")
    assert response.status_code == 200, response.text
    body = response.json()
    listed = {item["task"]: item for item in body["tasks"]}
    assert set(listed) == {*known_tasks(), "(data.corpus)"}
    for task, item in listed.items():
        data = {"corpus": "stdlib"} if task.startswith("(") else {"task": task}
        family = family_of(JobSpec.model_validate({"methods": [{"method": "nope"}], "data": data}))
        assert (item["family"], item["unit"], item["metric"]) == (family.name, family.unit, family.metric)
        assert item["train_field"] == ".".join(map(str, family.train_field))
    assert [suite["name"] for suite in body["suites"]] == list(SUITES)
    # a suite's task is a listed task, or text on a named corpus ("text (stdlib)": the text family's only task)
    assert all(
        task in listed or (task.startswith("text (") and "(data.corpus)" in listed)
        for suite in body["suites"]
        for task in suite["tasks"]
    )


def test_lists_the_layer_patterns_and_jobs_take_them_by_name_or_written_out(
    make_client: Any, redis_url: str, wire: Any
) -> None:
    """Each named pattern is listed with its unit; a job naming it is accepted (202), and so is the listed unit
    written out as ``layers``; an unknown name and a unit a method cannot honour are 422s naming the field."""
    from posenc.patterns import PATTERNS

    client = make_client(redis_url=redis_url)

    listed = client.get("/v1/tasks").json()["patterns"]
    assert [pattern["name"] for pattern in listed] == list(PATTERNS)

    def job(entry: dict[str, Any]) -> dict[str, Any]:
        return {
            "kind": "benchmark",
            "spec": {
                "methods": [entry],
                "data": {"task": "copy", "size": 6},
                "model": {"layers": 6, "dim": 32, "heads": 2},
                "train": {"steps": 2, "batch_size": 2},
            },
        }

    for pattern in listed:
        named = client.post("/v1/jobs", json=job({"method": "rope", "pattern": pattern["name"]}))
        assert named.status_code == 202, named.text
        written = client.post("/v1/jobs", json=job({"method": "rope", "layers": pattern["unit"]}))
        assert written.status_code == 202, (pattern["name"], written.text)
    unknown = wire.problem(client.post("/v1/jobs", json=job({"method": "rope", "pattern": "llama5"})), 422)
    assert ["body", "spec", "methods", 0, "pattern"] in wire.locs(unknown)
    alibi = job({"method": "alibi", "layers": [{}, {"rotary_fraction": 0.5}]})
    refused = wire.problem(client.post("/v1/jobs", json=alibi), 422)
    assert ["body", "spec", "methods", 0, "layers", 1, "rotary_fraction"] in wire.locs(refused)
    # a real model's config (a preset's name, or the config itself) gives a tiny model its per-layer setup
    for config in ("gemma-3-4b", "llama-3.1-8b", {"model_type": "llama", "num_hidden_layers": 4,
                                                   "num_attention_heads": 4, "hidden_size": 256}):  # fmt: skip
        accepted = client.post("/v1/jobs", json=job({"config": config}))
        assert accepted.status_code == 202, accepted.text
    typo = wire.problem(client.post("/v1/jobs", json=job({"config": "gemma-3"})), 422)
    assert ["body", "spec", "methods", 0, "config"] in wire.locs(typo)
    assert "gemma-3-4b" in typo["detail"]
    broken = {"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 256, "rope_theta": -1}
    bad_key = wire.problem(client.post("/v1/jobs", json=job({"config": broken})), 422)
    assert ["body", "spec", "methods", 0, "config", "rope_theta"] in wire.locs(bad_key)
    both = wire.problem(client.post("/v1/jobs", json=job({"config": "gemma-3-4b", "method": "rope"})), 422)
    assert "give no method" in both["detail"]
