"""Errors the core library raises on bad input; the gateway maps them to problem details.

Torch-free so that every layer can import them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

Loc = tuple[str | int, ...]


class InvalidInput(ValueError):
    """A value that passed the schema but not the method (odd head dim, position past a learned table...).

    ``loc`` is the path of the offending field relative to whoever raised it: the math names its own inputs
    (``("params", "base")``, ``("q", "shape")``) and each caller adds its prefix with :func:`located`
    (``body`` in the gateway, ``spec.methods[i]`` in jobs). The gateway answers 422 with the full location.
    """

    def __init__(self, loc: Loc, msg: str) -> None:
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}")
        self.loc = loc
        self.msg = msg

    def relocated(self, old: Loc, new: Loc) -> InvalidInput:
        """The same error with the leading ``old`` of its loc replaced by ``new``."""
        return InvalidInput(_relocate(self.loc, old, new), self.msg)

    def prefixed(self, prefix: Loc) -> InvalidInput:
        return InvalidInput((*prefix, *self.loc), self.msg)


class ContiguousPositionsRequired(InvalidInput):
    """A method that reads positions only as token order (a relative shift, a running sum over the tokens) was
    given positions that are not ``arange``: the dry run of a long job (``Applier.dry_run``) then checks it on a
    short contiguous sequence instead, since such a method has no table a length could outrun."""


class BudgetExceeded(ValueError):
    """A request (or a job) larger than a configured budget (the gateway answers 413).

    ``what`` says what was measured ("the memory this request needs (outputs and workspace)"), ``size`` and
    ``limit`` are in ``unit`` (bytes, elements, work units), ``setting`` names the budget's setting, ``fields`` the
    request fields that drive the size (relative locs, like ``InvalidInput``'s), ``hint`` how to get under it.
    """

    def __init__(
        self,
        what: str,
        size: int,
        limit: int,
        hint: str,
        *,
        unit: str = "bytes",
        setting: str | None = None,
        fields: Iterable[Loc] = (),
    ) -> None:
        where = f" ({setting})" if setting else ""
        super().__init__(f"{what} is {size} {unit}, over the limit of {limit} {unit}{where}; {hint}")
        self.what = what
        self.size = size
        self.limit = limit
        self.hint = hint
        self.unit = unit
        self.setting = setting
        self.fields: tuple[Loc, ...] = tuple(fields)

    def prefixed(self, prefix: Loc) -> BudgetExceeded:
        return BudgetExceeded(
            self.what,
            self.size,
            self.limit,
            self.hint,
            unit=self.unit,
            setting=self.setting,
            fields=[(*prefix, *loc) for loc in self.fields],
        )


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

    def prefixed(self, prefix: Loc) -> FieldErrors:
        return FieldErrors({**e, "loc": (*prefix, *e["loc"])} for e in self.errors)


@contextmanager
def located(prefix: Loc) -> Iterator[None]:
    """Errors raised inside name their field under ``prefix``: the caller's place for the callee's inputs."""
    try:
        yield
    except InvalidInput as exc:
        raise exc.prefixed(prefix) from None
    except FieldErrors as exc:
        raise exc.prefixed(prefix) from None
    except BudgetExceeded as exc:
        raise exc.prefixed(prefix) from None


def _relocate(loc: Loc, old: Loc, new: Loc) -> Loc:
    return (*new, *loc[len(old) :]) if loc[: len(old)] == old else loc
