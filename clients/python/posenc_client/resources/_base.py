from __future__ import annotations

from typing import TYPE_CHECKING

from posenc_client._backends import ConcreteFormat, ReturnFormat, resolve_format
from posenc_client._base_client import UploadMode

if TYPE_CHECKING:
    from posenc_client._client import AsyncClient, Client


class SyncResource:
    def __init__(self, client: Client) -> None:
        self._client = client

    def _format(self, requested: ReturnFormat | None) -> ConcreteFormat:
        return resolve_format(requested or self._client.options.return_format)

    def _upload(self, requested: UploadMode | None) -> UploadMode:
        return requested or self._client.options.upload


class AsyncResource:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def _format(self, requested: ReturnFormat | None) -> ConcreteFormat:
        return resolve_format(requested or self._client.options.return_format)

    def _upload(self, requested: UploadMode | None) -> UploadMode:
        return requested or self._client.options.upload
