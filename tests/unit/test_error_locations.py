"""Every 4xx names the field the client sent, through the real HTTP app (``create_app``, in process): a method's
own check of its params while it runs (xPos's decay, a table of another shape) under the setup it came from, a
GGUF's missing or invalid field at the GGUF key the file would need, and position ids past 2^26 at the segment's
field that drives them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from posenc.settings import Settings
from service.main import create_app

# xPos with scale_base 0.01: ζ^(n/λ) leaves float64 within a few dozen positions, a check the method makes when it
# builds its tables for the positions at hand (after every params check has passed)
XPOS_OVERFLOWS = {"method": "xpos", "params": {"scale_center": "none", "scale_base": 0.01}, "rotary_dim": 8}
ROPE = {"method": "rope", "rotary_dim": 8}
# T5's bias table is (num_buckets, num_heads): a [3, 3] table is refused once the layer's heads are known
T5_BAD_TABLE = {"method": "t5", "params": {"table": {"random": {"shape": [3, 3]}}}, "rotary_dim": 8}
QK = {"random": {"shape": [1, 1, 64, 8]}}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = Settings(
        redis_url=None, api_keys=[], rate_limit_per_minute=None, cors_origins=[], data_dir=None, data_dirs=[]
    )
    with TestClient(create_app(settings=settings), raise_server_exceptions=False) as test_client:
        yield test_client


def _errors(client: TestClient, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    errors: list[dict[str, Any]] = response.json()["errors"]
    return errors


def _locs(client: TestClient, path: str, body: dict[str, Any]) -> list[list[Any]]:
    return [error["loc"] for error in _errors(client, path, body)]


# ------------------------------------------------------------------------------------------ setups
@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [
        ("/v1/rope/compare", {"setup_a": ROPE, "setup_b": XPOS_OVERFLOWS, "max_position": 100}, "setup_b"),
        ("/v1/rope/compare", {"setup_a": XPOS_OVERFLOWS, "setup_b": ROPE, "max_position": 100}, "setup_a"),
        ("/v1/rope/precision", {"setup": XPOS_OVERFLOWS, "positions_bands": [[0, 100]]}, "setup"),
        ("/v1/rope/decode", {"setup": XPOS_OVERFLOWS, "prefill": 10, "steps": 10}, "setup"),
        ("/v1/rope/serve_check", {"setup": XPOS_OVERFLOWS}, "setup"),
    ],
)
def test_a_methods_check_while_it_runs_names_the_setup(
    client: TestClient, path: str, body: dict[str, Any], loc: str
) -> None:
    errors = _errors(client, path, body)
    assert [error["loc"] for error in errors] == [["body", loc, "params", "scale_center"]]
    assert "xPos decay" in errors[0]["msg"]


@pytest.mark.parametrize("path", ["/v1/rotary", "/v1/attention"])
def test_a_methods_check_while_it_runs_names_the_params_of_a_compute_route(client: TestClient, path: str) -> None:
    body = {"method": "xpos", "params": XPOS_OVERFLOWS["params"], "q": QK, "k": QK, "v": QK}
    if path == "/v1/rotary":
        del body["v"]
    assert _locs(client, path, body) == [["body", "params", "scale_center"]]


def test_a_random_table_of_the_wrong_shape_names_the_setups_params(client: TestClient) -> None:
    locs = _locs(client, "/v1/rope/serve_check", {"setup": T5_BAD_TABLE, "length": 16})
    assert locs == [["body", "setup", "params", "table", "shape"]]


def test_a_table_of_the_wrong_shape_on_a_compute_route_names_the_params(client: TestClient) -> None:
    body = {"method": "t5", "params": T5_BAD_TABLE["params"], "q": QK, "k": QK, "v": QK}
    assert _locs(client, "/v1/attention", body) == [["body", "params", "table", "shape"]]


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [
        (
            "/v1/rope/frequencies",
            {"setup": {"method": "rope_yarn", "params": {"factor": 0.5}, "rotary_dim": 8}, "train_length": 10},
            ["body", "setup", "params", "factor"],
        ),
        (
            "/v1/rope/compare",
            {"setup_a": ROPE, "setup_b": {"method": "rope_yarn", "params": {"factor": 0.5}}, "max_position": 10},
            ["body", "setup_b", "params", "factor"],
        ),
        (
            "/v1/rope/serve_check",
            {"setup": {"method": "rope_yarn", "params": {"factor": 2.0}, "rotary_dim": 8}, "length": 16},
            ["body", "setup", "params", "original_max_position_embeddings"],
        ),
    ],
)
def test_a_params_models_error_names_the_setup(
    client: TestClient, path: str, body: dict[str, Any], loc: list[Any]
) -> None:
    assert _locs(client, path, body) == [loc]


def test_a_params_models_own_check_reads_as_a_sentence(client: TestClient) -> None:
    body = {"setup": {"method": "fire", "params": {"mlp_w1": {"random": {"shape": [3, 3]}}}, "rotary_dim": 8}}
    [error] = _errors(client, "/v1/rope/serve_check", body | {"length": 16})
    assert error["loc"] == ["body", "setup", "params"]
    assert error["msg"].startswith("give all of mlp_w1")  # pydantic's "Value error, " prefix dropped


# ------------------------------------------------------------------------------------------ GGUF keys
_LLAMA = {"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count": 4,
          "llama.embedding_length": 64}  # fmt: skip


def _without(metadata: dict[str, Any], key: str) -> dict[str, Any]:
    return {name: value for name, value in metadata.items() if name != key}


@pytest.mark.parametrize("missing", ["llama.attention.head_count", "llama.block_count", "llama.embedding_length"])
def test_a_gguf_without_a_required_key_names_that_key(client: TestClient, missing: str) -> None:
    locs = _locs(client, "/v1/models/gguf", {"metadata": _without(_LLAMA, missing)})
    assert locs == [["body", "metadata", missing]]


def test_the_key_carries_the_files_architecture(client: TestClient) -> None:
    metadata = {"general.architecture": "qwen2", "qwen2.block_count": 2, "qwen2.embedding_length": 64}
    assert _locs(client, "/v1/models/gguf", {"metadata": metadata}) == [
        ["body", "metadata", "qwen2.attention.head_count"]
    ]


@pytest.mark.parametrize(
    ("extra", "tensors", "loc"),
    [
        # YaRN needs its original context: the key the file would give it
        (
            {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0},
            {},
            ["body", "metadata", "llama.rope.scaling.original_context_length"],
        ),
        (
            {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": -4.0,
             "llama.rope.scaling.original_context_length": 100},
            {},
            ["body", "metadata", "llama.rope.scaling.factor"],
        ),
        # LongRoPE's factors are tensors: the tensor the file lacks
        (
            {"llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 4.0,
             "llama.rope.scaling.original_context_length": 100, "llama.context_length": 400},
            {"rope_factors_long.weight": [1.0] * 8},
            ["body", "tensors", "rope_factors_short.weight"],
        ),
        (
            {"llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 4.0,
             "llama.rope.scaling.original_context_length": 100, "llama.context_length": 400},
            {"rope_factors_long.weight": [1.0] * 3, "rope_factors_short.weight": [1.0] * 8},
            ["body", "tensors", "rope_factors_long.weight"],
        ),
        ({"llama.context_length": -5}, {}, ["body", "metadata", "llama.context_length"]),
        # embedding_length / head_count is the head: 64 / 128 is none
        ({"llama.attention.head_count": 128}, {}, ["body", "metadata", "llama.embedding_length"]),
    ],
)  # fmt: skip
def test_an_invalid_gguf_field_names_its_key_or_tensor(
    client: TestClient, extra: dict[str, Any], tensors: dict[str, Any], loc: list[Any]
) -> None:
    assert _locs(client, "/v1/models/gguf", {"metadata": _LLAMA | extra, "tensors": tensors}) == [loc]


# ------------------------------------------------------------------------------------------ position ids
def test_seconds_per_grid_is_bounded_by_the_schema(client: TestClient) -> None:
    segments = [{"kind": "video", "grid": [4, 4, 4], "seconds_per_grid": 1e308}]
    [error] = _errors(client, "/v1/rope/position_ids", {"segments": segments})
    assert error["loc"] == ["body", "segments", 0, "seconds_per_grid"]
    assert "3600" in error["msg"]


def test_temporal_ids_past_2_26_name_seconds_per_grid(client: TestClient) -> None:
    segments = [{"kind": "video", "grid": [100, 4, 4], "seconds_per_grid": 3600}]
    [error] = _errors(client, "/v1/rope/position_ids", {"segments": segments, "tokens_per_second": 1000})
    assert error["loc"] == ["body", "segments", 0, "seconds_per_grid"]
    assert "67108864" in error["msg"]


def test_ids_carried_past_2_26_by_earlier_videos_name_the_segment(client: TestClient) -> None:
    # advance='max_id': each video moves the next start past its last temporal id (about 10.8M); the seventh
    # video (segment 12) would pass 2^26
    segments = [{"kind": "video", "grid": [4, 2, 2], "seconds_per_grid": 3600}, {"kind": "text", "length": 2}] * 8
    body = {"segments": segments, "tokens_per_second": 1000, "advance": "max_id"}
    assert _locs(client, "/v1/rope/position_ids", body) == [["body", "segments", 12, "seconds_per_grid"]]


def test_ids_within_the_bound_are_answered(client: TestClient) -> None:
    segments = [{"kind": "video", "grid": [4, 2, 2], "seconds_per_grid": 3600}, {"kind": "text", "length": 2}] * 6
    body = {"segments": segments, "tokens_per_second": 1000, "advance": "max_id"}
    response = client.post("/v1/rope/position_ids", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert min(min(row) for row in answer["ids"]) >= 0
    assert max(max(row) for row in answer["ids"]) < answer["next_position"] <= 1 << 26
    assert answer["next_position"] == 6 * (3 * 3_600_000 + 1 + 2)
