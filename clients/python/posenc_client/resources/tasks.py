"""GET /v1/tasks: every job task with its family, unit, size fields and metrics, and the suites."""

from __future__ import annotations

from posenc_client._models import TaskCatalogue
from posenc_client._transport import HTTPRequest
from posenc_client.resources._base import AsyncResource, SyncResource

_REQUEST = HTTPRequest(method="GET", path="/v1/tasks", headers={"Accept": "application/json"})


class Tasks(SyncResource):
    def list(self) -> TaskCatalogue:
        """The tasks a job's data.task may name (.tasks) and the suites a benchmark may name (.suites)."""
        return TaskCatalogue.model_validate_json(self._client._request(_REQUEST).content)


class AsyncTasks(AsyncResource):
    async def list(self) -> TaskCatalogue:
        return TaskCatalogue.model_validate_json((await self._client._request(_REQUEST)).content)
