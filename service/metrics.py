"""Prometheus metrics of one app: requests and latency per route template and status, compute slot usage,
failed authentications.

Each app gets its own ``CollectorRegistry`` so that several apps in one process (tests) never collide on
metric names. Routes are labelled by their template (``/v1/methods/{name}``), never the raw path, so the
label set stays bounded; requests that match no route share the label ``unmatched``.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Metrics:
    def __init__(self, compute_capacity: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "posenc_http_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "posenc_http_request_duration_seconds",
            "Time from request start to the end of the response body",
            ["route", "method"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        )
        self.slots_in_use = Gauge("posenc_compute_slots_in_use", "Compute slots held right now", registry=self.registry)
        self.slots_capacity = Gauge("posenc_compute_slots_capacity", "Compute slots in total", registry=self.registry)
        self.slots_rejected = Counter(
            "posenc_compute_slots_rejected",
            "Compute requests answered 503 because no slot freed up in time",
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "posenc_auth_failures",
            "Requests refused authentication: reason missing or invalid (a 401) or blocked (the address failed "
            "too often this minute, a 429)",
            ["reason"],
            registry=self.registry,
        )
        self.slots_capacity.set(compute_capacity)


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware) so streaming and large bodies pass through untouched."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees if the app raises before it starts a response

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            template = _route_label(scope, status)
            method = scope.get("method", "")
            self.metrics.requests.labels(template, method, str(status)).inc()
            self.metrics.latency.labels(template, method).observe(time.perf_counter() - started)


def _route_label(scope: Scope, status: int) -> str:
    """The matched route's template; FastAPI only records API routes in the scope, so the few plain
    routes (docs, openapi.json) fall back to their fixed path, and anything that matched nothing
    (404, where the path is whatever the client sent) shares one label."""
    route = scope.get("route")
    if isinstance(route, BaseRoute) and isinstance(getattr(route, "path", None), str):
        return str(route.path)  # type: ignore[attr-defined]
    if status == 404:
        return "unmatched"
    return str(scope.get("path", "unmatched"))
