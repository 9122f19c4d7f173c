"""The serving simulator's layouts and report: the sizes of every layout (``Schedules``: checked, with the passes
each layout runs and the work they cost), the catalogue of variants (``VARIANTS``: what each schedule does, and
whether it is correct, a known bug, or what transformers does), and the report of one run (``ServeReport``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from posenc.errors import InvalidInput
from posenc.real_models.serving_layer import ServingLayer, count_argument

MAX_SERVE_TOKENS = 4096  # tokens of one layout (its length, a batch row, a request, the packed stream)
MAX_CHUNK_SIZES = 8
MAX_BATCH_ROWS = 16
MAX_DOCUMENTS = 64
MAX_REQUESTS = 16
LOGIT_ELEMENTS = 1 << 18  # elements of one (H, rows, keys) block of logits (2 MiB each, about 12 alive at once)

# correct: equal to full recomputation; known_bad: a bug the report says whether the setup is sensitive to;
# transformers: what transformers does, reported as measured against full recomputation
Schedule = Literal["correct", "known_bad", "transformers"]
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
    "transformers_chunked_prefill": (
        "transformers",
        "transformers' chunked prefill (a forward per chunk at the absolute position ids) right after the requests: "
        "keys cached after rotation and never re-rotated (its KV cache holds rotated keys), each chunk rotated "
        "with the frequencies of its rotary embedding's state (rope_type dynamic: grown to the longest call "
        "seen, reset only below the original max position)",
    ),
    "transformers_decode": (
        "transformers",
        "transformers' generate() right after the requests: the prefill in one forward, then one token per "
        "forward; keys cached after rotation and never re-rotated, each forward rotated with the frequencies of "
        "its rotary embedding's state",
    ),
    "transformers_left_padded_batch": (
        "transformers",
        "transformers' left-padded batch (generate(), or a forward given the position ids from the mask): every "
        "row rotated in one call, for the length max(position_ids) + 1 of the batch (the longest row), and "
        "Llama 4's query temperature taken at the cache slots (the padding counted); a length-dependent method "
        "or that temperature treats the shorter rows differently from their own recomputation",
    ),
    "transformers_requests": (
        "transformers",
        "the requests served one after another by one transformers model (a forward each, a fresh model at the "
        "first): the rotary embedding's state carries from one to the next (rope_type dynamic keeps the "
        "frequencies of the longest request until one is shorter than the original max position)",
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


# ------------------------------------------------------------------------------------------------ schedules
@dataclass(frozen=True)
class Schedules:
    """The sizes of every layout, checked: ``length`` tokens (chunked prefill, decode, eviction), the
    ``chunk_sizes``, the decode's ``prefill``, the padded batch's ``batch_lengths``, the packed ``documents``, the
    eviction cache's ``sinks`` and ``window``, and the ``requests`` a transformers model serves before the
    sequence's transformers variants. :meth:`build` fills in the defaults."""

    length: int
    chunk_sizes: tuple[int, ...]
    prefill: int
    batch_lengths: tuple[int, ...]
    documents: tuple[int, ...]
    sinks: int
    window: int
    requests: tuple[int, ...]

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
        requests: Sequence[int] | None = None,
    ) -> Schedules:
        """Defaults: chunks of length/4, prefill length/2, a batch of (length, length/2), two documents of
        length/2, a window of length/4, requests of (length, length/2). Errors at ("length",),
        ("chunk_sizes", i), ("prefill",), ("batch_lengths", i), ("documents", i), ("sinks",), ("window",),
        ("requests", i)."""
        total = count_argument(length, ("length",), minimum=2, maximum=MAX_SERVE_TOKENS)
        chunks = tuple(chunk_sizes) if chunk_sizes is not None else (max(1, total // 4),)
        if not 1 <= len(chunks) <= MAX_CHUNK_SIZES:
            raise InvalidInput(("chunk_sizes",), f"give 1 to {MAX_CHUNK_SIZES} chunk sizes, got {len(chunks)}")
        for index, chunk in enumerate(chunks):
            count_argument(chunk, ("chunk_sizes", index), maximum=total)
        first = count_argument(total // 2 if prefill is None else prefill, ("prefill",), maximum=total - 1)
        rows = tuple(batch_lengths) if batch_lengths is not None else (total, (total + 1) // 2)
        if not 1 <= len(rows) <= MAX_BATCH_ROWS:
            raise InvalidInput(("batch_lengths",), f"give 1 to {MAX_BATCH_ROWS} rows, got {len(rows)}")
        for index, row in enumerate(rows):
            count_argument(row, ("batch_lengths", index), maximum=MAX_SERVE_TOKENS)
        docs = tuple(documents) if documents is not None else ((total + 1) // 2, total // 2)
        if not 1 <= len(docs) <= MAX_DOCUMENTS:
            raise InvalidInput(("documents",), f"give 1 to {MAX_DOCUMENTS} documents, got {len(docs)}")
        for index, doc in enumerate(docs):
            count_argument(doc, ("documents", index), maximum=MAX_SERVE_TOKENS)
        if sum(docs) > MAX_SERVE_TOKENS:
            raise InvalidInput(("documents",), f"pack at most {MAX_SERVE_TOKENS} tokens, got {sum(docs)}")
        sink_count = count_argument(sinks, ("sinks",), minimum=0, maximum=total)
        recent = count_argument(max(1, total // 4) if window is None else window, ("window",), maximum=total)
        served = tuple(requests) if requests is not None else (total, (total + 1) // 2)
        if not 1 <= len(served) <= MAX_REQUESTS:
            raise InvalidInput(("requests",), f"give 1 to {MAX_REQUESTS} requests, got {len(served)}")
        for index, request in enumerate(served):
            count_argument(request, ("requests", index), maximum=MAX_SERVE_TOKENS)
        return cls(total, chunks, first, rows, docs, sink_count, recent, served)

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
            passes(self.chunk_passes(chunk), 4)
        passes(self.decode_passes(), 3)
        width = max(self.batch_lengths)
        for row in self.batch_lengths:
            entries += 4 * row * row
            tokens += 2 * row + 6 * width  # the reference's row; each variant's slots, q and k
            calls += 4
        for request in self.requests:  # the reference and transformers_requests
            entries += 2 * request * request
            tokens += 4 * request
            calls += 2
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
        pool = max(self.length, width, stream, max(self.requests))
        return entries, tokens, calls, pool


# ------------------------------------------------------------------------------------------------ the report
@dataclass(frozen=True)
class WrongEntry:
    """The first wrong entry: ``sequence`` (the batch row, the request; 0 elsewhere), ``query`` and ``key`` (token
    indices in that sequence, the packed stream, or the original sequence of the eviction cache)."""

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
    sequence_errors: list[float]  # the max |logit error| of each sequence (batch row, request; one elsewhere)
    pattern_errors: int  # entries one attends and the other does not
    first_wrong: WrongEntry | None  # the first entry with error > tolerance or a pattern error
    verdict: Verdict  # correct and transformers: exact / differs; known-bad: caught / equivalent (for this setup)

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
        engine = [v for v in self.variants if v.schedule == "transformers"]
        return {
            "correct_exact": all(v.verdict == "exact" for v in correct),
            "differs": [v.label for v in correct if v.verdict != "exact"],
            "sensitive_to": [v.label for v in bad if v.verdict == "caught"],
            "equivalent_for_this_setup": [v.label for v in bad if v.verdict == "equivalent"],
            "transformers_differs": [v.label for v in engine if v.verdict != "exact"],
        }

    def to_json(self) -> dict[str, Any]:
        variants = []
        for variant in self.variants:
            data = asdict(variant)
            data["label"] = variant.label
            variants.append(data)
        return {
            "setup": self.setup.to_json(),
            "schedules": {
                **asdict(self.schedules),
                "chunk_sizes": list(self.schedules.chunk_sizes),
                "requests": list(self.schedules.requests),
            },
            "tolerance": self.tolerance,
            "seed": self.seed,
            "variants": variants,
            "summary": self.summary(),
        }
