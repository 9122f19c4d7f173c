"""GET /v1/methods and GET /v1/methods/{name}: the catalogue of positional encodings."""

from __future__ import annotations

from urllib.parse import quote

from posenc_client._models import MethodInfo, MethodList
from posenc_client._transport import HTTPRequest
from posenc_client.resources._base import AsyncResource, SyncResource

JSON_ACCEPT = {"Accept": "application/json"}


def _list_request(kind: str | None) -> HTTPRequest:
    return HTTPRequest(method="GET", path="/v1/methods", params={"kind": kind} if kind else None, headers=JSON_ACCEPT)


def _get_request(name: str) -> HTTPRequest:
    if not name:
        raise ValueError("a method name is required")
    return HTTPRequest(method="GET", path=f"/v1/methods/{quote(name, safe='')}", headers=JSON_ACCEPT)


class Methods(SyncResource):
    def list(self, *, kind: str | None = None) -> list[MethodInfo]:
        """Every registered method, or those of one kind (absolute, bias, rotary, score_mod, attention)."""
        response = self._client._request(_list_request(kind))
        return MethodList.model_validate_json(response.content).data

    def get(self, name: str) -> MethodInfo:
        """One method: kind, paper, params JSON schema with defaults, conventions. Unknown: NotFoundError."""
        response = self._client._request(_get_request(name))
        return MethodInfo.model_validate_json(response.content)


class AsyncMethods(AsyncResource):
    async def list(self, *, kind: str | None = None) -> list[MethodInfo]:
        response = await self._client._request(_list_request(kind))
        return MethodList.model_validate_json(response.content).data

    async def get(self, name: str) -> MethodInfo:
        response = await self._client._request(_get_request(name))
        return MethodInfo.model_validate_json(response.content)
