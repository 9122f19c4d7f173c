"""Every request bounded, against a real gateway process: each request that used to take the gateway's memory,
CPU or event loop, and requests at and just past the bounds of every route, answer a 4xx naming the field (and
for a 413 the limit), or a bounded 2xx, within seconds; meanwhile the gateway's peak resident memory grows by
less than ``MEMORY_GROWTH_MB`` and ``/healthz`` answers within a second throughout.

A case's time bound, and /healthz's, holds when either the wall time or the CPU time the gateway process spent
meanwhile is within the bound: the unbounded work these cases once did costs ten times the bound in both, while
a loaded machine (the suite's other processes on the same cores) stretches only the wall time.

The gateway is ``uvicorn service.main:app`` with the default budgets, started by the ``start_gateway`` fixture,
with an address-space limit set on its process (``prlimit``): an allocation anywhere near the old failures
(32 GiB) fails inside it rather than taking the machine.
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

MEMORY_GROWTH_MB = 300
HEALTHZ_MAX_S = 1.0
ADDRESS_SPACE_HEADROOM = 6 << 30  # bytes of address space the gateway may add to what it has after start-up
LLAMA = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "rope_theta": 500000.0,
    "max_position_embeddings": 131072,
}


def _status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (peak RSS) and VmSize of a process, in kB (Linux /proc)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "VmSize"):
            values[key] = int(rest.split()[0])
    return values


@dataclass
class Case:
    """A request and what it must get: one of ``statuses``, and in the problem's ``errors`` a loc containing
    ``field`` (and the limit in the detail of a 413)."""

    name: str
    path: str
    body: Any
    statuses: tuple[int, ...]
    field: str | None = None
    seconds: float = 2.0
    method: str = "POST"
    raw: bool = False  # body is already JSON text
    accept: str = "application/json"


@dataclass
class HealthProbe:
    """GET /healthz every 50 ms from a thread of its own, keeping the slowest answer: the shorter of its wall
    time and the gateway's CPU time meanwhile (as for the cases: a gateway busy blocking its event loop spends
    the wall time on its CPU; one that other processes starve of the cores does not)."""

    url: str
    pid: int
    slowest: float = 0.0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            while not self._stop.is_set():
                start, cpu_start = time.perf_counter(), _cpu_seconds(self.pid)
                try:
                    status = client.get("/healthz").status_code
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    status = 0
                elapsed = min(time.perf_counter() - start, _cpu_seconds(self.pid) - cpu_start)
                self.slowest = max(self.slowest, elapsed)
                if status != 200:
                    self.failures.append(f"status {status}")
                self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()


@pytest.fixture
def bounded_gateway(start_gateway: Callable[..., Any], job_env: dict[str, str]) -> Any:
    env = {key: value for key, value in job_env.items() if key != "POSENC_TORCH_THREADS"}  # the default share
    # a worker's memory budget as on a machine of 16 GiB (the default is half the machine's memory)
    gateway = start_gateway(env | {"POSENC_COMPILE_KERNELS": "false", "POSENC_WORKER_MEMORY_BYTES": str(8 << 30)})
    pid = gateway.process.pid
    limit = _status(pid)["VmSize"] * 1024 + ADDRESS_SPACE_HEADROOM
    resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
    return gateway


def _layers(count: int) -> dict[str, Any]:
    return LLAMA | {"num_hidden_layers": count}


def _gguf(blocks: int) -> dict[str, Any]:
    """A Llama 3.1 GGUF's header metadata (as the SDK's reader sends it) with ``blocks`` layers."""
    return {
        "general.architecture": "llama",
        "llama.block_count": blocks,
        "llama.embedding_length": 4096,
        "llama.attention.head_count": 32,
        "llama.context_length": 131072,
        "llama.rope.freq_base": 500000.0,
    }


def _text_setup(config: dict[str, Any], layer: int = 0) -> dict[str, Any]:
    return {"config": config, "layer": layer}


def _job(kind: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"methods": [{"method": "rope"}], "data": {"task": "copy"}, "device": "cpu"}
    return {"kind": kind, "spec": base | spec}


def issue_cases() -> list[Case]:
    """The requests of the issue, each as it was reported."""
    video = {"segments": [{"kind": "video", "grid": [8, 4096, 4096]}]}
    dynamic = {"method": "rope_dynamic_ntk", "params": {"factor": 4.0, "original_max_position_embeddings": 64}}
    q = {"random": {"shape": [1, 1, 4, 128], "seed": 0}}
    temperature = LLAMA | {"attn_temperature_tuning": True, "no_rope_layer_interval": 4}
    return [
        Case("resolve 1e9 layers", "/v1/models/resolve", {"config": _layers(10**9)}, (422,), "num_hidden_layers"),
        Case("resolve 100,000 layers", "/v1/models/resolve", {"config": _layers(100_000)}, (422,), "num_hidden_layers"),
        Case("video grid [8, 4096, 4096]", "/v1/rope/position_ids", video, (413,), "segments"),
        Case(
            "extrapolate dim 8192 at 1M tokens",
            "/v1/jobs",
            _job(
                "extrapolate", model={"dim": 8192, "heads": 8}, eval={"lengths": [1048576]}, data={"corpus": "stdlib"}
            ),
            (422,),
            "dim",
        ),
        Case(
            "extrapolate dim 4096 at 1M tokens",
            "/v1/jobs",
            _job(
                "extrapolate", model={"dim": 4096, "heads": 8}, eval={"lengths": [1048576]}, data={"corpus": "stdlib"}
            ),
            (413,),
        ),
        Case(
            "benchmark of 200,000 methods",
            "/v1/jobs",
            _job("benchmark", methods=[{"method": "rope"}] * 200_000),
            (422,),
            "methods",
        ),
        Case(
            "frequencies of a 3,000,000-wide head",
            "/v1/rope/frequencies",
            {"setup": _text_setup(LLAMA | {"head_dim": 3_000_000}), "train_length": 4096},
            (422,),
            "head_dim",
        ),
        Case(
            "diffusers axes_dims_rope of 3,000,000",
            "/v1/rope/frequencies",
            {
                "setup": _text_setup(
                    {
                        "_class_name": "FluxTransformer2DModel",
                        "attention_head_dim": 128,
                        "axes_dims_rope": [3_000_000, 56, 56],
                    }
                ),
                "train_length": 4096,
            },
            (422,),
            "axes_dims_rope",
        ),
        Case(
            "diffusers num_layers 1e9",
            "/v1/models/resolve",
            {"config": {"_class_name": "FluxTransformer2DModel", "attention_head_dim": 128, "num_layers": 10**9}},
            (422,),
            "num_layers",
        ),
        Case(
            "rotary with a config of 200,000 layers",
            "/v1/rotary",
            {"config": _layers(200_000), "layer": 0, "q": q, "k": q},
            (422,),
            "num_hidden_layers",
        ),
        Case(
            "compare identical setups to position 1,048,576",
            "/v1/rope/compare",
            {"setup_a": {"method": "rope"}, "setup_b": {"method": "rope"}, "max_position": 1_048_576},
            (200, 413),
            "max_position",
        ),
        Case(
            "decode dynamic NTK 4096 steps at rotary dim 8192",
            "/v1/rope/decode",
            {"setup": dynamic | {"rotary_dim": 8192}, "prefill": 64, "steps": 4096},
            (413,),
            "steps",
        ),
        Case(
            "rope_theta as a 400-digit integer",
            "/v1/models/resolve",
            {"config": LLAMA | {"rope_theta": 10**400}},
            (422,),
            "rope_theta",
        ),
        Case(
            "partial_rotary_factor 1e308",
            "/v1/models/resolve",
            {"config": LLAMA | {"partial_rotary_factor": 1e308}},
            (422,),
            "partial_rotary_factor",
        ),
        Case(
            "query_pre_attn_scalar 0",
            "/v1/models/resolve",
            {"config": LLAMA | {"query_pre_attn_scalar": 0}},
            (422,),
            "query_pre_attn_scalar",
        ),
        Case(
            "rope_type as a list",
            "/v1/models/resolve",
            {"config": LLAMA | {"rope_scaling": {"rope_type": ["llama3"]}}},
            (422,),
            "rope_type",
        ),
        Case(
            "a lone surrogate in model_type",
            "/v1/models/resolve",
            '{"config": {"model_type": "\\ud800", "hidden_size": 64, "num_attention_heads": 2, '
            '"num_hidden_layers": 2}}',
            (422,),
            "model_type",
            raw=True,
        ),
        Case(
            "floor_scale 'abc'",
            "/v1/rope/temperature",
            {"config": temperature | {"floor_scale": "abc"}, "layer": 3, "length": 4},
            (422,),
            "floor_scale",
        ),
        Case(
            "floor_scale 0",
            "/v1/rope/temperature",
            {"config": temperature | {"floor_scale": 0}, "layer": 3, "length": 4},
            (422,),
            "floor_scale",
        ),
        Case(
            "negative axes_dims_rope",
            "/v1/models/resolve",
            {
                "config": {
                    "_class_name": "FluxTransformer2DModel",
                    "attention_head_dim": 128,
                    "axes_dims_rope": [-16, 72, 72],
                }
            },
            (422,),
            "axes_dims_rope",
        ),
        Case(
            "boolean in mrope_section",
            "/v1/models/resolve",
            # (on Qwen2.5-VL, whose rotary reads the sections; Llama's never does, and ignores them as transformers)
            {
                "config": LLAMA
                | {
                    "model_type": "qwen2_5_vl",
                    "rope_scaling": {"rope_type": "default", "mrope_section": [True, 24, 40]},
                }
            },
            (422,),
            "mrope_section",
        ),
    ]


def hidden_work_cases() -> list[Case]:
    """Work a request's method params or tensors drive, which the route's sizes alone do not show: each method's
    declared cost and every random spec are charged before anything is allocated."""
    fire_wide = {"mlp_width": 4096}
    huge_random = {"random": {"shape": [100_000_000, 4], "seed": 0}}
    past_random = {"random": {"shape": [270_000_000, 4], "seed": 0}}
    learned = {"method": "learned_absolute", "params": {"max_positions": 1_048_576, "init": "bert"}}
    return [
        Case(
            "a learned table of 1M rows for one position",
            "/v1/encodings",
            {"length": 1, "dim": 64} | learned,
            (413,),
            "max_positions",
        ),
        Case(
            "FIRE 4096 wide at 200 tokens",
            "/v1/bias",
            {"method": "fire", "num_heads": 1, "query_length": 200, "params": fire_wide},
            (200, 413),
            "mlp_width",
            seconds=4,
        ),
        Case(
            "FIRE 4096 wide at 400 tokens, every pair distinct",
            "/v1/bias",
            {"method": "fire", "num_heads": 16, "query_length": 400, "params": fire_wide | {"L_init": 0}},
            (413,),
            "mlp_width",
        ),
        Case(
            "Sandwich d_bar 65536 as a Toeplitz table of 8192",
            "/v1/bias",
            {
                "method": "sandwich",
                "num_heads": 8,
                "query_length": 8192,
                "form": "toeplitz",
                "params": {"d_bar": 65536},
            },
            (413,),
            "d_bar",
        ),
        Case(
            "serve check of FIRE 4096 wide on 64 heads",
            "/v1/rope/serve_check",
            {"setup": {"method": "fire", "params": fire_wide}, "length": 128, "heads": 64},
            (413,),
            "mlp_width",
        ),
        Case(
            "serve check of FIRE 4096 wide on 4 heads at 256",
            "/v1/rope/serve_check",
            {"setup": {"method": "fire", "params": fire_wide}, "length": 256, "heads": 4},
            (413,),
            "setup.params.mlp_width",
        ),
        Case(
            "a job entry with a learned table of 1M rows",
            "/v1/jobs",
            _job("train", methods=[learned], model={"dim": 64, "heads": 2}),
            (413,),
            "methods.0.params.max_positions",
        ),
        Case(
            "32 job entries with large learned tables",
            "/v1/jobs",
            _job(
                "benchmark",
                methods=[
                    {"method": "learned_absolute", "params": {"max_positions": 65536, "seed": i}} for i in range(32)
                ],
                model={"dim": 256, "heads": 4},
            ),
            (413,),
            "max_positions",
        ),
        Case(
            "a random table of 4e8 values in a setup's params",
            "/v1/rope/frequencies",
            {"setup": {"method": "rope_mixed", "rotary_dim": 8, "params": {"freqs": huge_random}}, "train_length": 8},
            (413,),
            "setup.params.freqs",
        ),
        Case(
            "a random table of 1.08e9 values in a setup's params",
            "/v1/rope/precision",
            {"setup": {"method": "rope_mixed", "rotary_dim": 8, "params": {"freqs": past_random}}},
            (413, 422),
            "setup.params.freqs",
        ),
        Case(
            "a random table of 4e8 values in serve check's params",
            "/v1/rope/serve_check",
            {"setup": {"method": "learned_absolute", "params": {"table": huge_random}}, "length": 16},
            (413,),
            "setup.params.table",
        ),
        Case(
            "a random table of 4e8 values in a job method's params",
            "/v1/jobs",
            _job("train", methods=[{"method": "learned_absolute", "params": {"table": huge_random}}]),
            (413,),
            "methods.0.params.table",
        ),
        Case(
            "a random q of 1.08e9 values",
            "/v1/rotary",
            {"method": "rope", "q": past_random | {"random": {"shape": [1, 1, 270_000_000, 4]}}},
            (413, 422),
            "q",
        ),
    ]


def second_review_cases() -> list[Case]:
    """The rest of the second review's requests: job memory and duration, padded configs, error locations."""
    padded = LLAMA | {f"unread_{i}": "x" * 100 for i in range(20_000)}  # about 2 MB the resolver never reads
    xpos = {"method": "xpos", "params": {"scale_center": "none", "scale_base": 0.01}, "rotary_dim": 8}
    video = {"segments": [{"kind": "video", "grid": [4, 4, 4], "seconds_per_grid": 1e308}]}
    gguf_without_heads = {key: value for key, value in _gguf(32).items() if key != "llama.attention.head_count"}
    return [
        Case(
            "an image job at batch 4096",
            "/v1/jobs",
            _job("train", data={"task": "shapes"}, train={"batch_size": 4096}),
            (413,),
            "train.batch_size",
        ),
        # the default model at 2^20 tokens is over max_job_cost first (a 413 with its limit); a smaller model at
        # 2^17 tokens, within it, is over the worker's memory (one (N, N) map alone is 64 GiB)
        Case(
            "probes evaluated at 2^20 tokens",
            "/v1/jobs",
            _job("benchmark", data={"task": "probes"}, eval={"lengths": [1_048_576]}),
            (413,),
        ),
        Case(
            "probes of a small model evaluated at 2^17 tokens",
            "/v1/jobs",
            _job(
                "benchmark",
                data={"task": "probes"},
                eval={"lengths": [131_072], "samples": 1},
                model={"layers": 1, "dim": 16, "heads": 1},
                train={"steps": 1, "batch_size": 1},
            ),
            (413,),
            "eval.lengths",
        ),
        Case("a config padded with unread keys", "/v1/models/resolve", {"config": padded}, (413, 422), "config"),
        Case(
            "a job entry's config padded with unread keys",
            "/v1/jobs",
            _job("train", methods=[{"config": padded}]),
            (413, 422),
            "methods.0.config",
        ),
        Case(
            "compare with xPos overflowing in setup_b",
            "/v1/rope/compare",
            {"setup_a": {"method": "rope", "rotary_dim": 8}, "setup_b": xpos, "max_position": 100_000},
            (422,),
            "setup_b.params.scale_center",
        ),
        Case("a video of 1e308 seconds per grid", "/v1/rope/position_ids", video, (422,), "seconds_per_grid"),
        Case(
            "a GGUF without its head count",
            "/v1/models/gguf",
            {"metadata": gguf_without_heads},
            (422,),
            "metadata.llama.attention.head_count",
        ),
    ]


def bound_cases() -> list[Case]:
    """Every route at and just past its bounds, and at the largest values its schema allows."""
    binary = "application/vnd.safetensors"
    big_q = {"random": {"shape": [1, 64, 65536, 8192], "seed": 0}}
    q = {"random": {"shape": [1, 8, 512, 64], "seed": 0}}
    at_input_limit = {"random": {"shape": [1, 8, 2048, 512], "seed": 0}}  # 8 Mi elements each, 16 Mi together
    rope = {"method": "rope", "rotary_dim": 128}
    edges = [[i, i + 1] for i in range(4095)]
    dense_edges = [[i % 4096, (i * 7919) % 4096] for i in range(200_000)]
    return [
        # compute routes
        Case(
            "bias at the largest lengths",
            "/v1/bias",
            {"method": "alibi", "num_heads": 1024, "query_length": 1048576},
            (413,),
            "query_length",
        ),
        Case(
            "bias toeplitz of 1M",
            "/v1/bias",
            {"method": "alibi", "num_heads": 8, "query_length": 1048576, "form": "toeplitz"},
            (200,),
            seconds=4,
            accept=binary,
        ),
        Case(
            "bias past the schema",
            "/v1/bias",
            {"method": "alibi", "num_heads": 1025, "query_length": 8},
            (422,),
            "num_heads",
        ),
        Case(
            "graph bias on 4096 nodes",
            "/v1/bias",
            {"method": "graphormer", "num_heads": 1, "graph": {"num_nodes": 4096, "edges": edges}},
            (200, 413),
            "graph",
            seconds=4,
            accept=binary,
        ),
        Case(
            "graph bias on a dense graph",
            "/v1/bias",
            {"method": "graphormer", "num_heads": 1, "graph": {"num_nodes": 4096, "edges": dense_edges}},
            (413,),
            "graph",
        ),
        # past the 2^30 values a random spec may draw at all: a 422 at its shape, before any budget
        Case(
            "rotary of the largest q",
            "/v1/rotary",
            {"method": "rope", "q": big_q, "k": big_q},
            (422,),
            "q.random.shape",
        ),
        Case(
            "rotary at the input limit",
            "/v1/rotary",
            {"method": "rope", "q": at_input_limit, "k": at_input_limit},
            (200,),
            seconds=6,
            accept=binary,
        ),
        Case(
            "rotary with a 1024-layer config",
            "/v1/rotary",
            {
                "config": _layers(1024),
                "layer": 1023,
                "q": {"random": {"shape": [1, 1, 4, 128], "seed": 0}},
                "rotate": "query",
            },
            (200,),
        ),
        Case(
            "rotary with a 1025-layer config",
            "/v1/rotary",
            {"config": _layers(1025), "layer": 0, "q": {"random": {"shape": [1, 1, 4, 128], "seed": 0}}},
            (422,),
            "num_hidden_layers",
        ),
        Case(
            "encodings of the largest",
            "/v1/encodings",
            {"method": "sinusoidal", "length": 1048576, "dim": 65536},
            (413,),
            "length",
        ),
        Case(
            "attention of 8192 tokens",
            "/v1/attention",
            {
                "method": "alibi",
                "q": {"random": {"shape": [1, 8, 8192, 64], "seed": 0}},
                "k": {"random": {"shape": [1, 8, 8192, 64], "seed": 1}},
            },
            (413,),
            "q",
        ),
        Case(
            "attention of 512 tokens",
            "/v1/attention",
            {"method": "alibi", "q": q, "k": q},
            (200,),
            seconds=4,
            accept=binary,
        ),
        # rope diagnostics
        Case(
            "frequencies at rotary_dim 8192",
            "/v1/rope/frequencies",
            {
                "setup": {
                    "method": "rope_yarn",
                    "rotary_dim": 8192,
                    "params": {"factor": 4.0, "original_max_position_embeddings": 4096},
                },
                "train_length": 1 << 26,
            },
            (200,),
        ),
        Case(
            "frequencies past rotary_dim",
            "/v1/rope/frequencies",
            {"setup": {"method": "rope", "rotary_dim": 8194}, "train_length": 8},
            (422,),
            "rotary_dim",
        ),
        Case(
            "precision at the largest",
            "/v1/rope/precision",
            {
                "setup": {"method": "rope", "rotary_dim": 8192},
                "positions_per_band": 1024,
                "positions_bands": [[0, 1 << 26]] * 16,
            },
            (413,),
            "positions_per_band",
        ),
        Case("precision by default", "/v1/rope/precision", {"setup": rope}, (200,)),
        Case(
            "compare at rotary_dim 8192 to 1M",
            "/v1/rope/compare",
            {
                "setup_a": {"method": "rope", "rotary_dim": 8192},
                "setup_b": {"method": "rope", "rotary_dim": 8192},
                "max_position": 1 << 20,
            },
            (413,),
            "max_position",
        ),
        Case(
            "compare past the schema",
            "/v1/rope/compare",
            {"setup_a": rope, "setup_b": rope, "max_position": (1 << 20) + 1},
            (422,),
            "max_position",
        ),
        Case(
            "decode at the largest",
            "/v1/rope/decode",
            {"setup": {"method": "rope", "rotary_dim": 8192}, "prefill": 4096, "steps": 4096},
            (413,),
            "steps",
        ),
        Case("decode of 1024 steps", "/v1/rope/decode", {"setup": rope, "prefill": 64, "steps": 1024}, (200,)),
        Case(
            "temperature at the schema's largest length",
            "/v1/rope/temperature",
            {
                "config": LLAMA | {"attn_temperature_tuning": True, "no_rope_layer_interval": 4},
                "layer": 3,
                "length": 1 << 20,
            },
            (413,),
            "length",
        ),
        Case(
            "compare just within the work budget",
            "/v1/rope/compare",
            {
                "setup_a": rope,
                "setup_b": {"method": "rope_ntk", "rotary_dim": 128, "params": {"factor": 2.0}},
                "max_position": 900_000,
            },
            (200,),
            seconds=6,
        ),
        Case("permutation at 8192", "/v1/rope/permutation", {"head_dim": 8192, "to": "half"}, (200,)),
        Case("permutation past 8192", "/v1/rope/permutation", {"head_dim": 8193, "to": "half"}, (422,), "head_dim"),
        Case(
            "temperature at the JSON limit",
            "/v1/rope/temperature",
            {
                "config": LLAMA | {"attn_temperature_tuning": True, "no_rope_layer_interval": 4},
                "layer": 3,
                "length": 1_000_000,
            },
            (200,),
            seconds=4,
        ),
        Case(
            "position ids at the JSON limit",
            "/v1/rope/position_ids",
            {"segments": [{"kind": "text", "length": 333_333}]},
            (200,),
            seconds=4,
        ),
        Case(
            "position ids past the JSON limit",
            "/v1/rope/position_ids",
            {"segments": [{"kind": "text", "length": 333_334}]},
            (413,),
            "segments",
        ),
        Case(
            "serve check at the largest length",
            "/v1/rope/serve_check",
            {"setup": rope, "length": 4096},
            (413,),
            "length",
        ),
        Case(
            "serve check past the largest length",
            "/v1/rope/serve_check",
            {"setup": rope, "length": 4097},
            (422,),
            "length",
        ),
        Case(
            "serve check of 64 heads",
            "/v1/rope/serve_check",
            {"setup": rope, "length": 1024, "heads": 64},
            (413,),
            "heads",
        ),
        Case(
            "serve check of one-token chunks",
            "/v1/rope/serve_check",
            {"setup": rope, "length": 4096, "chunk_sizes": [1] * 8},
            (413,),
            "chunk_sizes",
        ),
        Case(
            "serve check packing past 4096 tokens",
            "/v1/rope/serve_check",
            {"setup": rope, "length": 4096, "documents": [4096] * 64},
            (422,),
            "documents",
        ),
        Case(
            "serve check of a 1e9-layer config",
            "/v1/rope/serve_check",
            {"setup": {"config": _layers(10**9), "layer": 0}, "length": 64},
            (422,),
            "num_hidden_layers",
        ),
        Case(
            "serve check within the budget", "/v1/rope/serve_check", {"setup": rope, "length": 128}, (200,), seconds=4
        ),
        # models
        Case("resolve 1024 layers", "/v1/models/resolve", {"config": _layers(1024)}, (200,)),
        Case("a GGUF of 1e9 blocks", "/v1/models/gguf", {"metadata": _gguf(10**9)}, (422,), "llama.block_count"),
        Case(
            "a GGUF of 1024 blocks against a config of 1024 layers",
            "/v1/models/gguf",
            {"metadata": _gguf(1024), "against": _layers(1024)},
            (200,),
        ),
        Case(
            "a GGUF with 73,728 array values",
            "/v1/models/gguf",
            {"metadata": _gguf(32) | {f"llama.x{i}": list(range(8192)) for i in range(9)}},
            (422,),
            "metadata",
        ),
        Case(
            "a GGUF against a config of 1e9 layers",
            "/v1/models/gguf",
            {"metadata": _gguf(32), "against": _layers(10**9)},
            (422,),
            "against.num_hidden_layers",
        ),
        Case("resolve a preset", "/v1/models/resolve", {"preset": "deepseek-v3"}, (200,)),
        Case("convert 1024 layers", "/v1/models/convert", {"config": _layers(1024), "to": "v5"}, (200,)),
        Case(
            "a config nested past the depth bound",
            "/v1/models/convert",
            '{"to": "v5", "config": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}",
            (422,),
            "config",
            raw=True,
        ),
        Case(
            "a JSON body nested 100,000 deep",
            "/v1/models/resolve",
            '{"config": ' + "[" * 100_000 + "]" * 100_000 + "}",
            (400, 422),
            raw=True,
        ),
        Case("an unknown preset of 10,000 characters", "/v1/models/resolve", {"preset": "x" * 10_000}, (404, 422)),
        # jobs
        Case(
            "a job of 33 methods", "/v1/jobs", _job("benchmark", methods=[{"method": "rope"}] * 33), (422,), "methods"
        ),
        Case(
            "a job of 65 evaluation lengths",
            "/v1/jobs",
            _job("benchmark", eval={"lengths": list(range(1, 66))}),
            (422,),
            "lengths",
        ),
        Case(
            "a job at the largest steps and batch",
            "/v1/jobs",
            _job("train", data={"task": "copy", "size": 4096}, train={"steps": 10_000_000, "batch_size": 4096}),
            (413,),
        ),
        Case(
            "a transformer_xl job at dim 4096 and 1M tokens checked",
            "/v1/jobs",
            _job(
                "extrapolate",
                methods=[{"method": "transformer_xl"}],
                model={"dim": 4096, "heads": 8, "layers": 1},
                train={"length": 64, "steps": 1, "batch_size": 1},
                eval={"lengths": [65536], "max_tokens": 1},
                data={"corpus": "stdlib"},
            ),
            (202, 413),
        ),
        Case("jobs listed past the limit", "/v1/jobs?limit=501", None, (422,), "limit", method="GET"),
        Case("a method name of 10,000 characters", "/v1/methods/" + "x" * 10_000, None, (404,), method="GET"),
    ]


def _send(client: httpx.Client, case: Case) -> httpx.Response:
    headers = {"Accept": case.accept}
    if case.method == "GET":
        return client.get(case.path, headers=headers)
    if case.raw:
        return client.post(case.path, content=case.body, headers=headers | {"Content-Type": "application/json"})
    return client.post(case.path, json=case.body, headers=headers)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has spent so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime, fields 14 and 15


def _check(case: Case, response: httpx.Response, elapsed: float, cpu: float) -> list[str]:
    problems = []
    if response.status_code not in case.statuses:
        problems.append(f"status {response.status_code}, wanted {case.statuses}: {response.text[:300]}")
    if min(elapsed, cpu) > case.seconds:
        problems.append(f"took {elapsed:.2f} s and {cpu:.2f} s of the gateway's CPU (bound {case.seconds} s)")
    if response.status_code >= 400:
        problem = response.json()
        locs = [".".join(map(str, error["loc"])) for error in problem.get("errors") or []]
        if case.field is not None and not any(case.field in loc for loc in locs):
            problems.append(f"no error names {case.field!r}: {locs} {problem.get('detail', '')[:200]}")
        if response.status_code == 413 and str(problem.get("limit")) not in problem.get("detail", ""):
            problems.append(f"a 413 without its limit: {problem}")
    return problems


def run_cases(gateway: Any, cases: list[Case]) -> list[str]:
    """Send every case while probing /healthz; every problem found, with the peak memory growth."""
    pid = gateway.process.pid
    probe = HealthProbe(gateway.url, pid)
    with httpx.Client(base_url=gateway.url, timeout=120) as client:
        for warm in ("/v1/models/resolve", "/v1/rope/frequencies"):  # the first use of each library
            body = (
                {"preset": "llama-3.1-8b"}
                if warm.endswith("resolve")
                else {"setup": {"method": "rope"}, "train_length": 8}
            )
            assert client.post(warm, json=body).status_code == 200
        before = _status(pid)["VmHWM"]
        thread = threading.Thread(target=probe.run, daemon=True)
        thread.start()
        problems = []
        try:
            for case in cases:
                start, cpu_start = time.perf_counter(), _cpu_seconds(pid)
                response = _send(client, case)
                elapsed, cpu = time.perf_counter() - start, _cpu_seconds(pid) - cpu_start
                problems += [f"{case.name}: {problem}" for problem in _check(case, response, elapsed, cpu)]
        finally:
            probe.stop()
            thread.join(10)
    grown_mb = (_status(pid)["VmHWM"] - before) / 1024
    if grown_mb > MEMORY_GROWTH_MB:
        problems.append(f"peak RSS grew by {grown_mb:.0f} MB (bound {MEMORY_GROWTH_MB} MB)")
    if probe.slowest > HEALTHZ_MAX_S:
        problems.append(f"/healthz took {probe.slowest:.2f} s at worst (bound {HEALTHZ_MAX_S} s)")
    problems += [f"/healthz: {failure}" for failure in probe.failures[:5]]
    assert gateway.process.poll() is None, f"the gateway died:\n{gateway.tail()}"
    return problems


def test_the_requests_that_took_the_gateway_down_are_bounded(bounded_gateway: Any) -> None:
    problems = run_cases(bounded_gateway, issue_cases())
    assert not problems, json.dumps(problems, indent=1)


def test_every_route_at_and_past_its_bounds_is_bounded(bounded_gateway: Any) -> None:
    problems = run_cases(bounded_gateway, bound_cases())
    assert not problems, json.dumps(problems, indent=1)


def test_the_work_method_params_and_random_specs_drive_is_bounded(bounded_gateway: Any) -> None:
    problems = run_cases(bounded_gateway, hidden_work_cases())
    assert not problems, json.dumps(problems, indent=1)


def test_the_rest_of_the_second_review_is_bounded(bounded_gateway: Any) -> None:
    problems = run_cases(bounded_gateway, second_review_cases())
    assert not problems, json.dumps(problems, indent=1)
