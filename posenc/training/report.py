"""Benchmark tables: the long-format rows, their summary over seeds, CSV, and the plots.

A row is ``{"method", "seed", "size", <tags>, "metric", "value", "learned", "in_distribution"}``: ``size`` in
the family's unit (tokens, items, pixels, nodes; the result says which), tags the groups a family scores by
(a probe's name and depth), ``learned`` whether that run learned its training sizes (the probes: the row's
probe) and ``in_distribution`` its headline score there. The summary averages over seeds per (method, size,
tags, metric) and divides by the value at the training size (always evaluated, so the reference is never out of
distribution).

Plots (matplotlib, Agg): the headline metric against size (``plot.png``), one line per method: the mean over
seeds (each seed's mean over the tags first), the spread shaded (mean ± std over seeds, clipped to the metric's
range, [0, 1] for the accuracies, and said so in the legend), the training size marked; the probes get a panel
per probe with the control apart, so no probe's score is averaged with another's. A heatmap per method of a tag
against size (``heatmap-<tag>.png``, the probes' length x depth); a leaderboard of one number per method with
its spread over seeds (``leaderboard.png``), a number resting on fewer seeds than the job ran marked ``k/n
seeds``.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc.files import write_bytes_atomic

Row = dict[str, Any]
BASE_COLUMNS = ("method", "seed", "size")
VALUE_COLUMNS = ("metric", "value", "learned", "in_distribution")


def _tag_key(row: Mapping[str, Any], tags: Sequence[str]) -> tuple[Any, ...]:
    return tuple(row.get(tag) for tag in tags)


def summarize(rows: Sequence[Row], train_size: int, tags: Sequence[str] = ()) -> list[Row]:
    """Per (method, metric, tags, size): mean and spread over seeds, the seeds counted, and the ratio to the mean
    at ``train_size`` (same method, metric and tags)."""
    values: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for row in rows:
        if row["value"] is not None:
            values[(row["method"], row["metric"], _tag_key(row, tags), row["size"])].append(float(row["value"]))
    summary: list[Row] = []
    ordered = sorted(values.items(), key=lambda item: (item[0][0], item[0][1], repr(item[0][2]), item[0][3]))
    for (method, metric, tag_values, size), seen in ordered:
        reference_values = values.get((method, metric, tag_values, train_size))
        reference = statistics.fmean(reference_values) if reference_values else None
        mean = statistics.fmean(seen)
        summary.append(
            {
                "method": method,
                "metric": metric,
                **dict(zip(tags, tag_values, strict=True)),
                "size": size,
                "mean": mean,
                "std": statistics.pstdev(seen) if len(seen) > 1 else 0.0,
                "seeds": len(seen),
                "ratio": mean / reference if reference else None,
                "reference_size": train_size if reference is not None else None,
            }
        )
    return summary


def table_csv(rows: Sequence[Row], tags: Sequence[str] = ()) -> str:
    columns = [*BASE_COLUMNS, *tags, *VALUE_COLUMNS]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({column: row.get(column) for column in columns})
    return buffer.getvalue()


def load_plotting() -> Any:
    """matplotlib's ``pyplot`` on the Agg backend (files only, no display), with the backend module the first
    figure would load. Imported on first use: a second or more. A process that forks job processes calls this
    ahead (``workers.signals``), so a benchmark job's plot does not pay the import."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.backends.backend_agg
    from matplotlib import pyplot

    return pyplot


def _png(figure: Any) -> bytes:
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


# the range a metric's values can take (None: unbounded on that side): a spread band is clipped to it, since
# mean ± std of values in [0, 1] can leave [0, 1] (mean 0.6, std 0.45 -> 1.05) where no score can be
METRIC_RANGES: dict[str, tuple[float | None, float | None]] = {
    "accuracy": (0.0, 1.0),
    "exact_match": (0.0, 1.0),
    "token_accuracy": (0.0, 1.0),
    "score": (0.0, 1.0),
    "ppl": (1.0, None),
    "nll": (0.0, None),
}


def metric_range(metric: str) -> tuple[float | None, float | None]:
    return METRIC_RANGES.get(metric, (None, None))


def clip(value: float, bounds: tuple[float | None, float | None]) -> float:
    low, high = bounds
    if low is not None and value < low:
        return low
    if high is not None and value > high:
        return high
    return value


def band_label(metric: str) -> str:
    """What a plot's shaded band is, with the range it is clipped to: ``band: mean ± std over seeds (clipped to
    [0, 1])``."""
    low, high = metric_range(metric)
    if low is not None and high is not None:
        clipped = f" (clipped to [{low:g}, {high:g}])"
    elif low is not None:
        clipped = f" (clipped at {low:g} from below)"
    else:
        clipped = ""
    return f"band: mean ± std over seeds{clipped}"


@dataclass(frozen=True)
class Series:
    """One line of a score plot: a method's ``mean`` over seeds per size (each seed's mean over the other tags
    first), its band ``low``..``high`` (mean ∓ std over seeds, clipped to the metric's range), in ``panel`` (a
    value of the panel tag, e.g. a probe; None: one panel for all); ``learned`` of ``seeds`` runs learned (a run
    whose rows say ``learned`` False, in this panel, did not; None counts as learned)."""

    panel: Any
    method: str
    sizes: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]
    seeds: int
    learned: int

    @property
    def label(self) -> str:
        """The legend's name: the method, with ``k/n seeds learned`` when not every run learned."""
        if self.learned == self.seeds:
            return self.method
        return f"{self.method} ({self.learned}/{self.seeds} seeds learned)"


def score_series(rows: Sequence[Row], metric: str, panel_tag: str | None = None) -> list[Series]:
    """The lines ``plot_png`` draws: per panel (a value of ``panel_tag``, so one probe's score is never averaged
    with another's) and method, each seed's mean over the remaining tags (a probe's depths) at each size, then the
    mean over seeds with its spread clipped to ``metric_range(metric)``. Sorted by panel, then method."""
    per_seed: dict[tuple[Any, str, Any, int], list[float]] = defaultdict(list)
    failed: set[tuple[Any, str, Any]] = set()
    for row in rows:
        if row["metric"] != metric:
            continue
        panel = row.get(panel_tag) if panel_tag else None
        if row.get("learned") is False:
            failed.add((panel, row["method"], row["seed"]))
        if row["value"] is not None:
            per_seed[(panel, row["method"], row["seed"], row["size"])].append(float(row["value"]))
    by_line: dict[tuple[Any, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    seeds: dict[tuple[Any, str], set[Any]] = defaultdict(set)
    for (panel, method, seed, size), values in per_seed.items():
        by_line[(panel, method)][size].append(statistics.fmean(values))
        seeds[(panel, method)].add(seed)
    bounds = metric_range(metric)
    series = []
    for (panel, method), by_size in sorted(by_line.items(), key=lambda item: (repr(item[0][0]), item[0][1])):
        sizes = sorted(by_size)
        mean = [statistics.fmean(by_size[size]) for size in sizes]
        std = [statistics.pstdev(by_size[size]) if len(by_size[size]) > 1 else 0.0 for size in sizes]
        run = seeds[(panel, method)]
        series.append(
            Series(
                panel=panel,
                method=method,
                sizes=sizes,
                mean=mean,
                low=[clip(m - s, bounds) for m, s in zip(mean, std, strict=True)],
                high=[clip(m + s, bounds) for m, s in zip(mean, std, strict=True)],
                seeds=len(run),
                learned=sum((panel, method, seed) not in failed for seed in run),
            )
        )
    return series


def panel_order(series: Sequence[Series], control: str | None = None) -> list[tuple[Any, str]]:
    """The panels in drawing order with their titles: every panel value but the control (sorted), then the
    control apart, titled ``<name> (control)``."""
    panels = sorted({line.panel for line in series}, key=repr)
    ordered = [panel for panel in panels if panel != control] + [panel for panel in panels if panel == control]
    return [(panel, "" if panel is None else f"{panel} (control)" if panel == control else str(panel))
            for panel in ordered]  # fmt: skip


def series_json(series: Sequence[Series], metric: str, control: str | None = None) -> dict[str, Any]:
    """The score plot's data for the result (the page draws it): ``band`` says what the band is, ``panels`` in
    ``panel_order`` each ``{"panel", "title", "lines": [{"method", "label", "sizes", "mean", "low", "high",
    "seeds", "learned"}]}``."""
    panels = []
    for panel, title in panel_order(series, control):
        lines = [
            {"method": line.method, "label": line.label, "sizes": line.sizes, "mean": line.mean, "low": line.low,
             "high": line.high, "seeds": line.seeds, "learned": line.learned}
            for line in series
            if line.panel == panel
        ]  # fmt: skip
        panels.append({"panel": panel, "title": title, "lines": lines})
    return {"metric": metric, "band": band_label(metric), "panels": panels}


def plot_png(
    rows: Sequence[Row],
    metric: str,
    train_size: int,
    title: str,
    unit: str,
    chance: float | None = None,
    *,
    panel_tag: str | None = None,
    control: str | None = None,
) -> bytes:
    """PNG of ``metric`` against size (``score_series``): one line per method, the mean over seeds (each seed's
    mean over the tags first), ± its spread over seeds shaded and clipped to the metric's range; with
    ``panel_tag`` (the probes' ``probe``) one panel per value of it, ``control`` in its own panel last. The
    evaluated sizes as ticks (about 12 of them at most; log-x over a range of 32x or more), the training size
    marked; ``chance``: a dotted line. A method some of whose runs did not learn says ``k/n seeds learned``."""
    plt = load_plotting()
    series = score_series(rows, metric, panel_tag)
    panels = panel_order(series, control) or [(None, "")]
    columns = min(3, len(panels))
    grid_rows = -(-len(panels) // columns)  # ceil
    figure, axes_grid = plt.subplots(
        grid_rows,
        columns,
        figsize=(7.2 if columns == 1 else 4.2 * columns, 4.4 + 3.2 * (grid_rows - 1)),
        dpi=110,
        squeeze=False,
    )
    colours = {method: f"C{index % 10}" for index, method in enumerate(sorted({line.method for line in series}))}
    other_tags = sorted({key for row in rows for key in row} - {*BASE_COLUMNS, *VALUE_COLUMNS, panel_tag or ""})
    try:
        flat = [axes for axes_row in axes_grid for axes in axes_row]
        for axes in flat[len(panels) :]:
            axes.set_visible(False)
        for axes, (panel, panel_title) in zip(flat, panels, strict=False):
            lines = [line for line in series if line.panel == panel]
            for line in lines:
                colour = colours[line.method]
                axes.plot(line.sizes, line.mean, marker="o", markersize=3, label=line.label, color=colour)
                if line.low != line.high:
                    axes.fill_between(line.sizes, line.low, line.high, color=colour, alpha=0.15, linewidth=0)
            ticks = sorted({size for line in lines for size in line.sizes})
            if ticks and ticks[-1] >= 32 * max(ticks[0], 1):
                axes.set_xscale("log", base=2)  # a wide range of sizes (text's 1x-8x grids are linear)
            shown = ticks if len(ticks) <= 16 else ticks[:: max(1, len(ticks) // 12)]
            axes.set_xticks(shown, [str(tick) for tick in shown], minor=False)
            axes.set_xticks([], minor=True)
            if metric == "ppl":
                axes.set_yscale("log")
            low, high = metric_range(metric)
            if low is not None and high is not None:  # the whole range: panels side by side read alike
                axes.set_ylim(low - 0.03 * (high - low), high + 0.03 * (high - low))
            axes.axvline(train_size, color="grey", linestyle="--", linewidth=1,
                         label=f"trained up to {train_size} {unit}")  # fmt: skip
            if chance is not None:
                axes.axhline(chance, color="grey", linestyle=":", linewidth=1, label=f"chance {chance:.2g}")
            axes.set_xlabel(f"evaluation size ({unit})")
            over = f"; each seed's mean over {', '.join(other_tags)} first" if other_tags else ""
            axes.set_ylabel(f"{metric} (mean over seeds{over})", fontsize="small" if len(panels) > 1 else None)
            if panel_title:
                axes.set_title(panel_title, fontsize="medium")
            axes.legend(fontsize="x-small" if len(panels) > 1 else "small", title=band_label(metric),
                        title_fontsize="x-small")  # fmt: skip
        if len(panels) > 1:
            figure.suptitle(title, fontsize="medium")
        else:
            flat[0].set_title(title, fontsize="medium")
        return _png(figure)
    finally:
        plt.close(figure)


def heatmap_png(rows: Sequence[Row], metric: str, tag: str, unit: str, title: str) -> bytes:
    """One panel per method: ``metric`` averaged over seeds (and the other tags) in a (tag value x size) grid,
    the value printed in each cell."""
    plt = load_plotting()
    grid: dict[tuple[str, Any, int], list[float]] = defaultdict(list)
    for row in rows:
        if row["metric"] == metric and row["value"] is not None and tag in row:
            grid[(row["method"], row[tag], row["size"])].append(float(row["value"]))
    methods = sorted({key[0] for key in grid})
    tag_values = sorted({key[1] for key in grid})
    sizes = sorted({key[2] for key in grid})
    figure, axes_list = plt.subplots(
        1, len(methods), figsize=(2.6 * len(methods) + 1, 0.45 * len(tag_values) + 1.8), dpi=100, squeeze=False
    )
    try:
        for axes, method in zip(axes_list[0], methods, strict=True):
            values = [
                [statistics.fmean(grid[(method, value, size)]) if grid.get((method, value, size)) else float("nan")
                 for size in sizes]
                for value in tag_values
            ]  # fmt: skip
            axes.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
            axes.set_xticks(range(len(sizes)), [str(size) for size in sizes], fontsize="x-small")
            axes.set_yticks(range(len(tag_values)), [str(value) for value in tag_values], fontsize="x-small")
            for row_index, row_values in enumerate(values):
                for column, value in enumerate(row_values):
                    if value == value:  # not NaN
                        colour = "black" if value > 0.6 else "white"
                        axes.text(column, row_index, f"{value:.2f}", ha="center", va="center", fontsize=6, color=colour)
            axes.set_title(method, fontsize="small")
            axes.set_xlabel(f"size ({unit})", fontsize="small")
        axes_list[0][0].set_ylabel(tag)
        figure.suptitle(title, fontsize="medium")
        return _png(figure)
    finally:
        plt.close(figure)


def seeds_note(entry: Mapping[str, Any]) -> str | None:
    """``2/3 seeds rated`` when a leaderboard entry's number rests on fewer seeds than the job ran: ``seeds_rated`` of
    ``seeds_run`` where the entry says so, else its ``per_seed`` values that are not None of all of them; None
    when every seed counts (or the entry has no per-seed values, e.g. a suite's rank)."""
    per_seed = list(entry.get("per_seed") or [])
    run = entry.get("seeds_run", len(per_seed))
    rated = entry.get("seeds_rated", sum(value is not None for value in per_seed))
    if not isinstance(run, int) or not isinstance(rated, int) or run == 0 or rated >= run:
        return None
    return f"{rated}/{run} seeds rated"


def leaderboard_png(entries: Sequence[Mapping[str, Any]], value: str, label: str, title: str) -> bytes:
    """Methods ranked by ``entries[i][value]`` (its per-seed values in ``entries[i]["per_seed"]`` drawn as
    points, the median as a bar, the minimum marked); a bar resting on fewer seeds than the job ran is annotated
    ``k/n seeds rated`` (``seeds_note``), one with no number ``not learned``."""
    plt = load_plotting()
    ranked = sorted(entries, key=lambda entry: -(entry.get(value) or 0.0))
    figure, axes = plt.subplots(figsize=(6.4, 0.45 * len(ranked) + 1.6), dpi=110)
    try:
        names = [str(entry["method"]) for entry in ranked]
        positions = list(range(len(ranked)))
        axes.barh(positions, [entry.get(value) or 0.0 for entry in ranked], color="tab:blue", alpha=0.5)
        for position, entry in zip(positions, ranked, strict=True):
            seeds = [v for v in entry.get("per_seed", []) if v is not None]
            axes.scatter(seeds, [position] * len(seeds), color="black", s=12, zorder=3)
        for position, entry in zip(positions, ranked, strict=True):
            note = seeds_note(entry)
            if entry.get(value) is None:  # no score to rank by (e.g. no run learned its training sizes)
                axes.text(0.01, position, "not learned", va="center", fontsize="small", color="tab:red")
            elif note is not None:  # the bar is the median of fewer seeds than ran: say so beside it
                axes.annotate(note, (entry[value], position), xytext=(4, 0), textcoords="offset points",
                              va="center", fontsize="small", color="tab:red")  # fmt: skip
        axes.set_yticks(positions, names)
        axes.invert_yaxis()
        axes.set_xlabel(label)
        axes.set_title(title, fontsize="medium")
        axes.margins(x=0.15)  # room for a note beside the longest bar
        return _png(figure)
    finally:
        plt.close(figure)


def write_benchmark_artifacts(
    directory: Path,
    rows: Sequence[Row],
    summary: Sequence[Row],
    plots: Mapping[str, bytes],
    tags: Sequence[str] = (),
) -> list[str]:
    """table.csv, table.json and every plot in ``directory``, each written atomically; returns their names."""
    write_bytes_atomic(directory / "table.csv", table_csv(rows, tags).encode())
    write_bytes_atomic(
        directory / "table.json", json.dumps({"table": list(rows), "summary": list(summary)}, indent=1).encode()
    )
    for name, data in plots.items():
        write_bytes_atomic(directory / name, data)
    return ["table.csv", "table.json", *plots]
