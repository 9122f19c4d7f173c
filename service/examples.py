"""A valid request example for every operation of the OpenAPI document (what Swagger's "Try it out" sends).

Each body is small (it answers in milliseconds on a CPU) and is sent by a test that expects a 2xx
(``tests/contract/test_openapi_examples.py``); path parameters get an example value the same way. Written out here,
next to no model: the models' own JSON schemas stay the wire contract, these are one good call of each route.
"""

from __future__ import annotations

from typing import Any

Q = {"random": {"shape": [1, 2, 8, 16], "seed": 0}}
K = {"random": {"shape": [1, 2, 8, 16], "seed": 1}}
SMALL_LLAMA = {
    "model_type": "llama",
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_hidden_layers": 2,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}

# (method, path) -> the JSON body
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/v1/bias"): {"method": "alibi", "num_heads": 4, "query_length": 8},
    ("post", "/v1/rotary"): {"method": "rope", "q": Q, "k": K},
    ("post", "/v1/encodings"): {"method": "sinusoidal", "length": 16, "dim": 32},
    ("post", "/v1/attention"): {"method": "alibi", "q": Q, "k": K},
    ("post", "/v1/jobs"): {
        "kind": "compute",
        "spec": {"route": "bias", "request": {"method": "alibi", "num_heads": 4, "query_length": 8}},
    },
    ("post", "/v1/models/resolve"): {"preset": "llama-3.1-8b"},
    ("post", "/v1/models/convert"): {"config": SMALL_LLAMA, "to": "v5"},
    ("post", "/v1/models/gguf"): {
        "metadata": {
            "general.architecture": "llama",
            "llama.block_count": 2,
            "llama.embedding_length": 512,
            "llama.attention.head_count": 8,
            "llama.context_length": 8192,
            "llama.rope.freq_base": 500000.0,
        },
        "against": SMALL_LLAMA,
    },
    ("post", "/v1/rope/position_ids"): {
        "segments": [{"kind": "text", "length": 4}, {"kind": "image", "grid": [1, 4, 4]}],
        "rule": "qwen2_5_vl",
    },
    ("post", "/v1/rope/frequencies"): {
        "setup": {
            "method": "rope_yarn",
            "params": {"factor": 4, "original_max_position_embeddings": 4096},
            "rotary_dim": 128,
        },
        "train_length": 4096,
    },
    ("post", "/v1/rope/precision"): {"setup": {"method": "rope", "rotary_dim": 64}, "positions_per_band": 16},
    ("post", "/v1/rope/compare"): {
        "setup_a": {"method": "rope", "rotary_dim": 64},
        "setup_b": {"method": "rope_linear", "params": {"factor": 2}, "rotary_dim": 64},
        "max_position": 1024,
    },
    ("post", "/v1/rope/decode"): {
        "setup": {
            "method": "rope_dynamic_ntk",
            "params": {"factor": 2, "original_max_position_embeddings": 64},
            "rotary_dim": 32,
        },
        "prefill": 48,
        "steps": 32,
    },
    ("post", "/v1/rope/serve_check"): {"setup": {"method": "rope", "rotary_dim": 32}, "length": 32},
    ("post", "/v1/rope/permutation"): {"head_dim": 8, "to": "half"},
    ("post", "/v1/rope/temperature"): {"config": SMALL_LLAMA, "layer": 0, "length": 8},
}

# path parameter name -> an example value that exists (a method, a preset)
PARAMETERS: dict[tuple[str, str], dict[str, str]] = {
    ("get", "/v1/methods/{name}"): {"name": "alibi"},
    ("get", "/v1/models/{name}"): {"name": "llama-3.1-8b"},
}


def document_examples(schema: dict[str, Any]) -> None:
    """Put each operation's example in the document (in place): its JSON body's ``example`` and its path
    parameters' ``example``."""
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            body = BODIES.get((method, path))
            content = operation.get("requestBody", {}).get("content", {})
            if body is not None and "application/json" in content:
                content["application/json"]["example"] = body
            values = PARAMETERS.get((method, path), {})
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter["name"] in values:
                    parameter["example"] = values[parameter["name"]]
