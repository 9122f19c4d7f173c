"""``POST /v1/models/gguf``: a GGUF's header metadata resolved per layer, and compared with a Hugging Face config.

The server never sees the file: the client reads its header (``posenc_client._gguf.read_gguf``) and sends the
metadata and the small rope tensors, bounded by
``posenc.schemas.models.GgufRequest`` and ``gguf_files.check_metadata``. Planning maps the metadata to a config and
resolves it (and the config compared with), so the cost is known from resolved layers, like ``plan_resolve``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from posenc.compute.cost import Cost, Plan, fields
from posenc.compute.rope import WORK_PER_CONFIG, WORK_PER_JSON_ELEMENT, WORK_PER_LAYER
from posenc.errors import located
from posenc.real_models.engine_notes import engine_notes
from posenc.real_models.gguf_files import check_metadata, compare_with_config, config_from_gguf
from posenc.real_models.presets import get_preset
from posenc.schemas.models import GgufRequest

WORK_PER_METADATA_VALUE = 100  # one value of the metadata checked and mapped


def plan_gguf(request: GgufRequest) -> Plan[dict[str, Any]]:
    """The GGUF's layers (the answer of ``/v1/models/resolve`` for the config it maps to), its notes, and with
    ``against`` the comparison's warnings. Work: the metadata walked once, two configs resolved (one per layer
    each), and the answer's JSON."""
    values = check_metadata(request.metadata, request.tensors)
    converted = config_from_gguf(request.metadata, request.tensors)
    resolved = converted.resolve()
    against: dict[str, Any] | None = None
    label: str | None = None
    if isinstance(request.against, str):
        with located(("against",)):
            against, label = get_preset(request.against), request.against
    elif request.against is not None:
        against, label = request.against, "config"
    warnings = [*resolved.warnings, *converted.notes]
    if against is not None:
        warnings += compare_with_config(request.metadata, request.tensors, against)
    layers = len(resolved.layers) * (1 if against is None else 2)
    elements = values + sum(
        20 + sum(len(v) if isinstance(v, list) else 1 for v in layer.params.values()) for layer in resolved.layers
    )
    cost = Cost(
        json_elements=elements,
        work=WORK_PER_CONFIG + values * WORK_PER_METADATA_VALUE + layers * WORK_PER_LAYER
        + elements * WORK_PER_JSON_ELEMENT,
        fields=fields("metadata", "against"),
    )  # fmt: skip
    answer = {
        **resolved.to_json(),
        "warnings": [asdict(warning) for warning in warnings],
        "engine_notes": [note.to_json() for note in engine_notes(converted.config, resolved)],
        "config": converted.config,
        "against": label,
    }
    return Plan(cost, lambda: answer)
