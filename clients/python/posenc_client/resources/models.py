"""GET /v1/models (presets), POST /v1/models/resolve and POST /v1/models/gguf: real models' configs (and
GGUF files' metadata) as per-layer rotary setups."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from posenc_client._gguf import GgufSource, read_gguf
from posenc_client._models import ConvertResponse, GgufResolved, ModelPreset, ModelPresetList, ResolvedModel
from posenc_client._transport import HTTPRequest
from posenc_client.resources._base import AsyncResource, SyncResource

JSON_ACCEPT = {"Accept": "application/json"}
ConfigSource = str | Path | Mapping[str, Any]


def config_or_preset(config: ConfigSource) -> dict[str, Any] | str:
    """What the API takes for a config: a mapping or a config.json path (read here) as the config, or any other
    string (no such file, not ending in .json) as a preset's name (GET /v1/models), which the server looks up."""
    if isinstance(config, str) and not config.endswith(".json") and not Path(config).exists():
        return config
    return read_config(config)


def read_config(config: ConfigSource) -> dict[str, Any]:
    """A config as a dict: a mapping as is, a path (str or Path) read as JSON (a config.json)."""
    if isinstance(config, Mapping):
        return dict(config)
    loaded = json.loads(Path(config).read_text())
    if not isinstance(loaded, dict):
        raise ValueError(f"{config}: a model config is a JSON object, got {type(loaded).__name__}")
    return loaded


def _resolve_request(config: ConfigSource | None, preset: str | None) -> HTTPRequest:
    if (config is None) == (preset is None):
        raise ValueError("give a config (a dict or a config.json path) or a preset name, not both")
    body = {"preset": preset} if preset is not None else {"config": read_config(config)}  # type: ignore[arg-type]
    return HTTPRequest(method="POST", path="/v1/models/resolve", headers=JSON_ACCEPT, json_body=body)


def _get_request(name: str) -> HTTPRequest:
    if not name:
        raise ValueError("a preset name is required")
    return HTTPRequest(method="GET", path=f"/v1/models/{quote(name, safe='')}", headers=JSON_ACCEPT)


def _convert_request(config: ConfigSource, to: str) -> HTTPRequest:
    body = {"config": config_or_preset(config), "to": to}
    return HTTPRequest(method="POST", path="/v1/models/convert", headers=JSON_ACCEPT, json_body=body)


_LIST = HTTPRequest(method="GET", path="/v1/models", headers=JSON_ACCEPT)


def _gguf_request(gguf: GgufSource, against: ConfigSource | None, against_preset: str | None) -> HTTPRequest:
    if against is not None and against_preset is not None:
        raise ValueError("give against (a config) or against_preset (a preset's name), not both")
    if isinstance(gguf, Mapping):
        header = dict(gguf) if isinstance(gguf.get("metadata"), Mapping) else {"metadata": dict(gguf)}
    else:
        header = read_gguf(gguf)
    body: dict[str, Any] = {"metadata": header["metadata"], "tensors": header.get("tensors") or {}}
    if against is not None:
        body["against"] = read_config(against)
    elif against_preset is not None:
        body["against"] = against_preset
    return HTTPRequest(method="POST", path="/v1/models/gguf", headers=JSON_ACCEPT, json_body=body)


class Models(SyncResource):
    def resolve(self, config: ConfigSource | None = None, *, preset: str | None = None) -> ResolvedModel:
        """One rotary setup per layer of a model (layers: method and params or None for NoPE, rotated
        slice, pairing, scales, window, M-RoPE sections) and warnings for known bug patterns. config: a
        config.json path or its dict; or preset: a name from list()."""
        response = self._client._request(_resolve_request(config, preset))
        return ResolvedModel.model_validate_json(response.content)

    def list(self) -> list[ModelPreset]:
        """The presets: the rope-relevant fields of widely used models' configs."""
        return ModelPresetList.model_validate_json(self._client._request(_LIST).content).data

    def get(self, name: str) -> ModelPreset:
        return ModelPreset.model_validate_json(self._client._request(_get_request(name)).content)

    def convert(self, config: ConfigSource, to: Literal["v4", "v5"]) -> dict[str, Any]:
        """The config in the other Hugging Face dialect: v4 rope_scaling or v5 rope_parameters."""
        return ConvertResponse.model_validate_json(self._client._request(_convert_request(config, to)).content).config

    def gguf(
        self, gguf: GgufSource, *, against: ConfigSource | None = None, against_preset: str | None = None
    ) -> GgufResolved:
        """A GGUF's layers, as resolve gives them for the config its metadata maps to (also in the answer, as
        config), and with against (a config.json path or dict) or against_preset a warning for every rope
        field the conversion dropped, renamed or changed (gguf_field_*, both values in evidence) and every
        layer that resolves differently (gguf_layers_differ). gguf: a .gguf path (its header is read here,
        see read_gguf; needs the gguf extra) or the header as read_gguf returns it."""
        response = self._client._request(_gguf_request(gguf, against, against_preset))
        return GgufResolved.model_validate_json(response.content)


class AsyncModels(AsyncResource):
    async def resolve(self, config: ConfigSource | None = None, *, preset: str | None = None) -> ResolvedModel:
        response = await self._client._request(_resolve_request(config, preset))
        return ResolvedModel.model_validate_json(response.content)

    async def list(self) -> list[ModelPreset]:
        return ModelPresetList.model_validate_json((await self._client._request(_LIST)).content).data

    async def get(self, name: str) -> ModelPreset:
        return ModelPreset.model_validate_json((await self._client._request(_get_request(name))).content)

    async def convert(self, config: ConfigSource, to: Literal["v4", "v5"]) -> dict[str, Any]:
        response = await self._client._request(_convert_request(config, to))
        return ConvertResponse.model_validate_json(response.content).config

    async def gguf(
        self, gguf: GgufSource, *, against: ConfigSource | None = None, against_preset: str | None = None
    ) -> GgufResolved:
        response = await self._client._request(_gguf_request(gguf, against, against_preset))
        return GgufResolved.model_validate_json(response.content)
