"""Benchmark tables: the long-format rows, their summary, CSV and the metric-against-length plot.

A row is ``{"method", "seed", "length", "metric", "value"}``; metrics are ``ppl`` and ``nll`` for text and
``exact_match`` for tasks. Image benchmarks name the axis ``resolution`` (pixels) in place of ``length``, with
the metric ``accuracy``: every function here takes that axis name. The summary averages over seeds and
divides by the in-distribution value (the row at the training length, or the shortest length evaluated when
the training length is not among them).
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posenc.training.files import write_bytes_atomic

Row = dict[str, Any]
TABLE_COLUMNS = ("method", "seed", "length", "metric", "value")
AXIS_LABELS = {
    "length": "evaluation length",
    "resolution": "evaluation resolution (px)",
    "num_nodes": "evaluation graph size (nodes)",
}


def summarize(rows: Sequence[Row], in_distribution_length: int, axis: str = "length") -> list[Row]:
    """Per (method, metric, length): mean and spread over seeds, and the ratio to the in-distribution mean
    (``axis``: the name of the length column, ``resolution`` for images; the summary rows use it too)."""
    values: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for row in rows:
        values[(row["method"], row["metric"], row[axis])].append(float(row["value"]))
    summary: list[Row] = []
    for (method, metric, length), seen in sorted(values.items()):
        lengths = sorted(key[2] for key in values if key[:2] == (method, metric))
        reference_length = in_distribution_length if in_distribution_length in lengths else lengths[0]
        reference = statistics.fmean(values[(method, metric, reference_length)])
        mean = statistics.fmean(seen)
        summary.append(
            {
                "method": method,
                "metric": metric,
                axis: length,
                "mean": mean,
                "std": statistics.pstdev(seen) if len(seen) > 1 else 0.0,
                "seeds": len(seen),
                "ratio": mean / reference if reference else None,
                f"reference_{axis}": reference_length,
            }
        )
    return summary


def table_csv(rows: Sequence[Row], axis: str = "length") -> str:
    columns = [axis if column == "length" else column for column in TABLE_COLUMNS]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({column: row[column] for column in columns})
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


def plot_png(
    summary: Sequence[Row],
    metric: str,
    train_length: int,
    title: str,
    axis: str = "length",
    chance: float | None = None,
) -> bytes:
    """PNG of ``metric`` (mean over seeds, ± its spread shaded) against length (or ``axis``), one line per
    method, log-x with the evaluated values as ticks, the training value marked; ``chance``: a dotted line."""
    plt = load_plotting()
    figure, axes = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    try:
        methods = sorted({row["method"] for row in summary if row["metric"] == metric})
        for method in methods:
            points = sorted(
                (row[axis], row["mean"], row["std"])
                for row in summary
                if row["method"] == method and row["metric"] == metric
            )
            xs, means, spreads = [p[0] for p in points], [p[1] for p in points], [p[2] for p in points]
            (line,) = axes.plot(xs, means, marker="o", label=method)
            if any(spreads):
                low = [m - s for m, s in zip(means, spreads, strict=True)]
                high = [m + s for m, s in zip(means, spreads, strict=True)]
                axes.fill_between(xs, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        axes.set_xscale("log", base=2)
        ticks = sorted({row[axis] for row in summary if row["metric"] == metric})
        axes.set_xticks(ticks, [str(tick) for tick in ticks], minor=False)
        axes.set_xticks([], minor=True)
        if metric == "ppl":
            axes.set_yscale("log")
        what = "length" if axis == "length" else axis
        axes.axvline(train_length, color="grey", linestyle="--", linewidth=1, label=f"train {what} {train_length}")
        if chance is not None:
            axes.axhline(chance, color="grey", linestyle=":", linewidth=1, label=f"chance {chance:.2g}")
        axes.set_xlabel(AXIS_LABELS.get(axis, axis))
        axes.set_ylabel(metric)
        axes.set_title(title)
        axes.legend(fontsize="small")
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(figure)


def write_benchmark_artifacts(
    directory: Path,
    rows: Sequence[Row],
    summary: Sequence[Row],
    metric: str,
    train_length: int,
    title: str,
    axis: str = "length",
    chance: float | None = None,
) -> list[str]:
    """table.csv, table.json and plot.png in ``directory``, each written atomically; returns their names."""
    write_bytes_atomic(directory / "table.csv", table_csv(rows, axis).encode())
    write_bytes_atomic(
        directory / "table.json",
        json.dumps({"table": list(rows), "summary": list(summary)}, indent=1).encode(),
    )
    write_bytes_atomic(directory / "plot.png", plot_png(summary, metric, train_length, title, axis, chance))
    return ["table.csv", "table.json", "plot.png"]
