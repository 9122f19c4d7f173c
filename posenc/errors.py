"""Errors the core library raises on bad input; the gateway maps them to problem details.

Torch-free so that every layer can import them.
"""

from __future__ import annotations


class InvalidInput(ValueError):
    """A value that passed the schema but not the method (odd head dim, position past a learned table...).

    ``loc`` is the path of the offending field in the request, e.g. ``("body", "q", "shape")``.
    The gateway answers 422 with this location.
    """

    def __init__(self, loc: tuple[str | int, ...], msg: str) -> None:
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}")
        self.loc = loc
        self.msg = msg


class BudgetExceeded(ValueError):
    """The requested output or input is larger than the configured budget (the gateway answers 413)."""

    def __init__(self, what: str, size: int, limit: int, hint: str) -> None:
        super().__init__(f"{what} is {size} bytes, over the limit of {limit} bytes; {hint}")
        self.what = what
        self.size = size
        self.limit = limit
        self.hint = hint
