"""Defaults of the SDK, in one place (documented in docs/api.md, "Retries")."""

from __future__ import annotations

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
BASE_URL_ENV = "POSENC_BASE_URL"
API_KEY_ENV = "POSENC_API_KEY"
API_KEY_HEADER = "X-API-Key"
IDEMPOTENCY_HEADER = "Idempotency-Key"
RETRY_COUNT_HEADER = "X-Posenc-Retry-Count"

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0

DEFAULT_MAX_RETRIES = 2
INITIAL_RETRY_DELAY_S = 0.5
MAX_RETRY_DELAY_S = 8.0
MAX_RETRY_AFTER_S = 60.0
RETRYABLE_STATUSES: frozenset[int] = frozenset({408, 429, 502, 503, 504})

# Input tensors with at most this many elements in total travel inline in the JSON body; larger ones as a
# safetensors request body (routes that accept one: /v1/rotary and /v1/attention).
INLINE_MAX_ELEMENTS = 4096

DEFAULT_POLL_INTERVAL_S = 1.0
