"""The gateway's app factory. The ASGI app is ``service.main:app``; tests build their own with
``create_app(settings=Settings(...))``.

Layers, outermost first: CORS (only when origins are configured), metrics, the body-size cap, the
problem-details handlers, then the routers. Everything under /v1 sits behind the API key check and
rate limit; /healthz and the docs do not. With keys configured, /metrics needs one and /readyz shows its
details only to one, unless ``public_health`` opens them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import torch
from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from posenc import __version__, runtime
from posenc.pe import compiled
from posenc.schemas.compute import AttentionRequest, RotaryRequest
from posenc.settings import Settings, get_settings
from service.docs import install_offline_docs
from service.errors import install_error_handlers
from service.examples import document_examples
from service.limits import BodySizeLimit, ComputeSlots, KeyRing, RateLimiter, authenticate
from service.metrics import Metrics, MetricsMiddleware
from service.openapi import document_problems
from service.page import install_page
from service.routers import compute, health, jobs, methods, models, rope

EXPOSED_HEADERS = [
    "X-Tensor-Shape",
    "X-Tensor-Dtype",
    "X-Posenc-Meta",
    "X-Posenc-Tensors",
    "X-Posenc-Tensor",
    "Location",
    "Retry-After",
    "X-Should-Retry",
]
# Models whose routes read the body themselves (JSON or safetensors) and so are not collected by FastAPI.
_SELF_PARSED_BODIES = (RotaryRequest, AttentionRequest)


def operation_id(route: APIRoute) -> str:
    """Stable ids for generated clients: '<tag>-<route name>', e.g. 'compute-bias'."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings if settings is not None else get_settings()
    compiled.configure(enabled=settings.compile_kernels)
    torch.set_num_threads(runtime.gateway_torch_threads(settings.torch_threads, settings.compute_concurrency))
    metrics = Metrics(compute_capacity=settings.compute_concurrency)
    rate_limiter = RateLimiter(settings.rate_limit_per_minute, settings.redis_url)
    auth_failures = RateLimiter(settings.auth_failures_per_minute, settings.redis_url)

    compute_slots = ComputeSlots(settings.compute_concurrency, settings.compute_wait_s, metrics)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        compute_slots.close()
        await rate_limiter.close()
        await auth_failures.close()

    app = FastAPI(
        title="posenc",
        version=__version__,
        summary="Compute and evaluate transformer positional encodings",
        description="Tensors come back as JSON (small), raw bytes, safetensors or .npy, chosen by Accept. "
        "Errors are application/problem+json.",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        docs_url=None,  # the CDN-loading pages; install_offline_docs serves them from local assets
        redoc_url=None,
    )
    install_offline_docs(app)
    install_page(app)  # the browser page at /: static files; its API calls go through /v1 like any client's
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.rate_limiter = rate_limiter
    app.state.auth_failures = auth_failures
    app.state.keyring = KeyRing.from_settings(settings)
    app.state.compute_slots = compute_slots

    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=["X-API-Key", "Idempotency-Key", "Content-Type", "Accept"],
            expose_headers=EXPOSED_HEADERS,
        )

    guarded = [Depends(authenticate)]
    app.include_router(health.router)
    app.include_router(jobs.readiness_router)
    app.include_router(methods.router, dependencies=guarded)
    app.include_router(compute.router, dependencies=guarded)
    app.include_router(models.router, dependencies=guarded)
    app.include_router(rope.router, dependencies=guarded)
    app.include_router(jobs.router, dependencies=guarded)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema plus the self-parsed request models, with errors typed application/problem+json."""
    schema = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
        separate_input_output_schemas=app.separate_input_output_schemas,
    )
    components: dict[str, Any] = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in _SELF_PARSED_BODIES:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in model_schema.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components.setdefault(model.__name__, model_schema)
    document_problems(schema)
    document_examples(schema)
    return schema


app = create_app()
