"""``POST /v1/models/gguf`` through the real HTTP app: a GGUF written by the gguf package, read header-only as the
SDK reads it, resolves to its config's layers; a dropped field draws its warning; bad metadata is a 422 at its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from posenc_client._gguf import read_gguf
from starlette.testclient import TestClient

from posenc.real_models.presets import PRESETS
from tests.helpers.gguf_writer import convert

LLAMA = PRESETS["llama-3.1-8b"]


@pytest.fixture
def llama_gguf(tmp_path: Path) -> dict[str, Any]:
    """Llama 3.1 8B's header as llama.cpp's converter writes it (the llama3 factors as rope_freqs.weight)."""
    return read_gguf(convert(LLAMA, tmp_path / "llama.gguf"))


def test_a_gguf_resolves_to_its_configs_layers_and_compares_clean(
    client: TestClient, llama_gguf: dict[str, Any]
) -> None:
    response = client.post("/v1/models/gguf", json={**llama_gguf, "against": "llama-3.1-8b"})
    assert response.status_code == 200, response.text
    body = response.json()
    reference = client.post("/v1/models/resolve", json={"preset": "llama-3.1-8b"}).json()
    assert body["layers"] == reference["layers"]
    assert body["warnings"] == reference["warnings"]  # no gguf_* warning: nothing dropped, renamed or changed
    assert body["against"] == "llama-3.1-8b"
    assert body["config"]["rope_scaling"]["rope_type"] == "llama3"


def test_a_dropped_rope_tensor_draws_the_warning(client: TestClient, llama_gguf: dict[str, Any]) -> None:
    response = client.post("/v1/models/gguf", json={"metadata": llama_gguf["metadata"], "against": LLAMA})
    assert response.status_code == 200, response.text
    body = response.json()
    assert {layer["method"] for layer in body["layers"]} == {"rope"}
    dropped = {w["evidence"]["field"]: w["evidence"] for w in body["warnings"] if w["code"] == "gguf_field_dropped"}
    assert dropped["rope_scaling.factor"] == {
        "field": "rope_scaling.factor",
        "config": 8.0,
        "gguf": None,
        "gguf_key": "rope_freqs.weight",
    }
    assert body["against"] == "config"
    without = client.post("/v1/models/gguf", json={"metadata": llama_gguf["metadata"]}).json()
    assert not [w for w in without["warnings"] if w["code"].startswith("gguf_field")]  # nothing to compare with


_LLAMA_HEADER = {"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count": 4,
                 "llama.embedding_length": 256}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "status", "loc"),
    [
        ({"metadata": {"llama.block_count": 2}}, 422, ["body", "metadata", "general.architecture"]),
        ({"metadata": {"general.architecture": "llama", "llama.block_count": "two"}}, 422,
         ["body", "metadata", "llama.block_count"]),
        ({"metadata": {"general.architecture": "llama", "llama.x": list(range(9000))}}, 422,
         ["body", "metadata", "llama.x"]),
        ({"metadata": {f"k{i}": 1 for i in range(5000)}}, 422, ["body", "metadata"]),
        ({"tensors": {"output.weight": [1.0]}}, 422, ["body", "tensors", "output.weight"]),
        # past a bound of the config it maps to: the error names the GGUF key, not the config's field
        ({"metadata": _LLAMA_HEADER | {"llama.block_count": 10**9}}, 422, ["body", "metadata", "llama.block_count"]),
        ({"metadata": _LLAMA_HEADER | {"llama.rope.dimension_count": 10**9}}, 422,
         ["body", "metadata", "llama.rope.dimension_count"]),
        ({"against": {"hidden_size": 64, "num_hidden_layers": 2}}, 422, ["body", "against", "num_attention_heads"]),
        ({"against": "gpt-5"}, 404, None),
    ],
)  # fmt: skip
def test_bad_gguf_requests_name_the_field(
    client: TestClient, llama_gguf: dict[str, Any], change: dict[str, Any], status: int, loc: list[str] | None
) -> None:
    response = client.post("/v1/models/gguf", json={**llama_gguf, **change})
    assert response.status_code == status, response.text
    if loc is not None:
        assert loc in [error["loc"] for error in response.json()["errors"]], response.json()
