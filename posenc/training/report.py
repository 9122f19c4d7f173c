"""Benchmark tables: the long-format rows, their summary, CSV and the metric-against-length plot.

A row is ``{"method", "seed", "length", "metric", "value"}``; metrics are ``ppl`` and ``nll`` for text and
``exact_match`` for tasks. The summary averages over seeds and divides by the in-distribution value (the row
at the training length, or the shortest length evaluated when the training length is not among them).
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


def summarize(rows: Sequence[Row], in_distribution_length: int) -> list[Row]:
    """Per (method, metric, length): mean and spread over seeds, and the ratio to the in-distribution mean."""
    values: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for row in rows:
        values[(row["method"], row["metric"], row["length"])].append(float(row["value"]))
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
                "length": length,
                "mean": mean,
                "std": statistics.pstdev(seen) if len(seen) > 1 else 0.0,
                "seeds": len(seen),
                "ratio": mean / reference if reference else None,
                "reference_length": reference_length,
            }
        )
    return summary


def table_csv(rows: Sequence[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=TABLE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({column: row[column] for column in TABLE_COLUMNS})
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


def plot_png(summary: Sequence[Row], metric: str, train_length: int, title: str) -> bytes:
    """PNG of ``metric`` (mean over seeds) against length, one line per method, log-x, train length marked."""
    plt = load_plotting()
    figure, axes = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    try:
        methods = sorted({row["method"] for row in summary if row["metric"] == metric})
        for method in methods:
            points = sorted(
                (row["length"], row["mean"]) for row in summary if row["method"] == method and row["metric"] == metric
            )
            axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=method)
        axes.set_xscale("log", base=2)
        if metric == "ppl":
            axes.set_yscale("log")
        axes.axvline(train_length, color="grey", linestyle="--", linewidth=1, label=f"train length {train_length}")
        axes.set_xlabel("evaluation length")
        axes.set_ylabel(metric)
        axes.set_title(title)
        axes.legend()
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(figure)


def write_benchmark_artifacts(
    directory: Path, rows: Sequence[Row], summary: Sequence[Row], metric: str, train_length: int, title: str
) -> list[str]:
    """table.csv, table.json and plot.png in ``directory``, each written atomically; returns their names."""
    write_bytes_atomic(directory / "table.csv", table_csv(rows).encode())
    write_bytes_atomic(
        directory / "table.json",
        json.dumps({"table": list(rows), "summary": list(summary)}, indent=1).encode(),
    )
    write_bytes_atomic(directory / "plot.png", plot_png(summary, metric, train_length, title))
    return ["table.csv", "table.json", "plot.png"]
