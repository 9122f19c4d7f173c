"""Dependencies shared by the routers, as ``Annotated`` aliases.

The app factory stores one ``Settings`` object on ``app.state`` (by default the process-wide cached
``posenc.settings.get_settings()``); routes read it through :func:`get_app_settings`, so a test either builds
an app with ``create_app(settings=...)`` or overrides this one dependency.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request

from posenc.settings import Settings
from service.limits import ComputeSlots
from service.transport import negotiate


# The dependencies are ``async def`` though they never await: FastAPI runs a plain ``def`` dependency in the
# threadpool, one hop (and a GIL hand-off) per dependency per request, which under many concurrent small
# requests cost more than the request's own work.
async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_compute_slots(request: Request) -> ComputeSlots:
    slots: ComputeSlots = request.app.state.compute_slots
    return slots


async def accepted_media_type(
    accept: Annotated[
        str | None,
        Header(
            description="application/json (default), application/octet-stream, application/vnd.safetensors "
            "or application/x-npy; anything else is a 406"
        ),
    ] = None,
) -> str:
    """The response media type, chosen before any work is done so an unacceptable Accept costs nothing."""
    return negotiate(accept)


async def requested_tensor(
    tensor: Annotated[
        str | None,
        Query(description="octet-stream and x-npy carry one tensor: which one (default: the first)"),
    ] = None,
) -> str | None:
    return tensor


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
SlotsDep = Annotated[ComputeSlots, Depends(get_compute_slots)]
MediaTypeDep = Annotated[str, Depends(accepted_media_type)]
TensorNameDep = Annotated[str | None, Depends(requested_tensor)]
