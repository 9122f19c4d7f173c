"""Model configs are bounded wherever the API takes one (``/v1/models/*``, ``/v1/rotary``, the ``/v1/rope/*``
setups, a job's method entry): keys the resolver never reads cannot cost more than ``MAX_CONFIG_VALUES`` values
and ``MAX_CONFIG_CHARS`` characters of work, checked before anything reads the config, through the real HTTP app.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from posenc.real_models.config_fields import MAX_CONFIG_CHARS, MAX_CONFIG_VALUES, check_json_value
from posenc.real_models.presets import PRESETS

LLAMA = PRESETS["llama-3.1-8b"]
QK = {"random": {"shape": [1, 1, 4, 128]}}
JOB_SPEC = {"data": {"corpus": "stdlib"}, "model": {"layers": 2, "dim": 32, "heads": 2},
            "train": {"length": 32, "steps": 10, "batch_size": 8}}  # fmt: skip


def padded(values: int) -> dict[str, Any]:
    """Llama 3.1 8B's config with unread keys added until it holds ``values`` values (the config counted)."""
    config = copy.deepcopy(LLAMA)
    for index in range(values - check_json_value(config)):
        config[f"pad_{index:06d}"] = index
    return config


_GGUF = {"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count": 4,
         "llama.embedding_length": 256}  # fmt: skip

# Where each route takes a config, and the loc its error names
PLACES: list[tuple[str, Any, list[Any]]] = [
    ("/v1/models/resolve", lambda c: {"config": c}, ["body", "config"]),
    ("/v1/models/convert", lambda c: {"config": c, "to": "v5"}, ["body", "config"]),
    ("/v1/models/gguf", lambda c: {"metadata": _GGUF, "against": c}, ["body", "against"]),
    ("/v1/rotary", lambda c: {"config": c, "layer": 0, "q": QK, "k": QK}, ["body", "config"]),
    ("/v1/rope/frequencies", lambda c: {"setup": {"config": c, "layer": 0}, "train_length": 8},
     ["body", "setup", "config"]),
    ("/v1/rope/compare", lambda c: {"setup_a": {"method": "rope"}, "setup_b": {"config": c, "layer": 0},
                                    "max_position": 8}, ["body", "setup_b", "config"]),
    ("/v1/rope/serve_check", lambda c: {"setup": {"config": c, "layer": 0}, "length": 8}, ["body", "setup", "config"]),
    ("/v1/rope/temperature", lambda c: {"config": c, "layer": 0, "length": 8}, ["body", "config"]),
    ("/v1/jobs", lambda c: {"kind": "train", "spec": {"methods": [{"config": c}], **JOB_SPEC}},
     ["body", "spec", "methods", 0, "config"]),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "loc"), PLACES, ids=[place[0] for place in PLACES])
def test_a_config_over_the_value_limit_is_422_wherever_a_config_is_taken(
    client: TestClient, wire: Any, path: str, body: Any, loc: list[Any]
) -> None:
    problem = wire.problem(client.post(path, json=body(padded(MAX_CONFIG_VALUES + 1))), 422)
    [error] = problem["errors"]
    assert error["loc"] == loc
    assert str(MAX_CONFIG_VALUES) in error["msg"]


def test_a_preset_padded_to_the_limit_still_resolves_to_its_layers(client: TestClient) -> None:
    reference = client.post("/v1/models/resolve", json={"config": LLAMA})
    assert reference.status_code == 200, reference.text
    full = client.post("/v1/models/resolve", json={"config": padded(MAX_CONFIG_VALUES)})
    assert full.status_code == 200, full.text
    assert full.json()["layers"] == reference.json()["layers"]


def test_characters_are_bounded_too(client: TestClient, wire: Any) -> None:
    room = MAX_CONFIG_CHARS - sum(len(key) for key in _keys(LLAMA)) - len("notes")
    under = client.post("/v1/models/resolve", json={"config": LLAMA | {"notes": "x" * (room - _strings(LLAMA))}})
    assert under.status_code == 200, under.text
    over = client.post("/v1/models/resolve", json={"config": LLAMA | {"notes": "x" * (room + 1)}})
    [error] = wire.problem(over, 422)["errors"]
    assert error["loc"] == ["body", "config"]
    assert str(MAX_CONFIG_CHARS) in error["msg"]


def test_a_config_padded_to_16_mb_is_refused_about_as_fast_as_its_json_is_read(client: TestClient, wire: Any) -> None:
    """The refusal costs the gateway about what decoding the body costs: the same body refused by the schema (an
    unknown field next to the config) is the yardstick, measured in the same run. Reading every unread key (as
    before the limit) took 4-5 times as long as that."""
    head = json.dumps({"config": LLAMA}).encode()[:-2]  # the preset's keys, the config's object left open
    keys = b"".join(b', "unread_key_%08d": [%d, "abcdefgh", 1.5]' % (index, index) for index in range(320_000))
    bodies = {"schema": head + keys + b'}, "unknown": 1}', "config": head + keys + b"}}"}
    assert len(bodies["config"]) > 15_000_000
    seconds: dict[str, float] = {}
    for name, raw in [*bodies.items(), *bodies.items()]:
        # CPU time of this process (the app runs in the test client's thread): other tests' processes on a loaded
        # machine do not count, and the better of two tries leaves out a collection that lands in one of them
        start = time.process_time()
        response = client.post("/v1/models/resolve", content=raw, headers={"Content-Type": "application/json"})
        seconds[name] = min(seconds.get(name, float("inf")), time.process_time() - start)
        wire.problem(response, 422)
        if name == "config":
            assert wire.locs(response.json()) == [["body", "config"]]
    assert seconds["config"] < 1.5 * seconds["schema"] + 1.0, seconds


def _keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(key for child in value.values() for key in _keys(child))]
    if isinstance(value, list):
        return [key for child in value for key in _keys(child)]
    return []


def _strings(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_strings(child) for child in value.values())
    if isinstance(value, list):
        return sum(_strings(child) for child in value)
    return 0
