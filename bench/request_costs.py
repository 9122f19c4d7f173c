"""The one cost model against the clock: every costed route's estimated work (in work units, about 1 ns of one
core each, ``posenc.compute.cost``) against the time its work really takes here, at sizes from small to the
default budget (``max_request_work``).

    .venv/bin/python bench/request_costs.py            # every route
    .venv/bin/python bench/request_costs.py --only rope.compare rope.decode
    .venv/bin/python bench/request_costs.py --params     # each method's cost-driving params at the budget edge

Prints, per case: the estimate, the measured time (median of --repeats runs of the plan's ``run``, in this
process, with torch's default threads), and their ratio ns / unit. A ratio well above 1 means the route's
constant under-charges on this machine (a request at the budget would take longer than the budget says); well
below 1, it over-charges. The planning itself (validation, a config's resolution) is timed apart.

``--params``: for every method with a ``param_cost``, each param its declaration names, through every route of
the method's kind that takes it, a small request (8 tokens, 2 heads, 16 features) at the largest value of the
param within the default budgets (a binary search over the plans): the estimate, one run's time, ns / unit, the
estimated memory and the run's peak resident-memory growth (VmHWM after resetting it).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from posenc import runtime
from posenc.compute import prepare
from posenc.compute import rope as plans
from posenc.compute.cost import Budgets, Plan
from posenc.errors import BudgetExceeded, FieldErrors, InvalidInput
from posenc.pe import list_methods
from posenc.pe.registry import MethodSpec
from posenc.pe.types import Extent
from posenc.real_models.presets import get_preset
from posenc.schemas.compute import AttentionRequest, BiasRequest, EncodingRequest, RotaryRequest
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


def _tensor_plan(route: str, body: dict[str, Any], model: Any = None) -> Callable[[], Plan[Any]]:
    models: dict[str, Any] = {"bias": BiasRequest, "rotary": RotaryRequest, "attention": AttentionRequest}

    def make() -> Plan[Any]:
        prepared = prepare(route, (model or models[route]).model_validate(body))  # type: ignore[arg-type]
        return Plan(prepared.cost, prepared.run)

    return make


def cases() -> list[Case]:
    llama = get_preset("llama-3.1-8b")
    gemma = get_preset("gemma-3-4b")
    llama4 = get_preset("llama-4-scout-17b-16e")
    dynamic = _rope("rope_dynamic_ntk", 128, factor=4.0, original_max_position_embeddings=64)
    rows: list[Case] = []
    request: Any
    for positions, dim in ((4095, 128), (65535, 128), (8191, 1024), (1023, 8192)):
        request = CompareRequest.model_validate(
            {"setup_a": _rope(rotary_dim=dim), "setup_b": _rope("rope_ntk", dim, factor=2.0), "max_position": positions}
        )
        rows.append(("rope.compare", f"N={positions + 1} d={dim}", functools.partial(plans.plan_compare, request)))
    for prefill, steps, setup in ((64, 256, _rope()), (64, 256, dynamic), (512, 1024, _rope()), (64, 512, dynamic)):
        request = DecodeRequest.model_validate({"setup": setup, "prefill": prefill, "steps": steps})
        label = f"P={prefill} S={steps} {setup['method']}"
        rows.append(("rope.decode", label, functools.partial(plans.plan_decode, request)))
    for per_band, dim in ((256, 128), (1024, 128), (1024, 1024)):
        request = PrecisionRequest.model_validate({"setup": _rope(rotary_dim=dim), "positions_per_band": per_band})
        rows.append(("rope.precision", f"P={per_band} d={dim}", functools.partial(plans.plan_precision, request)))
    for dim in (128, 8192):
        setup = _rope("rope_yarn", dim, factor=4.0, original_max_position_embeddings=512)
        request = FrequenciesRequest.model_validate({"setup": setup, "train_length": 4096})
        rows.append(("rope.frequencies", f"d={dim}", functools.partial(plans.plan_frequencies, request)))
    for length in (4096, 1 << 18):
        request = TemperatureRequest.model_validate({"config": llama4, "layer": 3, "length": length})
        rows.append(("rope.temperature", f"N={length}", functools.partial(plans.plan_temperature, request)))
    for grid in ((1, 256, 256), (16, 256, 256)):
        request = PositionIdsRequest.model_validate({"segments": [{"kind": "video", "grid": list(grid)}]})
        rows.append(("rope.position_ids", f"grid={grid}", functools.partial(plans.plan_position_ids, request)))
    for length, dim, heads, method in ((64, 128, 4, "rope"), (128, 64, 4, "rope"), (128, 128, 8, "alibi"),
                                       (256, 32, 2, "rope_dynamic_ntk"), (128, 128, 4, "rope_yarn")):  # fmt: skip
        setup = {"method": method, "rotary_dim": dim}
        if method in ("rope_dynamic_ntk", "rope_yarn"):
            setup["params"] = {"factor": 4.0, "original_max_position_embeddings": length // 4}
        request = ServeCheckRequest.model_validate({"setup": setup, "length": length, "heads": heads})
        label = f"N={length} d={dim} H={heads} {method}"
        rows.append(("rope.serve_check", label, functools.partial(plans.plan_serve_check, request)))
    request = ConvertRequest.model_validate({"config": gemma, "to": "v5"})
    rows.append(("models.convert", "gemma-3-4b", functools.partial(plans.plan_convert, request)))
    for layers in (32, 1024):
        config = llama | {"num_hidden_layers": layers}
        resolve = ResolveRequest.model_validate({"config": config})
        rows.append(
            (
                "models.resolve",
                f"layers={layers}",
                functools.partial(plans.plan_resolve, resolve.config, resolve.preset),
            )
        )
    rows.append(("bias", "alibi (8, 2048, 2048)", _tensor_plan("bias", {"method": "alibi", "num_heads": 8,
                                                                       "query_length": 2048})))  # fmt: skip
    q = {"random": {"shape": [1, 32, 2048, 128], "seed": 0}}
    rows.append(("rotary", "rope (1, 32, 2048, 128)", _tensor_plan("rotary", {"method": "rope", "q": q, "k": q})))
    q = {"random": {"shape": [1, 8, 1024, 64], "seed": 0}}
    rows.append(("attention", "alibi (1, 8, 1024, 64)", _tensor_plan("attention", {"method": "alibi", "q": q, "k": q})))
    return rows


PARAM_ROUTES: dict[str, tuple[str, ...]] = {
    "absolute": ("encodings", "attention"),
    "bias": ("bias", "attention", "serve_check"),
    "rotary": ("rotary", "attention", "frequencies", "precision", "compare", "decode", "serve_check"),
    "score_mod": ("attention", "serve_check"),
    "attention": ("attention", "serve_check"),
}
TOKENS, GRID, HEADS, DIM = 8, [2, 4], 2, 16
COMPANIONS: dict[tuple[str, str], Callable[[int], dict[str, Any]]] = {
    ("t5", "num_buckets"): lambda value: {"max_distance": max(128, value)},  # exact buckets below max_distance
}


def _param_plan(spec: MethodSpec, route: str, name: str, value: int) -> Plan[Any]:
    """The small request of ``route`` with ``spec`` at ``name = value`` (a block size's request is twice as wide)."""
    companion = COMPANIONS.get((spec.name, name))
    params = {name: value} | (companion(value) if companion else {})
    dim = max(DIM, 2 * value) if name == "block_size" else DIM
    method: dict[str, Any] = {"method": spec.name, "params": params}
    grid: dict[str, Any] = {} if spec.axes == 1 else {"grid": GRID}
    q = {"random": {"shape": [1, HEADS, TOKENS, dim], "seed": 0}}
    setup = method | {"rotary_dim": dim}
    if route == "encodings":
        where = {"length": TOKENS} if spec.axes == 1 else grid
        return _tensor_plan(route, method | where | {"dim": dim}, EncodingRequest)()
    if route == "bias":
        return _tensor_plan(route, method | {"num_heads": HEADS, "query_length": TOKENS} | grid)()
    if route == "rotary":
        return _tensor_plan(route, method | {"q": q, "k": q} | grid)()
    if route == "attention":
        x = {"random": {"shape": [1, TOKENS, dim], "seed": 1}}
        return _tensor_plan(route, method | {"q": q, "k": q, "v": q, "x": x} | grid)()
    if route == "frequencies":
        return plans.plan_frequencies(FrequenciesRequest.model_validate({"setup": setup, "train_length": TOKENS}))
    if route == "precision":
        return plans.plan_precision(PrecisionRequest.model_validate({"setup": setup, "positions_per_band": 2}))
    if route == "compare":
        body = {"setup_a": setup, "setup_b": _rope(rotary_dim=dim), "max_position": TOKENS - 1}
        return plans.plan_compare(CompareRequest.model_validate(body))
    if route == "decode":
        return plans.plan_decode(DecodeRequest.model_validate({"setup": setup, "prefill": 4, "steps": 4}))
    body = {"setup": setup, "length": TOKENS, "heads": HEADS}
    return plans.plan_serve_check(ServeCheckRequest.model_validate(body))


def _within(budgets: Budgets, spec: MethodSpec, route: str, name: str, value: int) -> Plan[Any] | None:
    try:
        plan = _param_plan(spec, route, name, value)
        budgets.check(plan.cost, "", json_answer=False)
    except (BudgetExceeded, InvalidInput, FieldErrors):
        return None
    return plan


def _peak_rss() -> int:
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def param_edges(budgets: Budgets) -> None:
    """The ``--params`` table (see the module docstring)."""
    print(f"{'method':16s} {'route':12s} {'param':16s} {'edge':>8s} {'estimate':>14s} {'measured ns':>14s} "
          f"{'ns/unit':>8s} {'est MB':>8s} {'peak MB':>8s}")  # fmt: skip
    for spec in list_methods():
        if spec.param_cost is None:
            continue
        schema = spec.params_model.model_json_schema()["properties"]
        defaults = spec.params_model()
        for name in spec.cost_of(defaults, Extent(TOKENS, TOKENS, HEADS, DIM)).params:
            field = schema.get(name, {})
            if field.get("type") != "integer" or "maximum" not in field:
                continue
            default, step = int(getattr(defaults, name)), int(field.get("multipleOf", 1))
            candidates: list[int] | range = range(default, int(field["maximum"]) + 1, step)
            if name == "block_size":
                candidates = [1 << k for k in range(int(field["maximum"]).bit_length()) if 1 << k >= default]
            for route in PARAM_ROUTES[spec.kind]:
                try:  # a route that refuses the method (planning or running) has no edge
                    _param_plan(spec, route, name, default).run()
                except InvalidInput:
                    continue
                low, high = 0, len(candidates) - 1
                while low < high:
                    middle = (low + high + 1) // 2
                    if _within(budgets, spec, route, name, candidates[middle]) is not None:
                        low = middle
                    else:
                        high = middle - 1
                plan = _within(budgets, spec, route, name, candidates[low])
                if plan is None:
                    print(f"{spec.name:16s} {route:12s} {name:16s} default over the budgets")
                    continue
                with open("/proc/self/clear_refs", "w") as refs:
                    refs.write("5")  # resets VmHWM to the current resident size
                before = _peak_rss()
                start = time.perf_counter()
                plan.run()
                measured = (time.perf_counter() - start) * 1e9
                peak = (_peak_rss() - before) / 2**20
                work, estimated = plan.cost.work, plan.cost.total_bytes / 2**20
                print(f"{spec.name:16s} {route:12s} {name:16s} {candidates[low]:8d} {work:14,d} {measured:14,.0f} "
                      f"{measured / work:8.2f} {estimated:8.1f} {peak:8.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="routes to run, e.g. rope.compare models.resolve")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--params", action="store_true", help="each method's cost-driving params at the budget edge")
    args = parser.parse_args()
    settings = Settings()
    threads = runtime.gateway_torch_threads(settings.torch_threads, settings.compute_concurrency)
    torch.set_num_threads(threads)  # as the gateway runs them
    print(f"torch threads: {threads} (the gateway's: cores / compute_concurrency)")
    if args.params:
        param_edges(Budgets.from_settings(settings))
        return
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
