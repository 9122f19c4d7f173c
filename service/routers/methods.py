"""The method catalogue: each method's kind, paper, params schema (with defaults) and conventions."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from posenc.pe import get_method, list_methods
from posenc.schemas.errors import Problem
from posenc.schemas.methods import Kind, MethodInfo, MethodList
from posenc.schemas.tasks import TaskCatalogue
from posenc.tasks import catalogue

router = APIRouter(prefix="/v1", tags=["methods"])
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "missing or invalid X-API-Key"},
    404: {"model": Problem, "description": "no method by that name"},
    422: {"model": Problem, "description": "invalid query parameter"},
    429: {"model": Problem, "description": "rate limited; see Retry-After"},
}


@router.get("/methods", name="list", response_model=MethodList, responses=_PROBLEMS)
async def list_registered_methods(
    kind: Annotated[Kind | None, Query(description="only methods of this kind")] = None,
) -> MethodList:
    """Every registered method, sorted by kind then name."""
    items = [spec.info() for spec in list_methods(kind)]
    return MethodList(data=items, count=len(items))


@router.get("/methods/{name}", name="retrieve", response_model=MethodInfo, responses=_PROBLEMS)
async def retrieve_method(name: str) -> MethodInfo:
    """One method by its public name (404 if none is registered under it)."""
    return get_method(name).info()


@router.get("/tasks", name="tasks", response_model=TaskCatalogue, tags=["jobs"], responses=_PROBLEMS)
async def list_tasks() -> TaskCatalogue:
    """Every job task (``data.task``) with its family, its unit, where a spec gives its training and evaluation
    sizes and its metrics; and the suites a benchmark may name."""
    return catalogue()
