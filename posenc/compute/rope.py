"""``/v1/rope/*`` and ``/v1/models/*``: the RoPE diagnostics and real-model requests, each planned (validated,
resolved, costed) before it runs.

Every plan names its errors relative to the request (``setup.config.rope_theta``, ``max_position``); the
gateway adds ``body``. A config is resolved while planning (its size is bounded by
``posenc.real_models.config_fields``), so the gateway plans these requests in a compute slot too. The cost
formulas are in work units (about 1 ns of one core, ``posenc.compute.cost``), measured against the routes by
``bench/request_costs.py``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from pydantic import ValidationError

from posenc.compute.common import method_cost
from posenc.compute.cost import Cost, Plan, fields
from posenc.compute.inputs import elements
from posenc.errors import located
from posenc.pe import UnknownMethodError, get_method
from posenc.pe.types import Extent
from posenc.real_models import diagnostics
from posenc.real_models.config_fields import check_json_value
from posenc.real_models.configs import config_layer, convert_config, query_temperature, resolve_config
from posenc.real_models.engine_notes import engine_notes
from posenc.real_models.mrope_positions import Segment, mrope_position_ids
from posenc.real_models.presets import get_preset
from posenc.real_models.serving import LOGIT_ELEMENTS, Schedules, ServingLayer, serve_check, serving_layer
from posenc.schemas.rope import (
    CompareRequest,
    ConvertRequest,
    DecodeRequest,
    FrequenciesRequest,
    PermutationRequest,
    PositionIdsRequest,
    PrecisionRequest,
    ServeCheckRequest,
    SetupIn,
    TemperatureRequest,
)
from posenc.schemas.tensors import tensor_fields

# Work units per element of each route's inner loop (about 1 ns of one core each).
WORK_PER_JSON_ELEMENT = 60  # building and encoding one number of a JSON answer
WORK_PER_PAIR_REPORT = 20_000  # frequencies: one pair's row (a dataclass, its band, its JSON)
WORK_PER_SCAN = 20_000_000  # compare: the two appliers, the probe vectors and the first chunk's set-up
WORK_PER_CONFIG = 1_000_000  # convert: the config resolved before it is rewritten
WORK_PER_ROTATED_FEATURE = 40  # precision: one feature of one position rotated in two dtypes
WORK_PER_COMPARED_FEATURE = 4  # compare: one feature of one position (its angle, the rotated probe), in chunks
WORK_PER_DECODE_STEP = 400_000  # decode: one step's fixed cost (frequencies for the length, a few small tensors)
WORK_PER_RECOMPUTED_FEATURE = 20  # decode: one cached key's feature re-rotated and compared
WORK_PER_LAYER = 30_000  # resolve: one layer's entry (its setup, its JSON)
WORK_PER_TOKEN_ID = 30  # position ids: one (t, h, w) id
WORK_PER_CONFIG_VALUE = 200  # convert: one value of the config walked, copied and sent back


def layer_setup(config: dict[str, Any], layer: int) -> diagnostics.RotarySetup:
    """The rotation of ``layer`` of a model config; errors at ("config", …) and ("layer",)."""
    return diagnostics.rotation(None, {}, 0, "half", config, layer)


def setup_from(setup: SetupIn) -> diagnostics.RotarySetup:
    """A request's setup: a method with its params, or a config's layer resolved (errors relative to it)."""
    return diagnostics.rotation(setup.method, setup.params, setup.rotary_dim, setup.pairing, setup.config, setup.layer)


def _setup(setup: SetupIn, field: str) -> diagnostics.RotarySetup:
    with located((field,)):
        return setup_from(setup)


def _method_cost(setup: diagnostics.RotarySetup, extent: Extent, field: str, *, times: int = 1) -> Cost:
    """What a setup's method params make it compute at ``extent``, ``times`` over (``method_cost``), with the
    params' own tensors as inputs, named under ``field``; nothing for a method or params that are refused (the
    setup's error then comes when it is applied, before any work)."""
    loc: tuple[str, ...] = (field, "params") if setup.layer is None else (field, "config")
    try:
        spec = get_method(setup.method)
        params = spec.parse_params(dict(setup.params))
    except (UnknownMethodError, ValidationError):
        return Cost()
    cost = method_cost(spec, params, extent, loc)
    inputs = elements(tensor_fields(params))
    named = (*cost.fields, loc) if inputs else cost.fields
    return Cost(workspace_bytes=cost.workspace_bytes, work=cost.work * times, fields=named, input_elements=inputs)


def _json_cost(elements: int, work: int, *locs: str) -> Cost:
    return Cost(json_elements=elements, work=work + WORK_PER_JSON_ELEMENT * elements, fields=fields(*locs))


# ------------------------------------------------------------------------------------------------ routes
def plan_frequencies(request: FrequenciesRequest) -> Plan[dict[str, Any]]:
    """Per pair: 9 numbers; the pairs' rows are built in Python."""
    setup = _setup(request.setup, "setup")
    pairs = setup.rotary_dim // 2
    cost = _json_cost(9 * pairs, WORK_PER_PAIR_REPORT * pairs, "setup.rotary_dim")
    cost = cost.plus(_method_cost(setup, Extent(1, 1, 1, setup.rotary_dim), "setup"))
    run = functools.partial(_frequencies, setup, request.train_length)
    return Plan(cost, run, "use a smaller rotary_dim")


def _frequencies(setup: diagnostics.RotarySetup, train_length: int) -> dict[str, Any]:
    return diagnostics.frequencies(setup, train_length).to_json()


def plan_precision(request: PrecisionRequest) -> Plan[dict[str, Any]]:
    """Per band of P positions: q and k rotated in two dtypes (P·d features each) and two (P, d) x (d, P)
    logit products."""
    setup = _setup(request.setup, "setup")
    bands = len(request.positions_bands) if request.positions_bands is not None else 4
    positions, dim = request.positions_per_band, setup.rotary_dim
    rotated = 4 * positions * dim * WORK_PER_ROTATED_FEATURE
    logits = 2 * positions * positions * dim // 8 + 8 * positions * positions
    cost = Cost(
        json_elements=8 * bands,
        work=bands * (rotated + logits),
        workspace_bytes=bands * 8 * (4 * positions * dim + 3 * positions * positions),
        fields=fields("positions_per_band", "positions_bands", "setup.rotary_dim"),
    ).plus(_method_cost(setup, Extent(positions, positions, 1, dim), "setup", times=2 * bands))
    run = functools.partial(
        _precision, setup, request.dtype, request.positions_bands, request.seed, request.positions_per_band
    )
    return Plan(cost, run, "use fewer positions_per_band, fewer positions_bands or a smaller rotary_dim")


def _precision(
    setup: diagnostics.RotarySetup, dtype: str, bands: list[list[int]] | None, seed: int, per_band: int
) -> dict[str, Any]:
    return diagnostics.precision(setup, dtype, bands, seed=seed, positions_per_band=per_band).to_json()


def plan_compare(request: CompareRequest) -> Plan[dict[str, Any]]:
    """Every position 0 … max_position, both setups: the angles of every pair and a rotated probe vector."""
    setup_a, setup_b = _setup(request.setup_a, "setup_a"), _setup(request.setup_b, "setup_b")
    positions = request.max_position + 1
    features = setup_a.rotary_dim + setup_b.rotary_dim
    cost = Cost(
        json_elements=20,
        work=WORK_PER_SCAN + positions * features * WORK_PER_COMPARED_FEATURE,
        workspace_bytes=min(positions, diagnostics.scan_chunk(setup_a.rotary_dim)) * features * 8 * 6,
        fields=fields("max_position", "setup_a.rotary_dim", "setup_b.rotary_dim"),
    )
    for setup, field in ((setup_a, "setup_a"), (setup_b, "setup_b")):  # the frequencies of every chunk
        chunk = min(positions, diagnostics.scan_chunk(setup.rotary_dim))
        cost = cost.plus(
            _method_cost(setup, Extent(chunk, chunk, 1, setup.rotary_dim), field, times=-(-positions // chunk))
        )
    run = functools.partial(
        _compare,
        setup_a,
        setup_b,
        request.max_position,
        request.tolerance_angle,
        request.tolerance_logit,
        request.seed,
    )
    return Plan(cost, run, "scan fewer positions (max_position) or compare a smaller rotary_dim")


def _compare(
    setup_a: diagnostics.RotarySetup,
    setup_b: diagnostics.RotarySetup,
    max_position: int,
    tolerance_angle: float,
    tolerance_logit: float,
    seed: int,
) -> dict[str, Any]:
    return diagnostics.compare(setup_a, setup_b, max_position, tolerance_angle, tolerance_logit, seed).to_json()


def plan_decode(request: DecodeRequest) -> Plan[dict[str, Any]]:
    """Per step: the new key and the query rotated (2·d features) and the step's fixed cost; for a rotation that
    changes with the length (dynamic NTK past its original length), also every cached key re-rotated and compared
    (P + s + 1 keys of d features at step s). Whether it changes is read off the setup's frequencies at the first
    and the last length (two small evaluations), so a static rotation is not charged for re-rotations."""
    setup = _setup(request.setup, "setup")
    prefill, steps, dim = request.prefill, request.steps, setup.rotary_dim
    with located(("setup",)):
        changes = diagnostics.rotation_changes(setup, prefill, prefill + steps)
    work = (prefill + 2 * steps) * dim * WORK_PER_RECOMPUTED_FEATURE + steps * WORK_PER_DECODE_STEP
    if changes:
        keys = steps * (prefill + (steps + 1) // 2)  # Σ_s (P + s + 1): the cache's keys over all steps
        work += keys * dim * WORK_PER_RECOMPUTED_FEATURE
    cost = Cost(
        json_elements=4 * steps + 16,
        work=work + WORK_PER_JSON_ELEMENT * 4 * steps,
        workspace_bytes=4 * (prefill + steps) * dim * 8,
        fields=fields("prefill", "steps", "setup.rotary_dim"),
    ).plus(_method_cost(setup, Extent(prefill + steps, prefill + steps, 1, dim), "setup", times=steps + 1))
    run = functools.partial(_decode, setup, prefill, steps, request.tolerance, request.seed)
    return Plan(cost, run, "decode fewer steps, after a shorter prefill, or with a smaller rotary_dim")


def _decode(setup: diagnostics.RotarySetup, prefill: int, steps: int, tolerance: float, seed: int) -> dict[str, Any]:
    return diagnostics.decode(setup, prefill, steps, tolerance=tolerance, seed=seed).to_json()


def plan_permutation(request: PermutationRequest) -> Plan[list[int]]:
    cost = _json_cost(request.head_dim, 10 * request.head_dim, "head_dim")
    run = functools.partial(
        diagnostics.pairing_permutation, request.head_dim, request.to, rotary_dim=request.rotary_dim
    )
    return Plan(cost, run)


def plan_temperature(request: TemperatureRequest) -> Plan[tuple[bool, list[float], str | None]]:
    """Llama 4's query temperature of a config's layer at ``length`` positions: (applies, per position, formula)."""
    tuning = config_layer(request.config, request.layer).query_temperature
    cost = _json_cost(request.length, 20 * request.length, "length")

    def run() -> tuple[bool, list[float], str | None]:
        if tuning is None:
            return False, [1.0] * request.length, None
        positions = torch.arange(request.length, dtype=torch.int64) + request.offset  # (N,)
        offset = float(tuning.get("position_offset", 1.0))
        scale = query_temperature(positions, float(tuning["floor_scale"]), float(tuning["attn_scale"]), offset)
        return True, scale.tolist(), str(tuning["formula"])

    return Plan(cost, run, "ask for fewer positions (length)")


def plan_position_ids(request: PositionIdsRequest) -> Plan[tuple[list[list[int]], int, list[str]]]:
    """M-RoPE ids: three per token, every segment's tokens counted from the request before any is made."""
    merge = request.spatial_merge_size
    tokens = 0
    for segment in request.segments:
        if segment.kind == "text":
            tokens += segment.length
        elif segment.grid is not None:
            frames, rows, cols = segment.grid
            tokens += frames * (rows // merge) * (cols // merge)
    cost = Cost(
        json_elements=3 * tokens,
        work=3 * tokens * (WORK_PER_TOKEN_ID + WORK_PER_JSON_ELEMENT),
        workspace_bytes=3 * tokens * 8 * 4,
        fields=fields("segments"),
    )
    segments = [
        Segment(
            kind=segment.kind,
            length=segment.length,
            grid=None if segment.grid is None else (segment.grid[0], segment.grid[1], segment.grid[2]),
            seconds_per_grid=segment.seconds_per_grid,
        )
        for segment in request.segments
    ]

    def run() -> tuple[list[list[int]], int, list[str]]:
        result = mrope_position_ids(
            segments,
            rule=request.rule,
            spatial_merge_size=merge,
            tokens_per_second=request.tokens_per_second,
            advance=request.advance,
        )
        return result.ids.tolist(), result.next_position, result.warnings

    return Plan(cost, run, "ask for fewer tokens (shorter text segments, smaller grids, a larger spatial_merge_size)")


def plan_convert(request: ConvertRequest) -> Plan[dict[str, Any]]:
    """The config in the other dialect: about as large as the config sent."""
    values = check_json_value(request.config, ("config",))
    cost = Cost(json_elements=values, work=WORK_PER_CONFIG + values * WORK_PER_CONFIG_VALUE, fields=fields("config"))

    def run() -> dict[str, Any]:
        with located(("config",)):
            return convert_config(request.config, request.to)

    return Plan(cost, run)


def plan_resolve(config: dict[str, Any] | None, preset: str | None) -> Plan[dict[str, Any]]:
    """A config (or a preset) resolved per layer: the resolution is the work, bounded by the config reader; the
    answer is one entry per layer, with its params, the warnings and the engine notes."""
    source = ("preset",) if config is None else ("config",)
    chosen = get_preset(preset) if config is None and preset is not None else config or {}
    with located(source):
        resolved = resolve_config(chosen)
    elements = sum(
        20 + sum(len(v) if isinstance(v, list) else 1 for v in layer.params.values()) for layer in resolved.layers
    )
    cost = Cost(
        json_elements=elements,
        work=len(resolved.layers) * WORK_PER_LAYER + elements * WORK_PER_JSON_ELEMENT,
        fields=fields(*source),
    )
    notes = [note.to_json() for note in engine_notes(chosen, resolved)]
    return Plan(cost, lambda: resolved.to_json() | {"engine_notes": notes})


# Work units of the serving simulator (``posenc.real_models.serving``), per head where a head is involved; measured
# with bench/request_costs.py (--only rope.serve_check): YaRN, the costliest hooks, at about 0.8 ns per unit.
WORK_PER_SERVE_CALL = 240_000  # serve_check: one call of the layer's hooks on a pass (frequencies, tables, a gather)
WORK_PER_SERVE_BLOCK = 240_000  # serve_check: one pass's logits for one variant (position term, masks, the error)
WORK_PER_SERVE_LOGIT = 24  # serve_check: one (head, query, key) logit compared
WORK_PER_SERVE_FEATURE = 1  # serve_check: one feature of one (head, query, key) product
WORK_PER_SERVE_ENCODED = 8  # serve_check: one feature of one token rotated or scaled


def plan_serve_check(request: ServeCheckRequest) -> Plan[dict[str, Any]]:
    """Every layout's passes for the reference and each variant: the hook calls, the encoded tokens and the
    logits, counted from the schedules before any work (``Schedules.counts``); the memory is the seeded pool of
    q and k and a few blocks of logits."""
    setup = request.setup
    with located(("setup",)):
        layer = serving_layer(
            setup.method, setup.params, setup.rotary_dim, setup.pairing, setup.config, setup.layer, heads=request.heads
        )
    schedules = Schedules.build(
        request.length,
        request.chunk_sizes,
        request.prefill,
        request.batch_lengths,
        request.documents,
        request.sinks,
        request.window,
        request.requests,
    )
    entries, tokens, calls, pool = schedules.counts()
    heads, dim = layer.heads, layer.dim
    work = (
        calls * (WORK_PER_SERVE_CALL + WORK_PER_SERVE_BLOCK)
        + heads * entries * (WORK_PER_SERVE_LOGIT + dim * WORK_PER_SERVE_FEATURE)
        + heads * tokens * dim * WORK_PER_SERVE_ENCODED
    )
    blocks = 12 * LOGIT_ELEMENTS  # one block's logits for the reference and each variant, masks and errors
    variants = 4 * len(schedules.chunk_sizes) + 16
    rows = max(len(schedules.batch_lengths), len(schedules.requests))  # each variant's errors per row or request
    cost = Cost(
        json_elements=(20 + rows) * variants + 40,
        work=work,
        # the seeded pool (and its draws), the packed variants' encoded streams: 14 (H, N, d) at most
        workspace_bytes=8 * (14 * heads * pool * dim + blocks),
        fields=fields(
            "length",
            "chunk_sizes",
            "prefill",
            "batch_lengths",
            "documents",
            "window",
            "requests",
            "heads",
            "setup.rotary_dim",
        ),
    )
    if layer.applier is not None:  # the method's own work on every call of its hooks, on a pass of average size
        spec, params = layer.applier.spec, layer.applier.params
        side = max(1, math.isqrt(-(-entries // max(calls, 1))))  # Nq = Nk of a pass with the mean logits per call
        extent = Extent(side, side, heads, dim)
        method = method_cost(spec, params, extent, ("setup", "params") if setup.config is None else ("setup", "config"))
        cost = cost.plus(Cost(workspace_bytes=method.workspace_bytes, work=calls * method.work, fields=method.fields))
    run = functools.partial(_serve_check, layer, schedules, request.tolerance, request.seed)
    return Plan(cost, run, "check shorter sequences (length, batch_lengths, documents), larger chunks, fewer heads")


def _serve_check(layer: ServingLayer, schedules: Schedules, tolerance: float, seed: int) -> dict[str, Any]:
    return serve_check(layer, schedules, tolerance=tolerance, seed=seed).to_json()
