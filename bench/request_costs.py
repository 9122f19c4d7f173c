"""The one cost model against the clock: every costed route's estimated work (in work units, about 1 ns of one
core each, ``posenc.compute.cost``) against the time its work really takes here, at sizes from small to the
default budget (``max_request_work``).

    .venv/bin/python bench/request_costs.py            # every route
    .venv/bin/python bench/request_costs.py --only rope.compare rope.decode

Prints, per case: the estimate, the measured time (median of --repeats runs of the plan's ``run``, in this
process, with torch's default threads), and their ratio ns / unit. A ratio well above 1 means the route's
constant under-charges on this machine (a request at the budget would take longer than the budget says); well
below 1, it over-charges. The planning itself (validation, a config's resolution) is timed apart.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from posenc import runtime
from posenc.compute import prepare
from posenc.compute import rope as plans
from posenc.compute.cost import Plan
from posenc.real_models.presets import get_preset
from posenc.schemas.compute import AttentionRequest, BiasRequest, RotaryRequest
from posenc.schemas.models import ResolveRequest
from posenc.schemas.rope import (
    CompareRequest,
    ConvertRequest,
    DecodeRequest,
    FrequenciesRequest,
    PositionIdsRequest,
    PrecisionRequest,
    ServeCheckRequest,
    TemperatureRequest,
)
from posenc.settings import Settings

Case = tuple[str, str, Callable[[], Plan[Any]]]


def _rope(method: str = "rope", rotary_dim: int = 128, **params: Any) -> dict[str, Any]:
    return {"method": method, "params": params, "rotary_dim": rotary_dim}


def _tensor_plan(route: str, body: dict[str, Any]) -> Callable[[], Plan[Any]]:
    models = {"bias": BiasRequest, "rotary": RotaryRequest, "attention": AttentionRequest}

    def make() -> Plan[Any]:
        prepared = prepare(route, models[route].model_validate(body))  # type: ignore[arg-type]
        return Plan(prepared.cost, prepared.run)

    return make


def cases() -> list[Case]:
    llama = get_preset("llama-3.1-8b")
    gemma = get_preset("gemma-3-4b")
    llama4 = get_preset("llama-4-scout-17b-16e")
    dynamic = _rope("rope_dynamic_ntk", 128, factor=4.0, original_max_position_embeddings=64)
    rows: list[Case] = []
    for positions, dim in ((4095, 128), (65535, 128), (8191, 1024), (1023, 8192)):
        request = CompareRequest.model_validate(
            {"setup_a": _rope(rotary_dim=dim), "setup_b": _rope("rope_ntk", dim, factor=2.0), "max_position": positions}
        )
        rows.append(("rope.compare", f"N={positions + 1} d={dim}", lambda r=request: plans.plan_compare(r)))
    for prefill, steps, setup in ((64, 256, _rope()), (64, 256, dynamic), (512, 1024, _rope()), (64, 512, dynamic)):
        request = DecodeRequest.model_validate({"setup": setup, "prefill": prefill, "steps": steps})
        label = f"P={prefill} S={steps} {setup['method']}"
        rows.append(("rope.decode", label, lambda r=request: plans.plan_decode(r)))
    for per_band, dim in ((256, 128), (1024, 128), (1024, 1024)):
        request = PrecisionRequest.model_validate({"setup": _rope(rotary_dim=dim), "positions_per_band": per_band})
        rows.append(("rope.precision", f"P={per_band} d={dim}", lambda r=request: plans.plan_precision(r)))
    for dim in (128, 8192):
        setup = _rope("rope_yarn", dim, factor=4.0, original_max_position_embeddings=512)
        request = FrequenciesRequest.model_validate({"setup": setup, "train_length": 4096})
        rows.append(("rope.frequencies", f"d={dim}", lambda r=request: plans.plan_frequencies(r)))
    for length in (4096, 1 << 18):
        request = TemperatureRequest.model_validate({"config": llama4, "layer": 3, "length": length})
        rows.append(("rope.temperature", f"N={length}", lambda r=request: plans.plan_temperature(r)))
    for grid in ((1, 256, 256), (16, 256, 256)):
        request = PositionIdsRequest.model_validate({"segments": [{"kind": "video", "grid": list(grid)}]})
        rows.append(("rope.position_ids", f"grid={grid}", lambda r=request: plans.plan_position_ids(r)))
    for length, dim, heads, method in ((64, 128, 4, "rope"), (128, 64, 4, "rope"), (128, 128, 8, "alibi"),
                                       (256, 32, 2, "rope_dynamic_ntk"), (128, 128, 4, "rope_yarn")):  # fmt: skip
        setup = {"method": method, "rotary_dim": dim}
        if method in ("rope_dynamic_ntk", "rope_yarn"):
            setup["params"] = {"factor": 4.0, "original_max_position_embeddings": length // 4}
        request = ServeCheckRequest.model_validate({"setup": setup, "length": length, "heads": heads})
        label = f"N={length} d={dim} H={heads} {method}"
        rows.append(("rope.serve_check", label, lambda r=request: plans.plan_serve_check(r)))
    request = ConvertRequest.model_validate({"config": gemma, "to": "v5"})
    rows.append(("models.convert", "gemma-3-4b", lambda r=request: plans.plan_convert(r)))
    for layers in (32, 1024):
        config = llama | {"num_hidden_layers": layers}
        resolve = ResolveRequest.model_validate({"config": config})
        rows.append(("models.resolve", f"layers={layers}", lambda r=resolve: plans.plan_resolve(r.config, r.preset)))
    rows.append(("bias", "alibi (8, 2048, 2048)", _tensor_plan("bias", {"method": "alibi", "num_heads": 8,
                                                                       "query_length": 2048})))  # fmt: skip
    q = {"random": {"shape": [1, 32, 2048, 128], "seed": 0}}
    rows.append(("rotary", "rope (1, 32, 2048, 128)", _tensor_plan("rotary", {"method": "rope", "q": q, "k": q})))
    q = {"random": {"shape": [1, 8, 1024, 64], "seed": 0}}
    rows.append(("attention", "alibi (1, 8, 1024, 64)", _tensor_plan("attention", {"method": "alibi", "q": q, "k": q})))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="routes to run, e.g. rope.compare models.resolve")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    settings = Settings()
    threads = runtime.gateway_torch_threads(settings.torch_threads, settings.compute_concurrency)
    torch.set_num_threads(threads)  # as the gateway runs them
    print(f"torch threads: {threads} (the gateway's: cores / compute_concurrency)")
    print(f"{'route':18s} {'case':28s} {'plan ms':>8s} {'estimate':>14s} {'measured ns':>14s} {'ns/unit':>8s}")
    for route, label, make in cases():
        if args.only and route not in args.only:
            continue
        start = time.perf_counter()
        plan = make()
        planned = time.perf_counter() - start
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            plan.run()
            times.append(time.perf_counter() - start)
        measured = statistics.median(times) * 1e9
        work = plan.cost.work
        print(f"{route:18s} {label:28s} {planned * 1e3:8.2f} {work:14,d} {measured:14,.0f} {measured / work:8.2f}")


if __name__ == "__main__":
    main()
