"""Serving simulator: the attention logits a serving stack computes with a KV cache, chunked prefill, left-padded
batches, packed documents and an evicting cache, and what transformers computes in each of these, against full
recomputation, in float64.

A *serving layer* (``ServingLayer``) is what one attention layer does with positions: a registered method's
applier (rotating q and k by their positions, and/or adding a score term of the positions, such as ALiBi's bias),
or nothing (a NoPE layer), and Llama 4's query temperature τ(n) on the NoPE layers that have it.
``serving_layer`` makes one from a method or from a config and a layer index (a NoPE layer is accepted); both live
in ``serving_layer``, the sizes, the catalogue of variants and the report in ``serving_layouts``.

The logits of query i and key j are ``ℓ_ij = ⟨q'_i, k'_j⟩ + b(p_i, p_j)``: q' and k' are the seeded random unit
vectors after the applier's ``rotate`` hook at positions p (the hook builds its tables for a sequence of
max position + 1 of the call: what dynamic scalings read as the length) and the query temperature; b is the
applier's ``score_terms`` hook on zero content (a bias method's B, with −inf in the causal future; 0 for a
rotary method). Every variant of a pass is compared block by block with the reference's block of the same queries
and keys, computed with the same shapes (a matrix product's summation order depends on the shapes); so a schedule
that feeds the same values through the same hooks gives the same bits, and a correct one an error of exactly 0.

Layouts, each with a *reference* (full recomputation: the model run without a cache on the tokens the query
sees, from their true position ids, the query's pass being the last rows) and its variants:

- ``schedule`` (chunked prefill of ``length`` tokens per chunk size; prefill then token-by-token decode): a
  pass [s, e) is referenced by recomputing tokens 0 … e−1 (positions 0 … e−1, causal). ``chunked_prefill`` and
  ``decode`` cache each key after its rotation, and re-rotate the cache every pass when the registry says the
  method's rotation depends on the length (``length_dependent``); ``stale_cached_keys`` never re-rotates
  (keys keep the frequencies of the length when they were cached); ``chunk_local_positions`` restarts the
  positions at 0 in every chunk. ``transformers_chunked_prefill`` and ``transformers_decode`` (its generate())
  never re-rotate either, and rotate each forward with the frequencies of transformers' rotary state right after
  the ``requests`` were served (``TransformersRotaryState``: dynamic NTK keeps the longest length seen until a
  call is shorter than its original max position).
- ``requests`` (``requests`` served one after another by one model, a forward each): request r is referenced by
  recomputing its tokens alone (a fresh model). ``transformers_requests`` carries transformers' rotary state from
  one request to the next (a fresh one at the first).
- ``padded`` (a left-padded batch of ``batch_lengths``): row b is referenced by recomputing its tokens alone.
  ``left_padded_batch`` takes positions from the attention mask (cumsum − 1, padding at 0 and masked);
  ``slot_positions`` takes the slot index (the padding counted); ``transformers_left_padded_batch`` takes the
  positions from the mask but rotates every row for the batch's length (max(position_ids) + 1, the longest
  row's), as transformers' rotary embedding does, called once on the batch.
- ``packed`` (``documents`` packed into one stream): each document is referenced alone (positions from 0, its
  own length). ``packed_documents`` resets the positions per document and masks block-diagonally;
  ``packed_positions_not_reset``, ``packed_without_document_mask`` and ``packed_as_one_sequence`` each drop one
  or both; ``packed_one_length`` keeps both but rotates the pack in one call, for its longest document's length.
- ``eviction`` (token-by-token decode of ``length`` tokens with a cache of ``sinks`` first tokens and the last
  ``window`` ones): step n is referenced by recomputing the visible tokens as a sequence of their own (position
  = index in the cache, the StreamingLLM convention). ``sink_window_cache`` caches keys unrotated and rotates them
  to their cache positions; ``eviction_keys_not_rerotated`` keeps each key's rotation at its original position
  while the query is at its cache position; ``eviction_query_original_position`` rotates the keys to their cache
  positions and the query at its original position.

Each variant reports the largest |logit error| over the entries both it and the reference attend (overall, and
per sequence: ``sequence_errors``, one per batch row or request), the entries one attends and the other does not
(``pattern_errors``), and the first wrong entry (error > tolerance, or a pattern error) as (sequence, query, key)
in the layout's token indices, in (sequence, query, key) order. A correct schedule is ``exact`` when its error is
0.0 and no pattern differs; a known-bad one is ``caught`` where it has a wrong entry and ``equivalent`` for this
setup otherwise (a shift-invariant method given shifted positions); a transformers one is what transformers
computes, ``exact`` or ``differs`` like a correct one (a length-dependent method differs from its own
recomputation in a padded batch's shorter rows, in a cache whose keys are never re-rotated, and after a longer
request). Errors are ``InvalidInput`` located in the function's own arguments (("method",), ("config", …),
("layer",), ("heads",), ("chunk_sizes", i), ("prefill",), ("requests", i), …).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from posenc.errors import InvalidInput, Loc, located
from posenc.real_models.serving_layer import (
    MAX_DIM,
    MAX_HEADS,
    ServingLayer,
    TransformersRotaryState,
    serving_layer,
)
from posenc.real_models.serving_layouts import (
    LOGIT_ELEMENTS,
    MAX_BATCH_ROWS,
    MAX_CHUNK_SIZES,
    MAX_DOCUMENTS,
    MAX_REQUESTS,
    MAX_SERVE_TOKENS,
    VARIANTS,
    Schedule,
    Schedules,
    ServeReport,
    VariantResult,
    Verdict,
    WrongEntry,
)

__all__ = [
    "LOGIT_ELEMENTS",
    "MAX_BATCH_ROWS",
    "MAX_CHUNK_SIZES",
    "MAX_DIM",
    "MAX_DOCUMENTS",
    "MAX_HEADS",
    "MAX_REQUESTS",
    "MAX_SERVE_TOKENS",
    "VARIANTS",
    "Schedule",
    "Schedules",
    "ServeReport",
    "ServingLayer",
    "TransformersRotaryState",
    "VariantResult",
    "Verdict",
    "WrongEntry",
    "seeded_pool",
    "serve_check",
    "serving_layer",
]


# ------------------------------------------------------------------------------------------------ comparing
@dataclass(frozen=True)
class _Encoded:
    """One pass as a schedule (or the reference) attends: encoded q (H, r, d) and k (H, m, d), the positions the
    layer saw (r,), (m,), and ``attends`` (r, m): the keys its mask lets each query see."""

    q: torch.Tensor
    k: torch.Tensor
    q_pos: torch.Tensor
    k_pos: torch.Tensor
    attends: torch.Tensor


@dataclass(frozen=True)
class _Pass:
    """One pass of a layout: query rows ``queries`` (r,) over keys ``keys`` (m,) of ``sequence`` (a batch row, else
    0), as token indices of that sequence (of the packed stream; of the original sequence for the eviction cache)."""

    sequence: int
    queries: torch.Tensor
    keys: torch.Tensor


Step = Callable[[_Pass], _Encoded]


@dataclass
class _Tally:
    name: str
    parameters: dict[str, int]
    step: Step
    compared: int = 0
    max_error: float = 0.0
    pattern_errors: int = 0
    first_wrong: WrongEntry | None = None
    by_sequence: dict[int, float] = field(default_factory=dict)  # the max |error| of each sequence seen

    def result(self) -> VariantResult:
        schedule, models = VARIANTS[self.name]
        if schedule == "known_bad":
            verdict: Verdict = "caught" if self.first_wrong is not None else "equivalent"
        else:
            verdict = "exact" if self.max_error == 0.0 and self.pattern_errors == 0 else "differs"
        return VariantResult(
            self.name,
            schedule,
            models,
            self.parameters,
            self.compared,
            self.max_error,
            [self.by_sequence[sequence] for sequence in sorted(self.by_sequence)],
            self.pattern_errors,
            self.first_wrong,
            verdict,
        )


def _masked_logits(layer: ServingLayer, encoded: _Encoded, rows: slice) -> torch.Tensor:
    logits = layer.logits(encoded.q[:, rows], encoded.k, encoded.q_pos[rows], encoded.k_pos)  # (H, r, m)
    return logits.masked_fill(~encoded.attends[None, rows], -math.inf)


def _compare(layer: ServingLayer, step: _Pass, reference: _Encoded, tallies: list[_Tally], tolerance: float) -> None:
    """Every variant's logits of one pass against the reference's, in blocks of rows (the reference's once)."""
    # variants that run the same schedule on this setup (stale keys where nothing is stale) share one step
    encoded = {id(tally.step): tally.step(step) for tally in tallies}
    rows, keys = step.queries.shape[0], step.keys.shape[0]
    block = max(1, LOGIT_ELEMENTS // (layer.heads * keys))
    for a in range(0, rows, block):
        span = slice(a, min(a + block, rows))
        want = _masked_logits(layer, reference, span)  # (H, r, m), −inf where the reference does not attend
        want_seen = torch.isfinite(want)
        logits = {key: _masked_logits(layer, got, span) for key, got in encoded.items()}
        for tally in tallies:
            have = logits[id(tally.step)]
            have_seen = torch.isfinite(have)
            both = want_seen & have_seen
            error = torch.where(both, (have - want).abs(), 0.0)  # (H, r, m)
            pattern = want_seen ^ have_seen
            tally.compared += int(both.sum())
            largest = float(error.max()) if error.numel() else 0.0
            tally.max_error = max(tally.max_error, largest)
            tally.by_sequence[step.sequence] = max(tally.by_sequence.get(step.sequence, 0.0), largest)
            tally.pattern_errors += int(pattern.sum())
            if tally.first_wrong is None:
                wrong = ((error > tolerance) | pattern).any(dim=0)  # (r, m)
                hits = torch.nonzero(wrong)  # row-major: the first row, then its first key
                if hits.numel():
                    row, col = int(hits[0, 0]), int(hits[0, 1])
                    query, key = int(step.queries[a + row]), int(step.keys[col])
                    tally.first_wrong = WrongEntry(step.sequence, query, key)


def _causal(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return keys[None, :] <= queries[:, None]  # (r, m)


def _take(pool: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """pool[:, ids] (H, n, d): a slice where the ids are a run (most passes), a gather otherwise."""
    if ids.numel() and int(ids[-1]) - int(ids[0]) + 1 == ids.numel() and bool((ids.diff() == 1).all()):
        return pool[:, int(ids[0]) : int(ids[-1]) + 1]
    return pool[:, ids]


def _arange(start: int, stop: int | None = None) -> torch.Tensor:
    return torch.arange(start, dtype=torch.int64) if stop is None else torch.arange(start, stop, dtype=torch.int64)


# ------------------------------------------------------------------------------------------------ layouts
def seeded_pool(layer: ServingLayer, schedules: Schedules, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The raw q and k of every layout, (H, N, d) each for N = the longest layout: seeded random unit vectors
    (so a logit is a cosine, and an error is one on the scale of ±1). Token t of a sequence is pool token t."""
    pool = schedules.counts()[3]
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randn(2, layer.heads, pool, layer.dim, dtype=torch.float64, generator=generator)
    unit = draws / torch.linalg.vector_norm(draws, dim=-1, keepdim=True)  # (2, H, N, d)
    return unit[0], unit[1]


class _Simulator:
    """The layouts of one report: the layer, the seeded pool of raw q and k (H, N, d), the tolerance."""

    def __init__(self, layer: ServingLayer, schedules: Schedules, tolerance: float, seed: int) -> None:
        self.layer, self.schedules, self.tolerance = layer, schedules, tolerance
        self.q, self.k = seeded_pool(layer, schedules, seed)

    def encode(
        self,
        q_ids: torch.Tensor,
        k_ids: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        length: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens ``q_ids``, ``k_ids`` of the pool encoded by the layer at the positions given (for a call of
        ``length`` where given, else of max position + 1)."""
        return self.layer.encode(_take(self.q, q_ids), _take(self.k, k_ids), q_pos, k_pos, length)

    def _after_requests(self) -> TransformersRotaryState:
        """A transformers rotary embedding's state once the report's requests were served, a fresh one first."""
        state = TransformersRotaryState(self.layer.dynamic_original)
        state.calls(list(self.schedules.requests))
        return state

    def _run(self, passes: Sequence[_Pass], reference: Step, tallies: list[_Tally]) -> list[VariantResult]:
        for step in passes:
            _compare(self.layer, step, reference(step), tallies, self.tolerance)
        return [tally.result() for tally in tallies]

    # ---- chunked prefill and decode: one sequence of ``length`` tokens in passes [s, e)
    def _recompute_prefix(self, step: _Pass) -> _Encoded:
        queries, keys = step.queries, step.keys
        q, k = self.encode(queries, keys, queries, keys)  # tokens 0 … e − 1 at positions 0 … e − 1
        return _Encoded(q, k, queries, keys, _causal(queries, keys))

    def _cached(self, *, rerotate: bool, local: bool) -> Step:
        """A KV cache filled pass by pass: keys rotated when they join (``rerotate``: the whole cache rotated again
        every pass), at their absolute positions or (``local``) at positions restarting in every pass."""
        total = self.schedules.length
        keys = torch.empty(self.layer.heads, total, self.layer.dim, dtype=torch.float64)  # (H, T, d)
        held = torch.empty(total, dtype=torch.int64)  # the position each cached key was given

        def step(p: _Pass) -> _Encoded:
            start, stop = int(p.queries[0]), int(p.queries[-1]) + 1
            pos = _arange(stop - start) if local else _arange(start, stop)
            held[start:stop] = pos
            if rerotate:
                q, k = self.encode(p.queries, p.keys, pos, held[:stop])
            else:
                q, keys[:, start:stop] = self.encode(p.queries, p.queries, pos, pos)
                k = keys[:, :stop]
            return _Encoded(q, k, pos, held[:stop].clone(), _causal(p.queries, p.keys))

        return step

    def _transformers_cached(self, spans: Sequence[tuple[int, int]]) -> Step:
        """transformers' KV cache, right after the requests: each pass one forward at its absolute position ids,
        its keys cached after rotation and never rotated again, the forward rotated for the length the rotary
        embedding's state gives a call whose max position id + 1 is the pass's end."""
        total = self.schedules.length
        keys = torch.empty(self.layer.heads, total, self.layer.dim, dtype=torch.float64)  # (H, T, d)
        stops = [stop for _, stop in spans]
        lengths = dict(zip(stops, self._after_requests().calls(stops), strict=True))

        def step(p: _Pass) -> _Encoded:
            start, stop = int(p.queries[0]), int(p.queries[-1]) + 1
            pos = _arange(start, stop)
            q, keys[:, start:stop] = self.encode(p.queries, p.queries, pos, pos, lengths[stop])
            return _Encoded(q, keys[:, :stop], pos, p.keys, _causal(p.queries, p.keys))

        return step

    def schedule(
        self, spans: Sequence[tuple[int, int]], names: Sequence[str], parameters: dict[str, int]
    ) -> list[VariantResult]:
        correct = self.layer.length_dependent  # the registry's word: re-rotate the cache every pass
        schedules = {
            "chunked_prefill": (correct, False),
            "decode": (correct, False),
            "stale_cached_keys": (False, False),
            "stale_cached_keys_decode": (False, False),
            "chunk_local_positions": (correct, True),
        }
        steps: dict[tuple[bool, bool], Step] = {}
        for name in names:
            if name in schedules and schedules[name] not in steps:
                rerotate, local = schedules[name]
                steps[rerotate, local] = self._cached(rerotate=rerotate, local=local)
        tallies = [
            _Tally(name, parameters, steps[schedules[name]] if name in schedules else self._transformers_cached(spans))
            for name in names
        ]
        passes = [_Pass(0, _arange(start, stop), _arange(stop)) for start, stop in spans]
        return self._run(passes, self._recompute_prefix, tallies)

    # ---- a left-padded batch: row b holds batch_lengths[b] tokens, right-aligned in max(batch_lengths) slots
    def _padded(self, *, slots: bool, one_call: bool = False) -> Step:
        """Each row in its slots of the padded batch, rotated for its own positions; ``one_call``: as transformers
        runs the batch from a fresh model, rotated for the batch's length (its rotary embedding called once on the
        batch: max(position_ids) + 1, the longest row's), with τ at the cache slots where transformers takes the
        query temperature from them (Llama 4)."""
        width = max(self.schedules.batch_lengths)
        length = TransformersRotaryState(self.layer.dynamic_original).call(width) if one_call else None

        def step(p: _Pass) -> _Encoded:
            count = p.queries.shape[0]
            pad = width - count
            mask = torch.cat((torch.zeros(pad, dtype=torch.int64), torch.ones(count, dtype=torch.int64)))  # (W,)
            pos = _arange(width) if slots else (mask.cumsum(0) - 1).clamp_min(0)  # padding at 0, masked
            zeros = torch.zeros(self.layer.heads, pad, self.layer.dim, dtype=torch.float64)
            q_slots = torch.cat((zeros, self.q[:, :count]), dim=1)  # (H, W, d)
            k_slots = torch.cat((zeros, self.k[:, :count]), dim=1)
            at = _arange(width) if one_call and self.layer.slot_temperature else None  # transformers' τ slots
            q, k = self.layer.encode(q_slots, k_slots, pos, pos, length, at)
            real = slice(pad, width)  # the padded keys are masked: only the real slots are attended
            return _Encoded(q[:, real], k[:, real], pos[real], pos[real], _causal(p.queries, p.keys))

        return step

    def padded(self) -> list[VariantResult]:
        tallies = [
            _Tally("left_padded_batch", {}, self._padded(slots=False)),
            _Tally("slot_positions", {}, self._padded(slots=True)),
            _Tally("transformers_left_padded_batch", {}, self._padded(slots=False, one_call=True)),
        ]
        rows = [_Pass(b, _arange(n), _arange(n)) for b, n in enumerate(self.schedules.batch_lengths)]
        return self._run(rows, self._recompute_prefix, tallies)

    # ---- requests served one after another by one transformers model, each referenced alone
    def requests(self) -> list[VariantResult]:
        counts = self.schedules.requests
        lengths = TransformersRotaryState(self.layer.dynamic_original).calls(list(counts))

        def step(p: _Pass) -> _Encoded:  # a forward of the request's tokens, for the length the state gives
            q, k = self.encode(p.queries, p.keys, p.queries, p.keys, lengths[p.sequence])
            return _Encoded(q, k, p.queries, p.keys, _causal(p.queries, p.keys))

        passes = [_Pass(index, _arange(count), _arange(count)) for index, count in enumerate(counts)]
        return self._run(passes, self._recompute_prefix, [_Tally("transformers_requests", {}, step)])

    # ---- packed documents: one stream, each document referenced alone
    def _packed(self, *, reset: bool, document_mask: bool, per_document: bool = True) -> Step:
        lengths = torch.tensor(self.schedules.documents, dtype=torch.int64)  # (D,)
        stream = int(lengths.sum())
        doc = torch.repeat_interleave(_arange(lengths.shape[0]), lengths)  # (N,): each token's document
        starts = torch.cumsum(lengths, 0) - lengths  # (D,)
        tokens = _arange(stream)
        pos = tokens - starts[doc] if reset else tokens  # (N,)
        q = torch.empty(self.layer.heads, stream, self.layer.dim, dtype=torch.float64)  # (H, N, d)
        k = torch.empty_like(q)
        if reset and per_document:  # one sequence per document (varlen attention): each rotated for its own length
            for first, count in zip(starts.tolist(), lengths.tolist(), strict=True):
                span = _arange(first, first + count)
                q[:, first : first + count], k[:, first : first + count] = self.encode(span, span, pos[span], pos[span])
        else:  # the pack in one call: the rotation for max(pos) + 1
            q, k = self.encode(tokens, tokens, pos, pos)

        def step(p: _Pass) -> _Encoded:
            attends = _causal(p.queries, p.keys)
            if document_mask:
                attends = attends & (doc[p.queries][:, None] == doc[p.keys][None, :])
            return _Encoded(q[:, p.queries], k[:, p.keys], pos[p.queries], pos[p.keys], attends)

        return step

    def packed(self) -> list[VariantResult]:
        lengths = self.schedules.documents
        tallies = [
            _Tally("packed_documents", {}, self._packed(reset=True, document_mask=True)),
            _Tally("packed_positions_not_reset", {}, self._packed(reset=False, document_mask=True)),
            _Tally("packed_without_document_mask", {}, self._packed(reset=True, document_mask=False)),
            _Tally("packed_as_one_sequence", {}, self._packed(reset=False, document_mask=False)),
            _Tally("packed_one_length", {}, self._packed(reset=True, document_mask=True, per_document=False)),
        ]
        passes, first = [], 0
        for count in lengths:  # one pass per document: its rows over every stream key up to its end
            passes.append(_Pass(0, _arange(first, first + count), _arange(first + count)))
            first += count
        return self._run(passes, self._document_alone, tallies)

    def _document_alone(self, p: _Pass) -> _Encoded:
        """The reference of a document's pass: the document recomputed alone (its tokens at positions 0 … n − 1),
        its keys placed among the stream's columns; the earlier documents' keys are never attended."""
        first = int(p.queries[0])
        count = p.queries.shape[0]
        own = _arange(count)
        q, k_own = self.encode(p.queries, p.queries, own, own)  # (H, n, d) each
        k = torch.cat((torch.zeros(self.layer.heads, first, self.layer.dim, dtype=torch.float64), k_own), dim=1)
        k_pos = torch.cat((torch.zeros(first, dtype=torch.int64), own))  # (first + n,)
        attends = torch.cat((torch.zeros(count, first, dtype=torch.bool), _causal(own, own)), dim=1)
        return _Encoded(q, k, own, k_pos, attends)

    # ---- an evicting cache: sinks + window, token by token
    def _recompute_visible(self, p: _Pass) -> _Encoded:
        held = p.keys.shape[0]
        cache = _arange(held)
        q, k = self.encode(p.queries, p.keys, cache[-1:], cache)  # the visible tokens as a sequence of their own
        return _Encoded(q, k, cache[-1:], cache, torch.ones(1, held, dtype=torch.bool))

    def _evicting(self, *, keys_original: bool, query_original: bool) -> Step:
        total = self.schedules.length
        keys = torch.empty(self.layer.heads, total, self.layer.dim, dtype=torch.float64)  # rotated when they joined

        def step(p: _Pass) -> _Encoded:
            n, held = int(p.queries[0]), p.keys.shape[0]
            cache = _arange(held)
            q_pos = p.queries if query_original else cache[-1:]
            if keys_original:
                _, keys[:, n : n + 1] = self.encode(p.queries, p.queries, p.queries, p.queries)
                q, _ = self.encode(p.queries, p.queries, q_pos, q_pos)
                k, k_pos = keys[:, p.keys], p.keys
            else:
                q, k = self.encode(p.queries, p.keys, q_pos, cache)
                k_pos = cache
            return _Encoded(q, k, q_pos, k_pos, torch.ones(1, held, dtype=torch.bool))

        return step

    def eviction(self) -> list[VariantResult]:
        parameters = {"sinks": self.schedules.sinks, "window": self.schedules.window}
        tallies = [
            _Tally("sink_window_cache", parameters, self._evicting(keys_original=False, query_original=False)),
            _Tally("eviction_keys_not_rerotated", parameters, self._evicting(keys_original=True, query_original=False)),
            _Tally(
                "eviction_query_original_position",
                parameters,
                self._evicting(keys_original=False, query_original=True),
            ),
        ]
        steps = [
            _Pass(0, _arange(n, n + 1), torch.tensor(self.schedules.visible(n), dtype=torch.int64))
            for n in range(self.schedules.length)
        ]
        return self._run(steps, self._recompute_visible, tallies)


def serve_check(
    layer: ServingLayer,
    schedules: Schedules,
    *,
    tolerance: float = 1e-9,
    seed: int = 0,
    setup: Loc = ("setup",),
) -> ServeReport:
    """Every layout's variants against full recomputation (see the module docstring), float64. Errors at
    ("tolerance",), ("seed",); a check the layer's method makes while it runs (xPos's decay past float64, a
    parameter table of another shape than the heads need) under ``setup``, where the layer's setup was given (a
    config's layer: under ``setup`` + ("config",), as ``serving_layer`` names its errors)."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 <= tolerance < math.inf:
        raise InvalidInput(("tolerance",), f"must be a finite number >= 0, got {tolerance!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InvalidInput(("seed",), f"must be an integer in [0, 2^63), got {seed!r}")
    simulator = _Simulator(layer, schedules, float(tolerance), seed)
    results: list[VariantResult] = []
    chunked = ("chunked_prefill", "stale_cached_keys", "chunk_local_positions", "transformers_chunked_prefill")
    with located((*setup, "config") if "layer" in layer.source else setup):
        for chunk in schedules.chunk_sizes:
            results += simulator.schedule(schedules.chunk_passes(chunk), chunked, {"chunk": chunk})
        decoded = ("decode", "stale_cached_keys_decode", "transformers_decode")
        results += simulator.schedule(schedules.decode_passes(), decoded, {"prefill": schedules.prefill})
        results += simulator.requests()
        results += simulator.padded()
        results += simulator.packed()
        results += simulator.eviction()
    return ServeReport(layer, schedules, float(tolerance), seed, results)
