"""Errors the core library raises on bad input; the gateway maps them to problem details.

Torch-free so that every layer can import them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Loc = tuple[str | int, ...]


class InvalidInput(ValueError):
    """A value that passed the schema but not the method (odd head dim, position past a learned table...).

    ``loc`` is the path of the offending field in the request, e.g. ``("body", "q", "shape")``.
    The gateway answers 422 with this location.
    """

    def __init__(self, loc: Loc, msg: str) -> None:
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}")
        self.loc = loc
        self.msg = msg

    def relocated(self, old: Loc, new: Loc) -> InvalidInput:
        """The same error with the leading ``old`` of its loc replaced by ``new``."""
        return InvalidInput(_relocate(self.loc, old, new), self.msg)


class BudgetExceeded(ValueError):
    """The requested output or input is larger than the configured budget (the gateway answers 413)."""

    def __init__(self, what: str, size: int, limit: int, hint: str) -> None:
        super().__init__(f"{what} is {size} bytes, over the limit of {limit} bytes; {hint}")
        self.what = what
        self.size = size
        self.limit = limit
        self.hint = hint


class FieldErrors(ValueError):
    """Several invalid fields at once, e.g. every error of a method's params model.

    ``errors`` are ``{"loc", "msg", "type"}`` dicts, each ``loc`` the full path in the request
    (``("body", "params", "base")``). The gateway answers 422 with all of them, like its own validation errors.
    """

    def __init__(self, errors: Iterable[Mapping[str, Any]]) -> None:
        self.errors: list[dict[str, Any]] = [
            {
                "loc": tuple(error.get("loc", ())),
                "msg": str(error.get("msg", "")),
                "type": str(error.get("type", "value_error")),
            }
            for error in errors
        ]
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in self.errors))

    def relocated(self, old: Loc, new: Loc) -> FieldErrors:
        """The same errors with the leading ``old`` of each loc replaced by ``new``."""
        return FieldErrors({**e, "loc": _relocate(e["loc"], old, new)} for e in self.errors)


def _relocate(loc: Loc, old: Loc, new: Loc) -> Loc:
    return (*new, *loc[len(old) :]) if loc[: len(old)] == old else loc
