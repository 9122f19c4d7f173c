"""Liveness and metrics. Neither touches Redis or torch: a live process answers even when its
dependencies are down (readiness, which checks them, is ``/readyz`` in the jobs router).

``/healthz`` is always open. ``/metrics`` (route names, request counts, failed authentications) needs an API
key when keys are configured, unless ``public_health`` opens it to scrapers without one."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from service.limits import require_key_unless_public
from service.metrics import Metrics

router = APIRouter(tags=["health"])


@router.get("/healthz", name="healthz", summary="Liveness: the process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/metrics",
    name="metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    dependencies=[Depends(require_key_unless_public)],
)
async def metrics(request: Request) -> Response:
    registry: Metrics = request.app.state.metrics
    return Response(generate_latest(registry.registry), media_type=CONTENT_TYPE_LATEST)
