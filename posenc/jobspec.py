"""Checks a job submission can pass before it is queued, without importing the training code.

The gateway may not import ``posenc.training`` (import-linter: it enqueues by name and never loads task code),
yet an unknown method should be a 404 and bad method params a 422 at submission, not a failed job minutes
later. What can be checked from the method registry and the spec alone is checked here; anything that only
the trainer can know still fails the job with its message.
"""

from __future__ import annotations

from pydantic import ValidationError

from posenc.errors import InvalidInput
from posenc.schemas.jobs import JobCreate


def validate_job(create: JobCreate) -> None:
    """Raises ``UnknownMethodError`` (404) or ``InvalidInput`` naming the field (422)."""
    import posenc.pe  # registers every method (torch); imported here so importing this module stays light

    spec = create.spec
    for i, ref in enumerate(spec.methods):
        method = posenc.pe.get_method(ref.method)
        try:
            method.parse_params(ref.params)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ("body", "spec", "methods", i, "params", *first["loc"])
            raise InvalidInput(loc, first["msg"]) from None
        head_dim = spec.model.dim // spec.model.heads
        if method.kind.value == "rotary" and head_dim % 2:
            raise InvalidInput(
                ("body", "spec", "model", "dim"),
                f"{ref.method} rotates pairs of channels: the head dim dim/heads={head_dim} must be even",
            )
    if spec.checkpoint is not None and create.kind != "extrapolate":
        raise InvalidInput(("body", "spec", "checkpoint"), "only an extrapolate job takes a checkpoint")
    if spec.eval.lengths is not None and not spec.eval.lengths:
        raise InvalidInput(("body", "spec", "eval", "lengths"), "give at least one length, or leave it out")
