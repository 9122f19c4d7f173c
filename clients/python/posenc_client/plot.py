"""Plot helpers (needs the matplotlib extra): per-head heatmaps and metric-against-length curves.

Each function returns a matplotlib.figure.Figure built without pyplot (no global state, works headless);
call fig.savefig("bias.png") or display it in a notebook.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from posenc_client._backends import is_torch_tensor, require
from posenc_client._results import AttentionResult, BiasResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _as_float_array(values: Any) -> Any:
    np = require("numpy", purpose="plotting")
    if is_torch_tensor(values):
        values = values.detach().to("cpu").float().numpy()
    return np.asarray(values, dtype=np.float64)


def plot_heads(
    values: Any,
    *,
    batch_index: int = 0,
    max_heads: int = 16,
    columns: int = 4,
    title: str | None = None,
    cmap: str = "viridis",
) -> Figure:
    """One heatmap per head of a bias (H, Nq, Nk) or attention map (B, H, Nq, Nk).

    values may also be a BiasResult or AttentionResult. Masked entries (-inf) are left blank.
    """
    if isinstance(values, BiasResult):
        values = values.bias
    elif isinstance(values, AttentionResult):
        values = values.weights
    np = require("numpy", purpose="plotting")
    array = _as_float_array(values)
    if array.ndim == 4:
        array = array[batch_index]
    if array.ndim == 2:  # one head, or a Toeplitz table (H, Nq + Nk - 1) shown as one image
        array = array[None]
    if array.ndim != 3:
        raise ValueError(f"expected (H, Nq, Nk) or (B, H, Nq, Nk), got shape {tuple(array.shape)}")
    heads = min(array.shape[0], max_heads)
    columns = max(1, min(columns, heads))
    rows = math.ceil(heads / columns)
    figure = _new_figure(width=3.0 * columns, height=2.8 * rows)
    axes = figure.subplots(rows, columns, squeeze=False)
    for index, axis in enumerate(axes.flat):
        if index >= heads:
            axis.axis("off")
            continue
        image = np.where(np.isfinite(array[index]), array[index], np.nan)
        shown = axis.imshow(image, cmap=cmap, aspect="auto", interpolation="nearest")
        axis.set_title(f"head {index}", fontsize=9)
        axis.set_xlabel("key j", fontsize=8)
        axis.set_ylabel("query i", fontsize=8)
        figure.colorbar(shown, ax=axis, fraction=0.046, pad=0.04)
    if title:
        figure.suptitle(title)
    return figure


def plot_metric_vs_size(
    result: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    metric: str | None = None,
    title: str | None = None,
    log_y: bool | None = None,
) -> Figure:
    """A metric against the evaluation size, one line per method (the mean over seeds of each seed's mean over
    the row's groups, such as a probe's depths; a min-max band over seeds), the training size marked.

    result is a finished benchmark's job.result (its table, and its data for the unit and the
    training size) or the table itself: rows {"method", "seed", "size", "metric", "value", ...}. metric
    picks one when the table has several (default: the result's headline metric); perplexity is drawn on a log
    axis unless log_y says otherwise.
    """
    rows = _table_rows(result)
    if not rows:
        raise ValueError("the table has no rows")
    data: Mapping[str, Any] = result.get("data", {}) if isinstance(result, Mapping) else {}
    metrics = sorted({str(row["metric"]) for row in rows})
    chosen = metric or str(data.get("metric") or metrics[0])
    if chosen not in metrics:
        raise ValueError(f"no rows with metric {chosen!r}; the table has {', '.join(metrics)}")
    per_seed: dict[tuple[str, int, int], list[float]] = {}
    for row in rows:
        if row["metric"] == chosen and row["value"] is not None:
            key = (str(row["method"]), int(row["seed"]), int(row["size"]))
            per_seed.setdefault(key, []).append(float(row["value"]))
    by_method: dict[str, dict[int, list[float]]] = {}
    for (method, _, size), values in per_seed.items():
        by_method.setdefault(method, {}).setdefault(size, []).append(sum(values) / len(values))
    figure = _new_figure(width=6.0, height=4.0)
    axis = figure.subplots()
    for method, by_size in sorted(by_method.items()):
        sizes = sorted(by_size)
        means = [sum(by_size[n]) / len(by_size[n]) for n in sizes]
        (line,) = axis.plot(sizes, means, marker="o", label=method)
        if any(len(by_size[n]) > 1 for n in sizes):
            lows = [min(by_size[n]) for n in sizes]
            highs = [max(by_size[n]) for n in sizes]
            axis.fill_between(sizes, lows, highs, alpha=0.2, color=line.get_color())
    all_sizes = sorted({size for by_size in by_method.values() for size in by_size})
    if all_sizes and all_sizes[-1] >= 32 * max(all_sizes[0], 1):
        axis.set_xscale("log", base=2)
    if log_y if log_y is not None else chosen == "ppl":
        axis.set_yscale("log")
    unit = str(data.get("unit", "size"))
    if "train_size" in data:
        axis.axvline(data["train_size"], color="grey", linestyle="--", label=f"trained up to {data['train_size']}")
    axis.set_xlabel(f"evaluation size ({unit})")
    axis.set_ylabel(chosen)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend()
    axis.set_title(title or f"{chosen} against size ({unit})")
    return figure


def _table_rows(result: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    table: Iterable[Any] = result.get("table", ()) if isinstance(result, Mapping) else result
    rows = [row for row in table if isinstance(row, Mapping)]
    for row in rows:
        missing = {"method", "seed", "size", "metric", "value"} - set(row)
        if missing:
            raise ValueError(f"table row {dict(row)} lacks {', '.join(sorted(missing))}")
    return rows


def _new_figure(*, width: float, height: float) -> Figure:
    require("matplotlib", purpose="plotting")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")
