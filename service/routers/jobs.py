"""Job routes (being written): POST/GET /v1/jobs, cancel, artifacts, and /readyz."""

from fastapi import APIRouter

router = APIRouter()
readiness_router = APIRouter()
