"""Serving simulator: the attention logits a serving stack computes with a KV cache, chunked prefill, left-padded
batches, packed documents and an evicting cache, against full recomputation, in float64.

A *serving layer* (``ServingLayer``) is what one attention layer does with positions: a registered method's
applier (rotating q and k by their positions, and/or adding a score term of the positions, such as ALiBi's bias),
or nothing (a NoPE layer), and Llama 4's query temperature τ(n) on the NoPE layers that have it.
``serving_layer`` makes one from a method or from a config and a layer index (a NoPE layer is accepted).

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
  positions at 0 in every chunk.
- ``padded`` (a left-padded batch of ``batch_lengths``): row b is referenced by recomputing its tokens alone.
  ``left_padded_batch`` takes positions from the attention mask (cumsum − 1, padding at 0 and masked);
  ``slot_positions`` takes the slot index (the padding counted).
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

Each variant reports the largest |logit error| over the entries both it and the reference attend, the entries
one attends and the other does not (``pattern_errors``), and the first wrong entry (error > tolerance, or a
pattern error) as (sequence, query, key) in the layout's token indices, in (sequence, query, key) order. A
correct schedule is ``exact`` when its error is 0.0 and no pattern differs; a known-bad one is ``caught`` where
it has a wrong entry and ``equivalent`` for this setup otherwise (a shift-invariant method given shifted
positions). Errors are ``InvalidInput`` located in the function's own arguments (("method",), ("config", …),
("layer",), ("heads",), ("chunk_sizes", i), ("prefill",), …).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from pydantic import ValidationError

from posenc.errors import InvalidInput, Loc, located
from posenc.pe import get_method
from posenc.pe.appliers import Applier, Layer, build_applier
from posenc.pe.ops import Pairing
from posenc.pe.registry import UnknownMethodError
from posenc.pe.types import LayerInputs
from posenc.real_models.configs import query_temperature, requested_layer

MAX_SERVE_TOKENS = 4096  # tokens of one layout (its length, a batch row, the packed stream)
MAX_CHUNK_SIZES = 8
MAX_BATCH_ROWS = 16
MAX_DOCUMENTS = 64
MAX_HEADS = 64
MAX_DIM = 8192
LOGIT_ELEMENTS = 1 << 18  # elements of one (H, rows, keys) block of logits (2 MiB each, about 12 alive at once)

Schedule = Literal["correct", "known_bad"]
Verdict = Literal["exact", "differs", "caught", "equivalent"]

VARIANTS: dict[str, tuple[Schedule, str]] = {
    "chunked_prefill": (
        "correct",
        "prefill in chunks at the absolute position ids; keys cached after rotation, the cache re-rotated every "
        "chunk where the rotation depends on the length",
    ),
    "stale_cached_keys": (
        "known_bad",
        "chunked prefill whose cached keys keep the frequencies of the length when they were cached (never re-rotated)",
    ),
    "chunk_local_positions": ("known_bad", "chunked prefill whose positions restart at 0 in every chunk"),
    "decode": (
        "correct",
        "prefill, then one token per step at its position id; keys cached after rotation, the cache re-rotated "
        "every step where the rotation depends on the length",
    ),
    "stale_cached_keys_decode": (
        "known_bad",
        "decode whose cached keys keep the frequencies of the length when they were cached (never re-rotated)",
    ),
    "left_padded_batch": (
        "correct",
        "a left-padded batch with position ids from the attention mask (cumsum − 1) and the padding masked",
    ),
    "slot_positions": (
        "known_bad",
        "a left-padded batch whose positions are the cache / batch slots (the padding counted) instead of the "
        "position ids",
    ),
    "packed_documents": (
        "correct",
        "documents packed in one stream, positions reset per document, block-diagonal mask",
    ),
    "packed_positions_not_reset": (
        "known_bad",
        "packed documents whose positions run on through the stream (block-diagonal mask kept)",
    ),
    "packed_without_document_mask": (
        "known_bad",
        "packed documents with positions reset but a plain causal mask: queries see earlier documents",
    ),
    "packed_as_one_sequence": ("known_bad", "packed documents treated as one sequence: no reset, no document mask"),
    "packed_one_length": (
        "known_bad",
        "packed documents with positions reset and the document mask, but one rotation for the whole pack, for the "
        "length max(position_ids) + 1 (the longest document), as a rotary embedding called once on the packed "
        "batch computes a length-dependent rotation: the other documents get the longest one's scaling",
    ),
    "sink_window_cache": (
        "correct",
        "a cache of the sink tokens and a window of recent ones; keys cached unrotated and rotated to their "
        "position in the cache",
    ),
    "eviction_keys_not_rerotated": (
        "known_bad",
        "an evicting cache whose keys keep their rotation at their original positions while the query is at its "
        "cache position",
    ),
    "eviction_query_original_position": (
        "known_bad",
        "an evicting cache whose keys sit at their cache positions while the query is at its original position",
    ),
}


# ------------------------------------------------------------------------------------------------ the layer
@dataclass(frozen=True)
class ServingLayer:
    """One attention layer's use of positions: ``applier`` (a method's hooks; None for a NoPE layer), ``heads``
    and ``dim`` (features of q and k per head: the rotated width of a rotary setup, else the head width), the
    query ``temperature`` (floor_scale, attn_scale, position_offset: Llama 4's, Mistral 3's) where the layer has
    one, and whether the registry says the rotation depends on the length. ``source`` is its echo."""

    source: dict[str, Any]
    heads: int
    dim: int
    applier: Applier | None = field(default=None, compare=False)
    temperature: tuple[float, float, float] | None = None
    length_dependent: bool = False

    def to_json(self) -> dict[str, Any]:
        return {**self.source, "heads": self.heads, "dim": self.dim, "length_dependent": self.length_dependent}

    def encode(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q (H, Nq, d) and k (H, Nk, d) as the layer attends with them at positions (Nq,), (Nk,): the applier's
        rotate hook (tables for a sequence of max position + 1), then τ(p) on the queries. float64."""
        if self.applier is not None:
            q, k = self.applier.rotate(q, k, q_pos, k_pos)
        if self.temperature is not None:
            q = q * query_temperature(q_pos, *self.temperature)[None, :, None]  # (H, Nq, d)
        return q, k

    def position_term(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The part of the logits positions alone give, (H, Nq, Nk): the applier's score hook on zero content
        (a bias method's B, −inf in the causal future; 0 for rotary methods and NoPE)."""
        shape = (self.heads, q_pos.shape[0], k_pos.shape[0])
        if self.applier is None:
            return torch.zeros(shape, dtype=torch.float64)
        inputs = LayerInputs(
            q=torch.zeros(1, self.heads, shape[1], 1, dtype=torch.float64),  # (1, H, Nq, 1)
            k=torch.zeros(1, self.heads, shape[2], 1, dtype=torch.float64),  # (1, H, Nk, 1)
            q_pos=q_pos,
            k_pos=k_pos,
            mask=torch.zeros(1, 1, shape[1], shape[2], dtype=torch.bool),
        )
        return self.applier.score_terms(inputs, 1.0).logits[0].to(torch.float64)  # (H, Nq, Nk)

    def logits(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """ℓ = ⟨q', k'⟩ + b(p_i, p_j): (H, Nq, Nk) from encoded q (H, Nq, d), k (H, Nk, d)."""
        return _dot(q, k) + self.position_term(q_pos, k_pos)


def _dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """⟨q_i, k_j⟩ per head, (H, Nq, Nk), one batched matrix product of contiguous operands. A product's kernel
    (and so each entry's summation order) depends on the shapes, never on the other entries' values: the
    reference and every variant compute each block with the same shapes, so an entry whose q and k carry the same
    bits gets the same bits."""
    return torch.matmul(q.contiguous(), k.contiguous().transpose(-1, -2))


def _count(value: Any, loc: Loc, *, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(loc, f"must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidInput(loc, f"must be at most {maximum}, got {value}")
    return value


def _method_applier(method: str, params: Mapping[str, Any], dim: int, pairing: Pairing | None, heads: int) -> Applier:
    """The applier of ``method`` on a causal float64 layer of ``heads`` x ``dim``, for methods whose logits are a
    function of q, k and positions alone. Errors at ("method",), ("params", …), ("rotary_dim",)."""
    try:
        spec = get_method(method)
    except UnknownMethodError as exc:
        raise InvalidInput(("method",), str(exc)) from None
    if spec.axes != 1:
        raise InvalidInput(("method",), f"{method!r} encodes {spec.axes}-axis positions; serving runs 1D sequences")
    if spec.needs:
        raise InvalidInput(("method",), f"{method!r} reads {sorted(spec.needs)} besides q, k and the positions")
    try:
        parsed = spec.parse_params(dict(params))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(("params", *first["loc"]), str(first["msg"]).removeprefix("Value error, ")) from None
    layer = Layer(num_heads=heads, head_dim=dim, causal=True, pairing=pairing, dtype=torch.float64)
    applier = build_applier(spec, parsed, layer)
    if not applier.inside_attention or applier.materialises_scores:
        raise InvalidInput(
            ("method",),
            f"{method!r} is not applied by rotating q and k or adding a score term of the positions (absolute "
            "encodings act on the embeddings, content methods on the layer input): nothing to schedule here",
        )
    applier.check_pairing()
    with located(("rotary_dim",)):
        applier.check(has_x=False, has_v=False)
    return applier


def serving_layer(
    method: str | None,
    params: Mapping[str, Any],
    rotary_dim: int,
    pairing: Pairing | None,
    config: Mapping[str, Any] | str | None = None,
    layer: int | None = None,
    *,
    heads: int = 4,
) -> ServingLayer:
    """A method with its params (``rotary_dim``: q and k features per head, rotated or not; ``pairing`` for
    rotary methods) or a model config's layer (``config_layer``; a NoPE layer is accepted, with Llama 4's query
    temperature where it has one), on ``heads`` heads."""
    count = _count(heads, ("heads",), maximum=MAX_HEADS)
    resolved = requested_layer(method, config, layer)
    if resolved is None:
        assert method is not None  # (requested_layer refuses neither)
        dim = _count(rotary_dim, ("rotary_dim",), minimum=2, maximum=MAX_DIM)
        applier = _method_applier(method, params, dim, pairing, count)
        source = {"method": method, "params": dict(params), "rotary_dim": dim, "pairing": applier.pairing}
        return ServingLayer(source, count, dim, applier, None, get_method(method).length_dependent)
    tuning = resolved.query_temperature
    temperature = None
    if tuning is not None:
        offset = float(tuning.get("position_offset", 1.0))
        temperature = (float(tuning["floor_scale"]), float(tuning["attn_scale"]), offset)
    source = {
        "layer": resolved.layer,
        "layer_type": resolved.layer_type,
        "method": resolved.method,
        "params": dict(resolved.params),
        "pairing": resolved.pairing,
        "query_temperature": None if tuning is None else dict(tuning),
    }
    if resolved.method is None:  # NoPE: the whole head, no positions but the temperature's
        dim = _count(resolved.head_dim, ("config", "head_dim"), minimum=1, maximum=MAX_DIM)
        return ServingLayer(source, count, dim, None, temperature)
    pairing_of: Pairing = "interleaved" if resolved.pairing == "interleaved" else "half"
    with located(("config",)):
        applier = _method_applier(resolved.method, resolved.params, resolved.rotary_dim, pairing_of, count)
    length_dependent = get_method(resolved.method).length_dependent
    return ServingLayer(source, count, resolved.rotary_dim, applier, temperature, length_dependent)


# ------------------------------------------------------------------------------------------------ schedules
@dataclass(frozen=True)
class Schedules:
    """The sizes of every layout, checked: ``length`` tokens (chunked prefill, decode, eviction), the
    ``chunk_sizes``, the decode's ``prefill``, the padded batch's ``batch_lengths``, the packed ``documents``, the
    eviction cache's ``sinks`` and ``window``. :meth:`build` fills in the defaults."""

    length: int
    chunk_sizes: tuple[int, ...]
    prefill: int
    batch_lengths: tuple[int, ...]
    documents: tuple[int, ...]
    sinks: int
    window: int

    @classmethod
    def build(
        cls,
        length: int,
        chunk_sizes: Sequence[int] | None = None,
        prefill: int | None = None,
        batch_lengths: Sequence[int] | None = None,
        documents: Sequence[int] | None = None,
        sinks: int = 4,
        window: int | None = None,
    ) -> Schedules:
        """Defaults: chunks of length/4, prefill length/2, a batch of (length, length/2), two documents of
        length/2, a window of length/4. Errors at ("length",), ("chunk_sizes", i), ("prefill",),
        ("batch_lengths", i), ("documents", i), ("sinks",), ("window",)."""
        total = _count(length, ("length",), minimum=2, maximum=MAX_SERVE_TOKENS)
        chunks = tuple(chunk_sizes) if chunk_sizes is not None else (max(1, total // 4),)
        if not 1 <= len(chunks) <= MAX_CHUNK_SIZES:
            raise InvalidInput(("chunk_sizes",), f"give 1 to {MAX_CHUNK_SIZES} chunk sizes, got {len(chunks)}")
        for index, chunk in enumerate(chunks):
            _count(chunk, ("chunk_sizes", index), maximum=total)
        first = _count(total // 2 if prefill is None else prefill, ("prefill",), maximum=total - 1)
        rows = tuple(batch_lengths) if batch_lengths is not None else (total, (total + 1) // 2)
        if not 1 <= len(rows) <= MAX_BATCH_ROWS:
            raise InvalidInput(("batch_lengths",), f"give 1 to {MAX_BATCH_ROWS} rows, got {len(rows)}")
        for index, row in enumerate(rows):
            _count(row, ("batch_lengths", index), maximum=MAX_SERVE_TOKENS)
        docs = tuple(documents) if documents is not None else ((total + 1) // 2, total // 2)
        if not 1 <= len(docs) <= MAX_DOCUMENTS:
            raise InvalidInput(("documents",), f"give 1 to {MAX_DOCUMENTS} documents, got {len(docs)}")
        for index, doc in enumerate(docs):
            _count(doc, ("documents", index), maximum=MAX_SERVE_TOKENS)
        if sum(docs) > MAX_SERVE_TOKENS:
            raise InvalidInput(("documents",), f"pack at most {MAX_SERVE_TOKENS} tokens, got {sum(docs)}")
        sink_count = _count(sinks, ("sinks",), minimum=0, maximum=total)
        recent = _count(max(1, total // 4) if window is None else window, ("window",), maximum=total)
        return cls(total, chunks, first, rows, docs, sink_count, recent)

    # the passes of each layout, (start, stop) of the query rows; the keys are 0 … stop − 1
    def chunk_passes(self, chunk: int) -> list[tuple[int, int]]:
        return [(start, min(start + chunk, self.length)) for start in range(0, self.length, chunk)]

    def decode_passes(self) -> list[tuple[int, int]]:
        return [(0, self.prefill), *((n, n + 1) for n in range(self.prefill, self.length))]

    def visible(self, n: int) -> list[int]:
        """The tokens the eviction cache holds at step n (token n just joined): sinks, then the window."""
        sinks = list(range(min(self.sinks, n + 1)))
        return sinks + list(range(max(self.sinks, n - self.window + 1), n + 1))

    def counts(self) -> tuple[int, int, int, int]:
        """(logit entries, encoded tokens, hook calls, pool tokens) per head over every layout, the reference
        and every variant included: what the work and memory are costed from, before any work."""
        entries = tokens = calls = 0

        def passes(spans: Sequence[tuple[int, int]], variants: int) -> None:
            nonlocal entries, tokens, calls
            for start, stop in spans:
                entries += (1 + variants) * (stop - start) * stop
                tokens += (1 + variants) * (stop - start + stop)
                calls += 1 + variants

        for chunk in self.chunk_sizes:
            passes(self.chunk_passes(chunk), 3)
        passes(self.decode_passes(), 2)
        width = max(self.batch_lengths)
        for row in self.batch_lengths:
            entries += 3 * row * row
            tokens += 2 * row + 4 * width
            calls += 3
        stream = sum(self.documents)
        start = 0
        for doc in self.documents:
            start += doc
            entries += 6 * doc * start
        tokens += 12 * stream
        calls += 6 + 3 * len(self.documents)
        cache = self.sinks + self.window
        for n in range(self.length):
            held = min(n + 1, cache)
            entries += 4 * held
            tokens += 4 * (held + 1)
        calls += 5 * self.length
        pool = max(self.length, width, stream)
        return entries, tokens, calls, pool


# ------------------------------------------------------------------------------------------------ the report
@dataclass(frozen=True)
class WrongEntry:
    """The first wrong entry: ``sequence`` (the batch row; 0 elsewhere), ``query`` and ``key`` (token indices in
    that sequence, the packed stream, or the original sequence of the eviction cache)."""

    sequence: int
    query: int
    key: int


@dataclass(frozen=True)
class VariantResult:
    name: str
    schedule: Schedule
    models: str  # what the schedule does (the bug, for a known-bad one)
    parameters: dict[str, int]
    compared: int  # (head, query, key) entries both the variant and the reference attend
    max_error: float  # max |logit error| over them
    pattern_errors: int  # entries one attends and the other does not
    first_wrong: WrongEntry | None  # the first entry with error > tolerance or a pattern error
    verdict: Verdict  # correct: exact / differs; known-bad: caught / equivalent (for this setup)

    @property
    def label(self) -> str:
        shown = ", ".join(f"{key}={value}" for key, value in self.parameters.items())
        return f"{self.name}[{shown}]" if shown else self.name


@dataclass(frozen=True)
class ServeReport:
    setup: ServingLayer
    schedules: Schedules
    tolerance: float
    seed: int
    variants: list[VariantResult]

    def summary(self) -> dict[str, Any]:
        correct = [v for v in self.variants if v.schedule == "correct"]
        bad = [v for v in self.variants if v.schedule == "known_bad"]
        return {
            "correct_exact": all(v.verdict == "exact" for v in correct),
            "differs": [v.label for v in correct if v.verdict != "exact"],
            "sensitive_to": [v.label for v in bad if v.verdict == "caught"],
            "equivalent_for_this_setup": [v.label for v in bad if v.verdict == "equivalent"],
        }

    def to_json(self) -> dict[str, Any]:
        variants = []
        for variant in self.variants:
            data = asdict(variant)
            data["label"] = variant.label
            variants.append(data)
        return {
            "setup": self.setup.to_json(),
            "schedules": {**asdict(self.schedules), "chunk_sizes": list(self.schedules.chunk_sizes)},
            "tolerance": self.tolerance,
            "seed": self.seed,
            "variants": variants,
            "summary": self.summary(),
        }


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

    def result(self) -> VariantResult:
        schedule, models = VARIANTS[self.name]
        if schedule == "correct":
            verdict: Verdict = "exact" if self.max_error == 0.0 and self.pattern_errors == 0 else "differs"
        else:
            verdict = "caught" if self.first_wrong is not None else "equivalent"
        return VariantResult(
            self.name,
            schedule,
            models,
            self.parameters,
            self.compared,
            self.max_error,
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
            tally.max_error = max(tally.max_error, float(error.max()) if error.numel() else 0.0)
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
class _Simulator:
    """The layouts of one report: the layer, the seeded pool of raw q and k (H, N, d), the tolerance."""

    def __init__(self, layer: ServingLayer, schedules: Schedules, tolerance: float, seed: int) -> None:
        self.layer, self.schedules, self.tolerance = layer, schedules, tolerance
        pool = schedules.counts()[3]
        generator = torch.Generator().manual_seed(seed)
        draws = torch.randn(2, layer.heads, pool, layer.dim, dtype=torch.float64, generator=generator)
        unit = draws / torch.linalg.vector_norm(draws, dim=-1, keepdim=True)  # (2, H, N, d)
        self.q, self.k = unit[0], unit[1]

    def encode(
        self, q_ids: torch.Tensor, k_ids: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens ``q_ids``, ``k_ids`` of the pool encoded by the layer at the positions given."""
        return self.layer.encode(_take(self.q, q_ids), _take(self.k, k_ids), q_pos, k_pos)

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
            rerotate, local = schedules[name]
            if (rerotate, local) not in steps:
                steps[rerotate, local] = self._cached(rerotate=rerotate, local=local)
        tallies = [_Tally(name, parameters, steps[schedules[name]]) for name in names]
        passes = [_Pass(0, _arange(start, stop), _arange(stop)) for start, stop in spans]
        return self._run(passes, self._recompute_prefix, tallies)

    # ---- a left-padded batch: row b holds batch_lengths[b] tokens, right-aligned in max(batch_lengths) slots
    def _padded(self, *, slots: bool) -> Step:
        width = max(self.schedules.batch_lengths)

        def step(p: _Pass) -> _Encoded:
            count = p.queries.shape[0]
            pad = width - count
            mask = torch.cat((torch.zeros(pad, dtype=torch.int64), torch.ones(count, dtype=torch.int64)))  # (W,)
            pos = _arange(width) if slots else (mask.cumsum(0) - 1).clamp_min(0)  # padding at 0, masked
            zeros = torch.zeros(self.layer.heads, pad, self.layer.dim, dtype=torch.float64)
            q_slots = torch.cat((zeros, self.q[:, :count]), dim=1)  # (H, W, d)
            k_slots = torch.cat((zeros, self.k[:, :count]), dim=1)
            q, k = self.layer.encode(q_slots, k_slots, pos, pos)
            real = slice(pad, width)  # the padded keys are masked: only the real slots are attended
            return _Encoded(q[:, real], k[:, real], pos[real], pos[real], _causal(p.queries, p.keys))

        return step

    def padded(self) -> list[VariantResult]:
        tallies = [
            _Tally("left_padded_batch", {}, self._padded(slots=False)),
            _Tally("slot_positions", {}, self._padded(slots=True)),
        ]
        rows = [_Pass(b, _arange(n), _arange(n)) for b, n in enumerate(self.schedules.batch_lengths)]
        return self._run(rows, self._recompute_prefix, tallies)

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
    chunked = ("chunked_prefill", "stale_cached_keys", "chunk_local_positions")
    with located((*setup, "config") if "layer" in layer.source else setup):
        for chunk in schedules.chunk_sizes:
            results += simulator.schedule(schedules.chunk_passes(chunk), chunked, {"chunk": chunk})
        decoded = ("decode", "stale_cached_keys_decode")
        results += simulator.schedule(schedules.decode_passes(), decoded, {"prefill": schedules.prefill})
        results += simulator.padded()
        results += simulator.packed()
        results += simulator.eviction()
    return ServeReport(layer, schedules, float(tolerance), seed, results)
