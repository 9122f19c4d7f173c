"""One cost model for every route: what a request will take, worked out from the request alone before any work.

A ``Cost`` has five measures, each checked against a budget of the settings (``Budgets``):

- ``output_bytes + workspace_bytes``: every byte the work allocates, against ``max_output_bytes``;
- ``json_elements``: the numbers of a JSON answer, against ``max_json_elements``;
- ``work``: a CPU measure in *work units*, against ``max_request_work``. A unit is about a nanosecond of one core
  of the reference machine (a 2-core x86 box): each route's formula (positions x rotary pairs x layers and the
  like, times a per-element constant) sits beside its plan, and ``bench/request_costs.py`` times every route
  against its estimate, so the constants can be checked on any machine;
- ``input_elements``: the elements of the request's own tensors, against ``max_input_elements``;
- ``fields``: the request fields that drive the cost, named in the 413.

A request within the small-request threshold (``inline_max_bytes`` and ``inline_max_work``) is tiny work the
gateway does on its event loop; anything larger runs in a compute slot. Every number a formula reads is
bounded by the request schema or the config reader, so a cost is never itself expensive to compute.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from posenc.errors import BudgetExceeded, Loc
from posenc.schemas.tensors import declared_inputs
from posenc.settings import Settings

T = TypeVar("T")


@dataclass(frozen=True)
class Cost:
    """What a request will take (see the module docstring for the units)."""

    output_bytes: int = 0
    workspace_bytes: int = 0
    json_elements: int = 0
    work: int = 0
    fields: tuple[Loc, ...] = ()
    input_elements: int = 0  # elements of the request's own tensors (inline, seeded or uploaded)

    @property
    def total_bytes(self) -> int:
        return self.output_bytes + self.workspace_bytes

    def plus(self, other: Cost) -> Cost:
        """Both costs: the work of one request that does both."""
        return Cost(
            self.output_bytes + other.output_bytes,
            self.workspace_bytes + other.workspace_bytes,
            self.json_elements + other.json_elements,
            self.work + other.work,
            tuple(dict.fromkeys((*self.fields, *other.fields))),
            self.input_elements + other.input_elements,
        )


@dataclass(frozen=True)
class Plan(Generic[T]):
    """A request prepared: its cost, known before any work, and ``run``, which does the work."""

    cost: Cost
    run: Callable[[], T]
    hint: str = "make the request smaller"  # how to get under a budget


@dataclass(frozen=True)
class Budgets:
    """The per-request budgets of the settings, and the small-request threshold."""

    max_bytes: int
    max_json_elements: int
    max_work: int
    max_input_elements: int
    inline_bytes: int
    inline_work: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Budgets:
        return cls(
            max_bytes=settings.max_output_bytes,
            max_json_elements=settings.max_json_elements,
            max_work=settings.max_request_work,
            max_input_elements=settings.max_input_elements,
            inline_bytes=settings.inline_max_bytes,
            inline_work=settings.inline_max_work,
        )

    def check(self, cost: Cost, hint: str, *, json_answer: bool = True) -> None:
        """``BudgetExceeded`` (a 413 naming the size, the limit, its setting and the fields) for the first budget
        ``cost`` is over; ``json_answer``: whether the answer is JSON (its elements are then counted too)."""
        checks: list[tuple[str, int, int, str, str]] = [
            ("the input tensors", cost.input_elements, self.max_input_elements, "elements", "max_input_elements"),
            ("the memory this request needs (outputs and workspace)", cost.total_bytes, self.max_bytes, "bytes",
             "max_output_bytes"),
            ("the CPU work this request needs (a work unit is about 1 ns of one core)", cost.work, self.max_work,
             "work units", "max_request_work"),
        ]  # fmt: skip
        if json_answer:
            checks.append(
                ("the JSON answer", cost.json_elements, self.max_json_elements, "elements", "max_json_elements")
            )
        for what, size, limit, unit, setting in checks:
            if size > limit:
                raise BudgetExceeded(what, size, limit, hint, unit=unit, setting=setting, fields=cost.fields)

    def check_declared(self, body: Any, hint: str = "send fewer or smaller tensors") -> None:
        """The input tensors ``body`` declares anywhere (``declared_inputs``: random specs in raw params too),
        against ``max_input_elements`` before any is decoded or drawn; the 413 names the largest."""
        found = declared_inputs(body)
        total = sum(elements for _, elements in found)
        if total > self.max_input_elements:
            largest = tuple(loc for loc, _ in sorted(found, key=lambda item: -item[1]))[:3]
            cost = Cost(input_elements=total, fields=largest)
            self.check(cost, hint, json_answer=False)

    def small(self, cost: Cost) -> bool:
        """Whether the work is small enough to do on the event loop (less than handing it to a thread)."""
        return cost.total_bytes <= self.inline_bytes and cost.work <= self.inline_work


def fields(*locs: Loc | str) -> tuple[Loc, ...]:
    """Field locs from tuples or dotted names (``"setup_a.rotary_dim"``)."""
    return tuple(loc if isinstance(loc, tuple) else tuple(loc.split(".")) for loc in locs)


class Meter:
    """Costs charged one after another against one set of budgets (None: unbounded), the running total checked at
    each charge, before the work it pays for: the checks of a job spec, whose every method entry does work of its
    own before the job is queued (its dry run, its seeded tables)."""

    def __init__(self, budgets: Budgets | None = None, hint: str = "make the request smaller") -> None:
        self.budgets = budgets
        self.hint = hint
        self.total = Cost()

    def charge(self, cost: Cost) -> None:
        """Add ``cost``; ``BudgetExceeded`` (a 413 naming its fields) when the total is over a budget."""
        self.total = self.total.plus(cost)
        if self.budgets is not None:
            self.budgets.check(self.total, self.hint, json_answer=False)
