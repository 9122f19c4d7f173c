"""Benchmark tables: the long-format rows, their summary over seeds, CSV, and the plots.

A row is ``{"method", "seed", "size", <tags>, "metric", "value", "learned", "in_distribution"}``: ``size`` in
the family's unit (tokens, items, pixels, nodes; the result says which), tags the groups a family scores by
(a probe's name and depth), ``learned`` whether that run learned its training sizes and ``in_distribution`` its
headline score there. The summary averages over seeds per (method, size, tags, metric) and divides by the value
at the training size (always evaluated, so the reference is never out of distribution).

Plots (matplotlib, Agg): the headline metric against size, one line per method, mean over seeds and tags with
the spread shaded, the training size marked (``plot.png``); a heatmap per method of a tag against size
(``heatmap-<tag>.png``, the probes' length x depth); a leaderboard of one number per method with its spread over
seeds (``leaderboard.png``).
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
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


def per_seed_means(rows: Sequence[Row], metric: str) -> dict[tuple[str, int, int], float]:
    """(method, seed, size) -> the metric's mean over the tags (a probe's depths and probes)."""
    values: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for row in rows:
        if row["metric"] == metric and row["value"] is not None:
            values[(row["method"], row["seed"], row["size"])].append(float(row["value"]))
    return {key: statistics.fmean(seen) for key, seen in values.items()}


def plot_png(
    rows: Sequence[Row],
    metric: str,
    train_size: int,
    title: str,
    unit: str,
    chance: float | None = None,
) -> bytes:
    """PNG of ``metric`` (mean over tags, then over seeds, ± its spread over seeds shaded) against size, one line
    per method, the evaluated sizes as ticks (about 12 of them at most; log-x over a range of 32x or more), the
    training size marked; ``chance``: a dotted line."""
    plt = load_plotting()
    means = per_seed_means(rows, metric)
    figure, axes = plt.subplots(figsize=(7.2, 4.4), dpi=110)
    try:
        for method in sorted({key[0] for key in means}):
            sizes = sorted({key[2] for key in means if key[0] == method})
            centre, spread = [], []
            for size in sizes:
                seen = [value for key, value in means.items() if key[0] == method and key[2] == size]
                centre.append(statistics.fmean(seen))
                spread.append(statistics.pstdev(seen) if len(seen) > 1 else 0.0)
            (line,) = axes.plot(sizes, centre, marker="o", markersize=3, label=method)
            if any(spread):
                low = [m - s for m, s in zip(centre, spread, strict=True)]
                high = [m + s for m, s in zip(centre, spread, strict=True)]
                axes.fill_between(sizes, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        ticks = sorted({key[2] for key in means})
        if ticks and ticks[-1] >= 32 * max(ticks[0], 1):
            axes.set_xscale("log", base=2)  # a wide range of sizes (text's 1x-8x grids are linear)
        shown = ticks if len(ticks) <= 16 else ticks[:: max(1, len(ticks) // 12)]
        axes.set_xticks(shown, [str(tick) for tick in shown], minor=False)
        axes.set_xticks([], minor=True)
        if metric == "ppl":
            axes.set_yscale("log")
        axes.axvline(train_size, color="grey", linestyle="--", linewidth=1, label=f"trained up to {train_size} {unit}")
        if chance is not None:
            axes.axhline(chance, color="grey", linestyle=":", linewidth=1, label=f"chance {chance:.2g}")
        axes.set_xlabel(f"evaluation size ({unit})")
        axes.set_ylabel(f"{metric} (mean over seeds)")
        axes.set_title(title, fontsize="medium")
        axes.legend(fontsize="small")
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


def leaderboard_png(entries: Sequence[Mapping[str, Any]], value: str, label: str, title: str) -> bytes:
    """Methods ranked by ``entries[i][value]`` (its per-seed values in ``entries[i]["per_seed"]`` drawn as
    points, the median as a bar, the minimum marked)."""
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
            if entry.get(value) is None:  # no score to rank by (e.g. no run learned its training sizes)
                axes.text(0.01, position, "not learned", va="center", fontsize="small", color="tab:red")
        axes.set_yticks(positions, names)
        axes.invert_yaxis()
        axes.set_xlabel(label)
        axes.set_title(title, fontsize="medium")
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
