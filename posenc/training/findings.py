"""A benchmark's generated summary: a few plain sentences a researcher can quote, from the result that
``posenc.training.jobs.assemble_benchmark`` returns (pure Python, deterministic).

The headline number per method:

- probes (the result has a ``leaderboard``, ``posenc.tasks.probes.effective_length``): the effective length ratio
  L_eff / L_train, the median over the method's rated seeds, with the range (min..max) over those seeds. A run
  that learned no probe but the control at the training length has no ratio (the entry's ``unrated_seeds``): it
  is left out, named with the probes it did not learn (its entry's ``not_learned``) and whether it learned the
  control; a method none of whose runs is rated (median None) is not ranked.
- every other family: the headline metric (``data["metric"]``) at the evaluated sizes strictly above the
  training size: each seed's mean over those sizes (the mean over the tags at each size first), then the mean over
  seeds with its standard deviation over seeds (population, as ``report.summarize``). A run whose ``learned`` is
  False is left out; a method all of whose runs did not learn is *not learned* and not ranked. ``learned`` None
  (perplexity, which has no threshold) counts as learned.

Best is the highest number, or the lowest where ``data["higher_is_better"]`` is false (perplexity); ties are
broken by the method's name. The sentences, in order:

1. the best method and its number with its spread, over "2 of 3 seeds" where it rests on fewer seeds than the
   job ran (the same in the ranking); the runner-up and the gap, and whether the gap is separated
   from the spread over seeds: the gap is larger than the larger of the two standard deviations (metrics), or the
   two seed ranges do not overlap (probes). With one seed there is no spread ("1 seed: no spread") and the gap is
   not judged.
2. the ranking of every method, best first (``>`` where higher is better, ``<`` where lower is), the methods that
   were not learned last.
3. the runs left out because they did not learn their training size, per method; probes: the unrated runs, each
   with the probes it did not learn ("learned the control common_words but not passkey") and their b_t where
   the result's ``effective_length`` has them.
4. probes only: the methods with a seed whose L_eff is the longest length evaluated (so only a lower bound), the
   probes some rated run did not learn (left out of that run's L_eff), and the control probe's mean score past
   the training length per method (it needs little position information: it should be flat across methods).
5. with ``baseline`` (the context-extension study's ``"base"`` arm): each other ranked method's difference from
   the baseline's number.

A result with no scored size past the training size (no rows, no such sizes, no training size) gets one sentence
saying there is nothing to compare. Missing optional keys are read as empty; nothing here raises on them. Numbers
are printed with 3 significant digits (``_fmt``).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PROBE_QUANTITY = "L_eff / L_train"


@dataclass(frozen=True)
class _Headline:
    """One method's headline: ``centre`` (the mean or median over seeds) of its per-seed ``values``."""

    method: str
    centre: float
    values: tuple[float, ...]
    run: int = 0  # the seeds the job ran for the method (0: as many as values)

    @property
    def seeds(self) -> int:
        return len(self.values)

    @property
    def counted(self) -> str:
        """``3 seeds``, or ``2 of 3 seeds`` when the number rests on fewer seeds than the job ran."""
        of = f" of {self.run}" if self.run > self.seeds else ""
        return f"{self.seeds}{of} seed{'s' if self.seeds > 1 or of else ''}"

    @property
    def std(self) -> float:
        return statistics.pstdev(self.values) if len(self.values) > 1 else 0.0


@dataclass
class _Board:
    """The ranked methods (best first), the methods not learned, and the runs left out (method -> seeds)."""

    probes: bool
    higher_is_better: bool
    quantity: str  # what is ranked: L_eff / L_train, or "mean <metric>"
    where: str  # the training size in words: "10 items"
    ranked: list[_Headline] = field(default_factory=list)
    unranked: list[str] = field(default_factory=list)
    excluded: dict[str, list[Any]] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ formatting
def _fmt(value: float) -> str:
    """``value`` to 3 significant digits, without an exponent for large values (1234.5 -> 1230)."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    text = f"{value:.3g}"
    if "e" in text and abs(value) >= 1:
        text = f"{round(value, 2 - math.floor(math.log10(abs(value)))):.0f}"
    return text


def _signed(value: float) -> str:
    return f"+{_fmt(value)}" if value > 0 else _fmt(value)


def _number(board: _Board, value: float) -> str:
    return f"{_fmt(value)}x" if board.probes else _fmt(value)


def _seed_key(seed: Any) -> tuple[int, int, str]:
    return (0, seed, "") if isinstance(seed, int) else (1, 0, str(seed))


def _seeds(seeds: Sequence[Any]) -> str:
    ordered = sorted(seeds, key=_seed_key)
    return ("seed " if len(ordered) == 1 else "seeds ") + ", ".join(str(seed) for seed in ordered)


def _spread(board: _Board, headline: _Headline) -> str:
    """The headline's spread in words: the range over seeds (probes) or ± the std; none with one seed. The seeds
    are counted of the seeds run where fewer were counted (``2 of 3 seeds``)."""
    if headline.seeds == 1:
        return f"({headline.counted}: no spread)"
    if board.probes:
        low, high = min(headline.values), max(headline.values)
        return f"over {headline.counted} (range {_number(board, low)}..{_number(board, high)})"
    return f"± {_fmt(headline.std)} over {headline.counted}"


def _compact(board: _Board, headline: _Headline) -> str:
    """``rope 1.5x (1x..2x)`` / ``rope 0.953 (±0.012)``: a ranking entry; ``rope 1.5x (1 of 3 seeds)`` /
    ``rope 1.5x (1x..2x; 2 of 3 seeds)`` when it rests on fewer seeds than the job ran."""
    text = f"{headline.method} {_number(board, headline.centre)}"
    fewer = headline.counted if headline.run > headline.seeds else ""
    if headline.seeds == 1:
        return f"{text} ({fewer})" if fewer else text
    if board.probes:
        low, high = min(headline.values), max(headline.values)
        spread = f"{_number(board, low)}..{_number(board, high)}"
    else:
        spread = f"±{_fmt(headline.std)}"
    return f"{text} ({spread}; {fewer})" if fewer else f"{text} ({spread})"


# ------------------------------------------------------------------------------------------------ reading
def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _rows(value: Any) -> list[Mapping[str, Any]]:
    return [row for row in _list(value) if isinstance(row, Mapping)]


def _number_or_none(value: Any) -> float | None:
    """A number (a numeric string too: the control's sizes are JSON keys); None for anything else or NaN."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def _sizes_past(result: Mapping[str, Any], train_size: float) -> list[float]:
    """The sizes above the training size that the result evaluated (its data's sizes and its table's)."""
    data = _mapping(result.get("data"))
    sizes = {_number_or_none(size) for size in _list(data.get("sizes"))}
    sizes |= {_number_or_none(row.get("size")) for row in _rows(result.get("table"))}
    return sorted(size for size in sizes if size is not None and size > train_size)


def _rank(headlines: Iterable[_Headline], higher_is_better: bool) -> list[_Headline]:
    sign = -1.0 if higher_is_better else 1.0
    return sorted(headlines, key=lambda headline: (sign * headline.centre, headline.method))


# ------------------------------------------------------------------------------------------------ boards
def _probe_board(result: Mapping[str, Any], where: str) -> _Board:
    """From the leaderboard: the median ratio over each method's rated seeds; unrated seeds left out."""
    board = _Board(probes=True, higher_is_better=True, quantity=PROBE_QUANTITY, where=where)
    headlines = []
    for entry in _rows(result.get("leaderboard")):
        method = str(entry.get("method"))
        rated = tuple(value for value in map(_number_or_none, _list(entry.get("per_seed"))) if value is not None)
        unrated = _list(entry.get("unrated_seeds"))
        if unrated:
            board.excluded[method] = unrated
        median = _number_or_none(entry.get("median"))
        if not rated:
            board.unranked.append(method)
            continue
        run = entry.get("seeds_run", len(_list(entry.get("per_seed"))))
        centre = median if median is not None else statistics.median(rated)
        headlines.append(_Headline(method, centre, rated, run if isinstance(run, int) else 0))
    board.ranked.extend(_rank(headlines, True))
    board.unranked.sort()
    return board


def _learned_runs(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[Any, bool]]:
    """method -> seed -> whether the run counts as learned (``learned`` False: no; True or None: yes)."""
    runs: dict[str, dict[Any, bool]] = defaultdict(dict)
    for row in rows:
        runs[str(row.get("method"))][row.get("seed")] = row.get("learned") is not False
    return runs


def _seed_means(rows: Sequence[Mapping[str, Any]], metric: str, train_size: float) -> dict[str, dict[Any, float]]:
    """method -> seed -> the seed's mean over the sizes past ``train_size`` (each size: its mean over the tags),
    learned runs only."""
    cells: dict[tuple[str, Any, float], list[float]] = defaultdict(list)
    for row in rows:
        value, size = _number_or_none(row.get("value")), _number_or_none(row.get("size"))
        if row.get("metric") != metric or value is None or size is None or size <= train_size:
            continue
        if row.get("learned") is not False:
            cells[(str(row.get("method")), row.get("seed"), size)].append(value)
    by_size: dict[str, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (method, seed, _), values in cells.items():
        by_size[method][seed].append(statistics.fmean(values))
    return {
        method: {seed: statistics.fmean(means) for seed, means in seeds.items()} for method, seeds in by_size.items()
    }


def _metric_board(result: Mapping[str, Any], train_size: float, where: str) -> _Board:
    """From the table: the mean over learned seeds of each seed's mean past the training size."""
    data = _mapping(result.get("data"))
    metric = str(data.get("metric", "score"))
    higher = data.get("higher_is_better") is not False
    board = _Board(probes=False, higher_is_better=higher, quantity=f"mean {metric}", where=where)
    rows = [row for row in _rows(result.get("table")) if row.get("metric") == metric]
    means = _seed_means(rows, metric, train_size)
    headlines = []
    for method, runs in sorted(_learned_runs(rows).items()):
        failed = [seed for seed, learned in runs.items() if not learned]
        if failed:
            board.excluded[method] = failed
        if len(failed) == len(runs):
            board.unranked.append(method)
        elif means.get(method):
            values = tuple(means[method].values())
            headlines.append(_Headline(method, statistics.fmean(values), values, len(runs)))
    _add_listed_failures(board, result.get("not_learned"))
    board.ranked.extend(_rank(headlines, higher))
    return board


def _add_listed_failures(board: _Board, listed: Any) -> None:
    """The result's ``not_learned`` ("method seed s") runs the table did not show (a trimmed result); a per-probe
    entry ("method seed s: probe") counts as its run."""
    for item in _list(listed):
        method, _, seed = str(item).partition(": ")[0].rpartition(" seed ")
        if not method:
            continue
        parsed: Any = int(seed) if seed.lstrip("-").isdigit() else seed
        seeds = board.excluded.setdefault(method, [])
        if parsed not in seeds:
            seeds.append(parsed)


# ------------------------------------------------------------------------------------------------ sentences
def _gap_verdict(board: _Board, best: _Headline, runner: _Headline, gap: float) -> str:
    if best.seeds == 1 or runner.seeds == 1:
        return "1 seed: no spread, so the gap is not judged against the spread over seeds"
    if gap == 0:
        return "they are tied"
    at = f"{best.seeds} seeds" if best.seeds == runner.seeds else f"{best.seeds} and {runner.seeds} seeds"
    if board.probes:
        if min(best.values) > max(runner.values):
            return f"the seed ranges do not overlap: separated at {at}"
        return f"the seed ranges overlap: not separated at {at}"
    if gap > max(best.std, runner.std):
        return f"the gap exceeds one standard deviation over seeds: separated at {at}"
    return f"the gap is within one standard deviation over seeds: not separated at {at}"


def _best_sentence(board: _Board) -> str:
    if not board.ranked and board.probes:
        return f"No run learned a probe other than the control at the training length ({board.where}): nothing to rank."
    if not board.ranked:
        return f"No method learned its training size ({board.where}): nothing to rank."
    best = board.ranked[0]
    if board.probes:
        head = f"Best effective length {board.quantity} (L_train = {board.where}): {best.method}, median "
    else:
        direction = "" if board.higher_is_better else "; lower is better"
        head = f"Best {board.quantity} past the training size ({board.where}{direction}): {best.method}, "
    head += f"{_number(board, best.centre)} {_spread(board, best)}"
    if len(board.ranked) == 1:
        return f"{head}; no other method is ranked."
    runner = board.ranked[1]
    gap = abs(best.centre - runner.centre)
    return (
        f"{head}; runner-up {runner.method} at {_number(board, runner.centre)} {_spread(board, runner)}, "
        f"{_number(board, gap)} behind; {_gap_verdict(board, best, runner, gap)}."
    )


def _ranking_sentence(board: _Board) -> str | None:
    if len(board.ranked) + len(board.unranked) < 2:
        return None
    order = " > " if board.higher_is_better else " < "
    parts = []
    for position, headline in enumerate(board.ranked):
        tied = position and headline.centre == board.ranked[position - 1].centre
        parts.append((" = " if tied else order if position else "") + _compact(board, headline))
    if board.probes:
        text = f"Ranking by median {board.quantity}, best first (range over seeds): {''.join(parts) or 'none'}"
    else:
        text = (
            f"Ranking by {board.quantity} past {board.where}, best first (± std over seeds): {''.join(parts) or 'none'}"
        )
    if board.unranked:
        text += f"; {'no seed rated' if board.probes else 'not learned'}: {', '.join(board.unranked)}"
    return text + "."


def _ceiling_sentence(board: _Board, ceiling: float, longest: str) -> str | None:
    """Probes: the ranked methods with a seed whose L_eff is the longest length evaluated (a lower bound)."""
    hits = []
    for headline in board.ranked:
        reached = sum(value >= ceiling - 1e-9 for value in headline.values)
        if reached:
            hits.append(f"{headline.method} ({reached} of {headline.seeds} seed{'s' if headline.seeds > 1 else ''})")
    if not hits:
        return None
    return (
        f"L_eff reached the longest length evaluated ({longest} = {_fmt(ceiling)}x), so it is only a lower bound "
        f"for: {', '.join(hits)}."
    )


def _excluded_sentence(board: _Board) -> str | None:
    if not board.excluded:
        return None
    parts = []
    for method in sorted(board.excluded):
        suffix = " (no run learned: not ranked)" if method in board.unranked else ""
        parts.append(f"{method} {_seeds(board.excluded[method])}{suffix}")
    return f"Did not learn the training size ({board.where}), left out of the ranking numbers: {'; '.join(parts)}."


def _unrated_sentence(result: Mapping[str, Any], board: _Board) -> str | None:
    """Probes: the unrated runs (no probe but the control learned, so no L_eff), each named with the probes it did
    not learn and whether it learned the control, with the probes' b_t (score at the two shortest lengths) where
    the result's ``effective_length`` has them: a run that learned the control but not passkey is not a run that
    learned nothing."""
    if not board.excluded:
        return None
    control = _mapping(result.get("control"))
    control_probe = control.get("probe")
    with_control = set(_mapping(control.get("by_method")))
    base: dict[tuple[str, Any], Mapping[str, Any]] = {
        (str(run.get("method")), run.get("seed")): _mapping(run.get("base"))
        for run in _rows(result.get("effective_length"))
    }
    failed: dict[tuple[str, Any], list[str]] = defaultdict(list)
    for entry in _rows(result.get("leaderboard")):
        for probe, seeds in sorted(_mapping(entry.get("not_learned")).items()):
            for seed in _list(seeds):
                failed[(str(entry.get("method")), seed)].append(str(probe))
    scored = False

    def named(probe: str, method: str, seeds: Sequence[Any]) -> str:
        nonlocal scored
        values = [
            v for v in (_number_or_none(base.get((method, seed), {}).get(probe)) for seed in seeds) if v is not None
        ]
        if not values:
            return probe
        scored = True
        low, high = min(values), max(values)
        return f"{probe} ({_fmt(low)})" if low == high else f"{probe} ({_fmt(low)}..{_fmt(high)})"

    parts = []
    for method in sorted(board.excluded):
        groups: dict[tuple[str, ...], list[Any]] = defaultdict(list)
        for seed in board.excluded[method]:
            groups[tuple(failed.get((method, seed), []))].append(seed)
        described = []
        for probes, seeds in groups.items():
            others = [probe for probe in probes if probe != control_probe]
            missed = ", ".join(named(probe, method, seeds) for probe in others)
            if not probes:
                what = ""
            elif control_probe in probes:
                the_control = f"the control {named(str(control_probe), method, seeds)}"
                what = f" learned neither {missed} nor {the_control}" if others else f" did not learn {the_control}"
            elif method in with_control:
                what = f" learned the control {named(str(control_probe), method, seeds)} but not {missed}"
            else:
                what = f" did not learn {missed}"
            described.append(f"{method} {_seeds(seeds)}{what}")
        suffix = " (no seed rated: not ranked)" if method in board.unranked else ""
        parts.append("; ".join(described) + suffix)
    brackets = "; in brackets a probe's score at the two shortest lengths" if scored else ""
    return (
        f"Unrated, left out of the ranking numbers: no probe other than the control learned at the training length "
        f"({board.where}{brackets}): {'; '.join(parts)}."
    )


def _probe_sentences(result: Mapping[str, Any], train_size: float, where: str) -> list[str]:
    """The probes some rated run did not learn, and the control probe's score past the training length."""
    control = _mapping(result.get("control"))
    control_probe = control.get("probe")
    missed = []
    for entry in sorted(_rows(result.get("leaderboard")), key=lambda entry: str(entry.get("method"))):
        unrated = _list(entry.get("unrated_seeds"))
        for probe, seeds in sorted(_mapping(entry.get("not_learned")).items()):
            kept = [seed for seed in _list(seeds) if seed not in unrated]
            if probe != control_probe and kept:
                missed.append(f"{entry.get('method')} {probe} ({_seeds(kept)})")
    sentences = []
    if missed:
        sentences.append(f"Probes not learned by a run, left out of that run's L_eff: {'; '.join(missed)}.")
    scores = _control_scores(control, train_size)
    if scores:
        listed = ", ".join(f"{method} {_fmt(score)}" for method, score in sorted(scores.items()))
        spread = max(scores.values()) - min(scores.values())
        sentences.append(
            f"Control probe {control_probe} (it needs little position information, so it should be flat across "
            f"methods), mean score past {where}: {listed}; range across methods {_fmt(spread)}."
        )
    return sentences


def _control_scores(control: Mapping[str, Any], train_size: float) -> dict[str, float]:
    """method -> the control probe's mean score over the lengths past ``train_size``."""
    scores = {}
    for method, by_size in _mapping(control.get("by_method")).items():
        values = []
        for size, spread in _mapping(by_size).items():
            length = _number_or_none(size)
            mean = _number_or_none(_mapping(spread).get("mean"))
            if length is not None and length > train_size and mean is not None:
                values.append(mean)
        if values:
            scores[str(method)] = statistics.fmean(values)
    return scores


def _baseline_sentences(board: _Board, baseline: str) -> list[str]:
    reference = next((headline for headline in board.ranked if headline.method == baseline), None)
    if reference is None:
        why = "it learned no run" if baseline in board.unranked else "it is not among the ranked methods"
        return [f"No difference from the baseline {baseline} is given: {why}."]
    sentences = []
    for headline in board.ranked:
        if headline.method == baseline:
            continue
        difference = headline.centre - reference.centre
        better = difference > 0 if board.higher_is_better else difference < 0
        verdict = "no difference" if difference == 0 else "better" if better else "worse"
        signed = f"{_signed(difference)}x" if board.probes else _signed(difference)
        sentences.append(
            f"{headline.method} vs {baseline}: {board.quantity} {_number(board, headline.centre)} vs "
            f"{_number(board, reference.centre)}, {signed} ({verdict})."
        )
    return sentences


# ------------------------------------------------------------------------------------------------ entry
def findings(result: Mapping[str, Any], *, baseline: str | None = None) -> list[str]:
    """A benchmark result's summary: which method is best, by how much, with the spread over seeds (the rules
    are in the module docstring). ``baseline``: a method label (``"base"``) every other method is compared to."""
    data = _mapping(result.get("data"))
    train_size = _number_or_none(data.get("train_size"))
    if train_size is None:
        return [_nothing(None)]
    unit = f" {data['unit']}" if data.get("unit") else ""
    where = f"{_fmt(train_size)}{unit}"
    sizes = _sizes_past(result, train_size)
    if not sizes:
        return [_nothing(where)]
    probes = bool(_rows(result.get("leaderboard"))) or data.get("family") == "probes"
    board = _probe_board(result, where) if probes else _metric_board(result, train_size, where)
    if not board.ranked and not board.unranked:
        return [_nothing(where)]
    excluded = _unrated_sentence(result, board) if probes else _excluded_sentence(board)
    sentences = [_best_sentence(board), _ranking_sentence(board), excluded]
    if probes:
        sentences.append(_ceiling_sentence(board, sizes[-1] / train_size, f"{_fmt(sizes[-1])}{unit}"))
        sentences.extend(_probe_sentences(result, train_size, where))
    if baseline is not None:
        sentences.extend(_baseline_sentences(board, baseline))
    # a context-extension study whose rules ran outside the regime they are built for says so beside its ranks
    sentences.extend(f"Regime: {warning}" for warning in _list(_mapping(result.get("study")).get("regime_warnings")))
    return [sentence for sentence in sentences if sentence]


def _nothing(where: str | None) -> str:
    size = f" ({where})" if where else ""
    return f"Nothing past the training size{size} to compare: the result has no scored size above it."
