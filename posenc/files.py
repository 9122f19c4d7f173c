"""Atomic file writes: the one way posenc writes a file another process may read (job results, artifacts,
checkpoints, cached corpora).

Every write goes to a hidden temporary name in the same directory (``.<name>.<pid>.tmp``, never listed as an
artifact) and is moved into place with ``os.replace``, so a reader, or a redelivered job, sees the old file or the
new one, never half of one. A write that fails leaves no temporary behind.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """``write(temporary)`` writes the file (any writer that takes a path), then it is renamed to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, lambda temporary: temporary.write_bytes(data))


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, value: Any) -> None:
    """JSON with ``allow_nan=False``: a non-finite number is a bug here, not a file to write."""
    write_bytes_atomic(path, json.dumps(value, indent=1, allow_nan=False).encode())


def spell_non_finite(value: Any) -> Any:
    """``value`` with every non-finite float spelled ``"nan"``, ``"inf"`` or ``"-inf"`` (as tensors are on the
    wire), in nested dicts, lists and tuples: what a measured number that may diverge (a training loss) is
    written as in a JSON result."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {key: spell_non_finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [spell_non_finite(item) for item in value]
    return value


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
