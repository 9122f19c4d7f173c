"""Every method's ``param_cost`` against the work its params really make, through every route that takes the
method's kind: at a param's schema maximum a small request is refused with a 413 naming the param, or it is
within the budgets and runs within the bounds below; at the budget's edge (the largest value the default budgets
allow) the run stays within them too. A declaration that under-counts lets a request through whose run breaks
the bounds.

The cases are the registry's: every method with a ``param_cost``, every int param with a schema maximum (the
params its declaration names, and any other it could have missed), every route of its kind. Routes that refuse
a method by design (a 422 naming the method) are asserted to refuse it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc import runtime
from posenc.compute import prepare
from posenc.compute import rope as plans
from posenc.compute.cost import Budgets, Cost
from posenc.errors import BudgetExceeded, FieldErrors, InvalidInput
from posenc.pe import list_methods
from posenc.pe.registry import MethodSpec
from posenc.pe.types import Extent
from posenc.schemas.compute import AttentionRequest, BiasRequest, EncodingRequest, RotaryRequest
from posenc.schemas.rope import CompareRequest, DecodeRequest, FrequenciesRequest, PrecisionRequest, ServeCheckRequest
from posenc.settings import Settings

MiB = 1 << 20
# A work unit is about 1 ns of one core; the machine running the tests may be loaded by other processes, so the
# time bound is generous: four times the estimate, plus half a second for the fixed costs of a small run.
TIME_PER_UNIT_S = 4e-9
TIME_SLACK_S = 0.5
# Memory does not depend on the load: the peak may reach twice the estimated bytes (float64 intermediates the
# estimate counts once, torch's temporaries) plus the allocator's and the interpreter's own growth.
BYTES_FACTOR = 2
BYTES_SLACK = 64 * MiB
# An edge below the maximum is run only with at least this much estimated work (smaller ones are within the
# slack anyway); this keeps the file's wall time to about a minute. A maximum within the budgets is always run.
RUN_MIN_WORK = 10_000_000

TOKENS = (
    8  # a small request: 8 tokens (a 2 x 4 grid for 2-axis methods, a path for graph methods), 2 heads, 16 features
)
GRID = [2, 4]
PATH = {"num_nodes": TOKENS, "edges": [[i, i + 1] for i in range(TOKENS - 1)]}  # graph methods: a path of 8 nodes
HEADS = 2
DIM = 16

ROUTES_BY_KIND: dict[str, tuple[str, ...]] = {
    "absolute": ("encodings", "attention"),
    "bias": ("bias", "attention", "serve_check"),
    "rotary": ("rotary", "attention", "frequencies", "precision", "compare", "decode", "serve_check"),
    "score_mod": ("attention", "serve_check"),
    "attention": ("attention", "serve_check"),
}
TENSOR_ROUTES = ("encodings", "bias", "rotary", "attention")
# Params whose valid values depend on another: the companion values sent with each value (T5's exact buckets,
# a quarter of num_buckets, must stay below max_distance).
COMPANIONS: dict[tuple[str, str], Callable[[int], dict[str, Any]]] = {
    ("t5", "num_buckets"): lambda value: {"max_distance": max(128, value)},
}
# Params a method requires (no default), at values that fit the small request.
REQUIRED: dict[str, dict[str, Any]] = {"swin": {"window": GRID}, "fope": {"train_length": 64}}
IDENTIFIERS = 1 << 32  # an int param with a maximum this large is an identifier (a seed), not a size


def int_params(spec: MethodSpec) -> dict[str, tuple[int, int, int]]:
    """The int params with a schema maximum (seeds aside): name -> (default, maximum, the multiple it must be)."""
    schema = spec.params_model.model_json_schema()
    defaults = spec.params_model(**REQUIRED.get(spec.name, {}))
    found = {}
    for name, field in schema.get("properties", {}).items():
        if field.get("type") != "integer" or not isinstance(getattr(defaults, name), int):
            continue
        if field.get("maximum", IDENTIFIERS) < IDENTIFIERS:
            found[name] = (int(getattr(defaults, name)), int(field["maximum"]), int(field.get("multipleOf", 1)))
    return found


def cost_params(spec: MethodSpec) -> list[str]:
    """The params its declaration names at default params, then every other int param with a maximum."""
    defaults = spec.params_model(**REQUIRED.get(spec.name, {}))
    declared = spec.cost_of(defaults, Extent(TOKENS, TOKENS, HEADS, DIM)).params
    bounded = int_params(spec)
    return [name for name in declared if name in bounded] + [name for name in bounded if name not in declared]


def cases() -> Iterator[Any]:
    for spec in list_methods():
        if spec.param_cost is None:
            continue
        for name in cost_params(spec):
            for route in ROUTES_BY_KIND[spec.kind]:
                yield pytest.param(spec, route, name, id=f"{spec.name}-{route}-{name}")


def dim_for(name: str, value: int) -> int:
    """The head dim of the request: a block size must divide it (twice: block-rotation methods that split the
    blocks over two axes)."""
    return max(DIM, 2 * value) if name == "block_size" else DIM


def values(name: str, default: int, maximum: int, step: int) -> list[int] | range:
    """The values the edge search walks, ascending: every valid int, or the powers of two for a block size."""
    if name == "block_size":
        return [1 << k for k in range(maximum.bit_length()) if default <= 1 << k <= maximum]
    return range(default, maximum + 1, step)


def params_at(spec: MethodSpec, name: str, value: int) -> dict[str, Any]:
    companion = COMPANIONS.get((spec.name, name))
    return REQUIRED.get(spec.name, {}) | {name: value} | (companion(value) if companion is not None else {})


def _random(shape: list[int], seed: int) -> dict[str, Any]:
    return {"random": {"shape": shape, "seed": seed}}


@dataclass
class Planned:
    cost: Cost
    run: Callable[[], Any]


def plan(spec: MethodSpec, route: str, params: dict[str, Any], dim: int) -> Planned:
    """The small request of ``route`` with ``spec`` at ``params``, planned (nothing run)."""
    method: dict[str, Any] = {"method": spec.name, "params": params}
    grid: dict[str, Any] = {} if spec.axes == 1 else {"grid": GRID} if spec.axes > 1 else {"graph": PATH}
    where: dict[str, Any] = {"length": TOKENS} if spec.axes == 1 else grid
    shape = [1, HEADS, TOKENS, dim]
    if route in TENSOR_ROUTES:
        body: Any
        if route == "encodings":
            body = EncodingRequest.model_validate(method | where | {"dim": dim})
        elif route == "bias":
            length = {"query_length": TOKENS} if spec.axes == 1 else {}
            body = BiasRequest.model_validate(method | {"num_heads": HEADS} | length | grid)
        elif route == "rotary":
            body = RotaryRequest.model_validate(method | {"q": _random(shape, 0), "k": _random(shape, 1)} | grid)
        else:
            tensors = {"q": _random(shape, 0), "k": _random(shape, 1), "v": _random(shape, 2)}
            body = AttentionRequest.model_validate(method | tensors | {"x": _random([1, TOKENS, dim], 3)} | grid)
        prepared = prepare(route, body)  # type: ignore[arg-type]
        return Planned(prepared.cost, prepared.run)
    setup = method | {"rotary_dim": dim}
    rope_plan: Any
    if route == "frequencies":
        rope_plan = plans.plan_frequencies(FrequenciesRequest.model_validate({"setup": setup, "train_length": TOKENS}))
    elif route == "precision":
        rope_plan = plans.plan_precision(PrecisionRequest.model_validate({"setup": setup, "positions_per_band": 2}))
    elif route == "compare":
        other = {"method": "rope", "rotary_dim": dim}
        request = {"setup_a": setup, "setup_b": other, "max_position": TOKENS - 1}
        rope_plan = plans.plan_compare(CompareRequest.model_validate(request))
    elif route == "decode":
        rope_plan = plans.plan_decode(DecodeRequest.model_validate({"setup": setup, "prefill": 4, "steps": 4}))
    else:
        request = {"setup": setup, "length": TOKENS, "heads": HEADS}
        rope_plan = plans.plan_serve_check(ServeCheckRequest.model_validate(request))
    return Planned(rope_plan.cost, rope_plan.run)


BUDGETS = Budgets.from_settings(Settings())


def within(planned: Planned) -> bool:
    try:
        BUDGETS.check(planned.cost, "", json_answer=False)
    except BudgetExceeded:
        return False
    return True


def names_param(locs: Any, name: str) -> bool:
    return any(tuple(loc[-2:]) == ("params", name) for loc in locs)


def outcome(call: Callable[[], Any]) -> Any:
    """What ``call`` returns, or the ``InvalidInput``, ``FieldErrors`` or ``BudgetExceeded`` it raises."""
    try:
        return call()
    except (InvalidInput, FieldErrors, BudgetExceeded) as exc:
        return exc


def error_locs(exc: InvalidInput | FieldErrors | BudgetExceeded) -> list[Any]:
    if isinstance(exc, InvalidInput):
        return [exc.loc]
    if isinstance(exc, FieldErrors):
        return [error["loc"] for error in exc.errors]
    return list(exc.fields)


def plan_at(spec: MethodSpec, route: str, name: str, value: int) -> Planned | None:
    """The plan at ``name = value``; None where the value is refused (over a budget, or a 422 naming the param)."""
    planned = outcome(lambda: plan(spec, route, params_at(spec, name, value), dim_for(name, value)))
    if isinstance(planned, Planned):
        return planned if within(planned) else None
    assert names_param(error_locs(planned), name), planned
    return None


def _peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def measure(run: Callable[[], Any]) -> tuple[float, int]:
    """Seconds and peak resident-memory growth of one ``run``, with torch's threads as the gateway sets them."""
    settings = Settings()
    previous = torch.get_num_threads()
    torch.set_num_threads(runtime.gateway_torch_threads(settings.torch_threads, settings.compute_concurrency))
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current resident size
        before = _peak_rss()
        start = time.perf_counter()
        run()
        seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(previous)
    return seconds, _peak_rss() - before


def assert_within_bounds(planned: Planned, what: str) -> None:
    seconds, grown = measure(planned.run)
    cost = planned.cost
    time_bound = TIME_PER_UNIT_S * cost.work + TIME_SLACK_S
    bytes_bound = BYTES_FACTOR * cost.total_bytes + BYTES_SLACK
    assert seconds <= time_bound, f"{what}: {seconds:.2f} s for {cost.work:,} work units (bound {time_bound:.2f} s)"
    assert grown <= bytes_bound, f"{what}: peak grew {grown / MiB:.0f} MiB for {cost.total_bytes / MiB:.1f} MiB"


@pytest.mark.parametrize(("spec", "route", "name"), list(cases()))
def test_param_cost_bounds_the_run(spec: MethodSpec, route: str, name: str) -> None:
    default, maximum, step = int_params(spec)[name]
    maximum -= (maximum - default) % step
    # the route may refuse the method by design (a bias method on a rotary route), planning or running it
    refused = outcome(lambda: plan(spec, route, params_at(spec, name, default), dim_for(name, default)).run())
    if isinstance(refused, InvalidInput):
        assert refused.loc[-1] == "method", refused
        again = outcome(lambda: plan(spec, route, params_at(spec, name, maximum), dim_for(name, maximum)).run())
        assert isinstance(again, InvalidInput), again
        assert again.loc == refused.loc, again
        return
    assert not isinstance(refused, Exception), refused
    # (a) the maximum: refused naming the param (a 413, or a 422 on the value), or within the budgets and then run
    # like the edge below
    at_max = outcome(lambda: plan(spec, route, params_at(spec, name, maximum), dim_for(name, maximum)))
    if isinstance(at_max, Planned):
        at_max = outcome(lambda: BUDGETS.check(at_max.cost, "", json_answer=False))
    if isinstance(at_max, InvalidInput | FieldErrors | BudgetExceeded):
        assert names_param(error_locs(at_max), name), f"{at_max!r} does not name params.{name}"
    # (b) the edge: the largest value within the budgets (planning only), run once
    candidates = values(name, default, maximum, step)
    assert plan_at(spec, route, name, candidates[0]) is not None, "the default params are over the budgets"
    low, high = 0, len(candidates) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if plan_at(spec, route, name, candidates[middle]) is not None:
            low = middle
        else:
            high = middle - 1
    edge = candidates[low]
    planned = plan_at(spec, route, name, edge)
    assert planned is not None
    if edge == maximum or (edge > default and planned.cost.work > RUN_MIN_WORK):
        assert_within_bounds(planned, f"{spec.name} via {route} at {name}={edge}")


BLOCK_ROTATIONS = [spec for spec in list_methods() if spec.block_rotation is not None]


@pytest.mark.parametrize("spec", BLOCK_ROTATIONS, ids=lambda spec: spec.name)
@pytest.mark.parametrize("per_head", [False, True])
def test_a_block_rotation_is_sized_from_its_params_as_its_generators_come_out(spec: MethodSpec, per_head: bool) -> None:
    """The rotation matrices a block rotation is charged for (``block_rotation``, read off the params before any
    draw) are the ones its drawn generators make: (Hg heads) x tokens x rotary_dim x b."""
    from posenc.pe.appliers import Layer, rotary_applier
    from posenc.pe.types import RotaryGenerators

    raw = {"per_head": per_head} if "per_head" in spec.params_model.model_fields else {}
    if "block_size" in spec.params_model.model_fields:
        raw["block_size"] = 8
    applier = rotary_applier(spec, spec.parse_params(raw), Layer(num_heads=4, head_dim=32, causal=False))
    generators = applier.frequencies(16, torch.device("cpu"))
    assert isinstance(generators, RotaryGenerators)
    drawn = int(generators.generators.shape[0]) * 16 * applier.rotary_dim * generators.block_size
    assert applier.rotation_elements(16) == drawn
    assert {spec.name for spec in BLOCK_ROTATIONS} >= {"liere", "comrope", "rope_mixed"}
