"""A GGUF rewritten with some of its metadata keys (or tensors) changed, added or removed, with the installed gguf
package's reader and writer: deliberate edits of a converted file's rope keys for the comparison tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.constants import GGUFValueType


def rewrite(
    source: Path,
    target: Path,
    *,
    set_keys: Mapping[str, tuple[GGUFValueType, Any]] | None = None,
    drop_keys: Iterable[str] = (),
    drop_tensors: Iterable[str] = (),
    set_tensors: Mapping[str, np.ndarray] | None = None,
) -> Path:
    """``source`` copied to ``target`` with ``set_keys`` (key -> (type, value)) written, ``drop_keys`` and
    ``drop_tensors`` left out and ``set_tensors`` (float32) replacing or adding tensors."""
    set_keys, set_tensors = dict(set_keys or {}), dict(set_tensors or {})
    dropped, dropped_tensors = set(drop_keys), set(drop_tensors)
    reader = gguf.GGUFReader(source)
    arch = str(reader.fields["general.architecture"].contents())
    writer = gguf.GGUFWriter(target, arch)
    for key, entry in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in dropped or key in set_keys:
            continue
        kind = entry.types[0]
        sub_type = entry.types[1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(key, entry.contents(), kind, sub_type)
    for key, (kind, value) in set_keys.items():
        writer.add_key_value(key, value, kind)
    for tensor in reader.tensors:
        if tensor.name in dropped_tensors or tensor.name in set_tensors:
            continue
        data = np.array(tensor.data)
        shape = list(reversed(tensor.shape.tolist()))
        writer.add_tensor(tensor.name, data, raw_shape=shape, raw_dtype=tensor.tensor_type)
    for name, values in set_tensors.items():
        writer.add_tensor(name, np.asarray(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target
