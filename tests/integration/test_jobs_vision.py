"""An image benchmark through the job API: a real worker trains tiny ViTs at one resolution and evaluates them at
several; the result carries `resolution` rows and an accuracy-against-resolution plot."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration


def test_an_image_benchmark_reports_accuracy_by_resolution(start_gateway: Any, start_worker: Any, jobs: Any) -> None:
    spec = {
        "methods": [{"method": "vit_learned", "params": {"kernel": "bicubic"}}, {"method": "rope_2d_axial"}],
        "data": {"task": "quadrant", "image_size": 16, "patch_size": 4},
        "model": {"layers": 1, "dim": 16, "heads": 2},
        "train": {"steps": 12, "batch_size": 8, "warmup_steps": 2, "checkpoint_every": 6},
        "eval": {"resolutions": [8, 16, 24], "samples": 12},
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
        assert (result["data"]["sizes"], result["data"]["unit"]) == ([8, 16, 24], "pixels")
        rows = result["table"]
        assert {(row["method"], row["seed"], row["size"]) for row in rows} == {
            (method, seed, resolution)
            for method in ("vit_learned", "rope_2d_axial")
            for seed in (0, 1)
            for resolution in (8, 16, 24)
        }
        assert all(row["metric"] == "accuracy" and 0.0 <= row["value"] <= 1.0 for row in rows)
        summary = {(row["method"], row["size"]): row for row in result["summary"]}
        assert summary[("vit_learned", 16)]["seeds"] == 2
        plot = client.get(f"/v1/jobs/{done['id']}/artifacts/plot.png")
        assert plot.status_code == 200
        assert plot.content[:8] == b"\x89PNG\r\n\x1a\n"

        # a grid method on a text job, and a resolution that is not whole patches, are 422s naming the field
        text = {"methods": [{"method": "rope_2d_axial"}], "data": {"task": "copy"}}
        refused = client.post("/v1/jobs", json={"kind": "train", "spec": text})
        assert refused.status_code == 422
        assert ["body", "spec", "methods", 0, "method"] in [e["loc"] for e in refused.json()["errors"]]
        bad = {**spec, "eval": {"resolutions": [10]}}
        refused = client.post("/v1/jobs", json={"kind": "benchmark", "spec": bad})
        assert refused.status_code == 422
        assert ["body", "spec", "eval", "resolutions", 0] in [e["loc"] for e in refused.json()["errors"]]
