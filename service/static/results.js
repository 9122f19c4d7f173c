// posenc page, a finished job read as a result: its findings first, then its curves (score against size with the
// spread over seeds, clipped to the metric's range and said so, and the training size marked; a chart per probe,
// the control apart; each run's loss), its tables (3 significant digits; a leaderboard number resting on fewer
// seeds than ran says so) and its artifacts. One function draws into any container, so the Jobs view and the
// side-by-side comparison share it.
import { apiHeaders, attempt, chart, disposeCharts, el, fmt } from "./common.js";
import { leaderboardTable } from "./leaderboard.js";

// ------------------------------------------------------------------------------------------------ rows
// The range a metric's values can take (null: unbounded there): the band is clipped to it, as the result's own
// plots are (mean ± std of scores in [0, 1] can leave [0, 1] where no score can be).
const METRIC_RANGES = { accuracy: [0, 1], exact_match: [0, 1], token_accuracy: [0, 1], score: [0, 1],
  ppl: [1, null], nll: [0, null] };
export function metricRange(metric) {
  return METRIC_RANGES[metric] ?? [null, null];
}
function clip(value, [low, high]) {
  if (low !== null && value < low) return low;
  if (high !== null && value > high) return high;
  return value;
}
// What the band is, as the result's plots say it: "band: mean ± std over seeds (clipped to [0, 1])".
export function bandLabel(metric) {
  const [low, high] = metricRange(metric);
  const clipped = low !== null && high !== null ? ` (clipped to [${low}, ${high}])`
    : low !== null ? ` (clipped at ${low} from below)` : "";
  return `band: mean ± std over seeds${clipped}`;
}
// The score charts of a result: [{title, rows}], rows {method, label, size, mean, low, high, seeds}. A benchmark
// that carries its plot's data (``score_series``: a panel per probe, the control last) gets a chart per panel,
// each probe on its own, each line named with how many of its seeds learned when not all did; else one chart
// from its summary (or an extrapolate job's rows), the band mean ± std clipped to the metric's range.
export function scoreCharts(result) {
  const panels = result.score_series?.panels;
  if (panels?.length) {
    return panels.map((panel) => ({ title: panel.title || "", rows: panel.lines.flatMap((line) =>
      line.sizes.map((size, index) => ({ method: line.method, label: line.label, size, mean: line.mean[index],
        low: line.low[index], high: line.high[index], seeds: line.seeds }))) }));
  }
  const bounds = metricRange(result.data?.metric);
  const rows = scoreRows(result).map((row) => ({ ...row, label: row.method,
    low: clip(row.mean - row.std, bounds), high: clip(row.mean + row.std, bounds) }));
  return rows.length ? [{ title: "", rows }] : [];
}
// Score rows {method, size, mean, std, seeds} of a benchmark (its summary) or an extrapolate job (its rows,
// averaged over seeds here), for the headline metric.
export function scoreRows(result) {
  const metric = result.data?.metric;
  if (result.summary) {
    return result.summary.filter((row) => row.metric === metric && isPlain(row, result)).map((row) => ({ ...row }));
  }
  if (result.kind !== "extrapolate" || !result.rows) return [];
  const bySize = {};
  for (const row of result.rows) if (row[metric] !== null && row[metric] !== undefined) {
    (bySize[row.size] ??= []).push(row[metric]);
  }
  return Object.entries(bySize).map(([size, seen]) => {
    const mean = seen.reduce((a, b) => a + b, 0) / seen.length;
    const std = Math.sqrt(seen.reduce((a, b) => a + (b - mean) ** 2, 0) / seen.length);
    return { method: result.method, size: Number(size), mean, std, seeds: seen.length };
  });
}
// A summary row of a family with tags (a probe, a depth) is one of several per size: the chart keeps the
// untagged rows, or the first tag value's, so that one line per method remains readable.
function isPlain(row, result) {
  const known = new Set(["method", "metric", "size", "mean", "std", "seeds", "ratio", "reference_size"]);
  const tags = Object.keys(row).filter((key) => !known.has(key));
  if (!tags.length) return true;
  const first = result.summary.find((other) => other.metric === row.metric);
  return tags.every((tag) => row[tag] === first[tag]);
}

// ------------------------------------------------------------------------------------------------ charts
const PALETTE = ["#5470c6", "#ee6666", "#3ba272", "#fc8452", "#9a60b4", "#73c0de", "#fac858", "#ea7ccc"];
// Score against size (one chart of ``scoreCharts``): one line per method (the mean over seeds, named by its
// label), its band (mean ± std over seeds, clipped to the metric's range) shaded, the training size a vertical
// line; `panel`: the chart's probe, in its title.
export function drawScores(id, result, rows, panel = "") {
  const data = result.data || {};
  const methods = [...new Set(rows.map((row) => row.method))];
  const labels = Object.fromEntries(rows.map((row) => [row.method, row.label ?? row.method]));
  const sizes = [...new Set(rows.map((row) => row.size))].sort((a, b) => a - b);
  const categories = sizes.map(String);
  const at = (method, size) => rows.find((row) => row.method === method && row.size === size);
  const series = methods.flatMap((method, index) => {
    const pick = (value) => sizes.map((size) => (at(method, size) ? value(at(method, size)) : null));
    const stack = `spread-${index}`; // the band: its lower edge, then its width filled on top of it
    const color = PALETTE[index % PALETTE.length]; // the band in its line's colour
    const name = labels[method];
    return [
      { type: "line", id: method, name, data: pick((r) => r.mean), z: 3, color },
      { type: "line", id: `${method} band low`, name: `${name} band low`, stack, data: pick((r) => r.low),
        lineStyle: { opacity: 0 }, symbol: "none", silent: true, color },
      { type: "line", id: `${method} band`, name: `${name} band`, stack, data: pick((r) => r.high - r.low),
        lineStyle: { opacity: 0 }, symbol: "none", silent: true, areaStyle: { opacity: 0.2, color }, color },
    ];
  });
  if (series.length && data.train_size !== undefined && categories.includes(String(data.train_size))) {
    series[0].markLine = { symbol: "none", silent: true, lineStyle: { type: "dashed", color: "#555" },
      label: { formatter: `training size ${data.train_size}`, position: "end" },
      data: [{ xAxis: String(data.train_size) }] };
  }
  const byLabel = Object.fromEntries(methods.map((method) => [labels[method], method]));
  const tip = (items) => items.filter((item) => item.seriesName in byLabel).map((item) => {
    const row = at(byLabel[item.seriesName], Number(item.name));
    return row ? `${row.label ?? row.method} at ${row.size}: ${fmt(row.mean)} (band ${fmt(row.low)} to ` +
      `${fmt(row.high)}; ${row.seeds} seeds)` : "";
  }).join("<br>");
  const unit = data.unit ? ` (${data.unit})` : "";
  const [low, high] = metricRange(data.metric);
  const bounded = low !== null && high !== null ? { min: low, max: high } : { scale: true };
  return chart(id, { title: { text: `${data.metric} by size${unit}${panel ? `: ${panel}` : ""}`,
    subtext: `line: mean over seeds; ${bandLabel(data.metric)}`, textStyle: { fontSize: 13 },
    subtextStyle: { fontSize: 11 } },
    tooltip: { trigger: "axis", formatter: tip }, legend: { top: 40, data: methods.map((method) => labels[method]) },
    grid: { left: 56, right: 24, top: 76, bottom: 40 },
    xAxis: { type: "category", name: `size${unit}`, nameLocation: "middle", nameGap: 24, data: categories },
    yAxis: { type: "value", ...bounded, axisLabel: { formatter: fmt } }, series });
}
// Loss against step, one line per run ("rope seed 1"), each at its own steps 1 … steps.
export function drawLosses(id, lines) {
  const names = Object.keys(lines).filter((name) => lines[name].length);
  const node = document.getElementById(id);
  node.hidden = !names.length;
  if (!names.length) return null;
  return chart(id, { title: { text: "training loss per run", textStyle: { fontSize: 13 } },
    tooltip: { trigger: "axis", valueFormatter: fmt }, legend: { type: "scroll", top: 22 },
    grid: { left: 56, right: 24, top: 60, bottom: 40 },
    xAxis: { type: "value", name: "step (of the run)", nameLocation: "middle", nameGap: 24, min: 0 },
    yAxis: { type: "value", scale: true, axisLabel: { formatter: fmt } },
    series: names.map((name) => ({ type: "line", name, showSymbol: false, data: lines[name] })) });
}
// The loss curves a result carries: each run's own (``runs[i].loss_curve``; a train job's first seed from its
// finer ``loss_curve``), or a train job's first seed's alone;
// `live` (seen while the job ran, already at each run's own steps) fills in the runs the result has no curve for.
export function lossLines(result, live = {}) {
  const lines = {};
  (result?.runs || []).forEach((run, index) => {
    const curve = index === 0 && result.loss_curve ? result.loss_curve : run.loss_curve;
    if (curve) lines[`${run.label ?? result.method} seed ${run.seed}`] = curve;
  });
  if (!Object.keys(lines).length && result?.loss_curve) {
    const seed = result.runs?.[0]?.seed ?? 0;
    lines[`${result.method} seed ${seed}`] = result.loss_curve;
  }
  for (const [name, points] of Object.entries(live)) lines[name] ??= points;
  return lines;
}

// ------------------------------------------------------------------------------------------------ tables
function table(caption, columns, rows, label) {
  return el("div", { class: "table-wrap" }, el("table", { "aria-label": label },
    el("caption", {}, caption), el("tr", {}, ...columns.map((c) => el("th", { scope: "col" }, c))),
    ...rows.map((row) => el("tr", {}, ...columns.map((c) => el("td", {}, fmt(row[c]))))))); // fmt: 3 digits
}
// Each run: whether it learned its training size, or (the probes, which learn per probe) the probes it did not.
function runsTable(result) {
  const perProbe = (result.runs || []).some((run) => Array.isArray(run.not_learned_probes));
  const runs = (result.runs || []).map((run) => ({ run: run.label ?? result.method, seed: run.seed,
    ...(perProbe ? { "probes not learned": run.not_learned_probes?.join(", ") || "none" } : {
      learned: run.learned === null || run.learned === undefined ? "" : run.learned ? "yes" : "no" }),
    [`${result.data?.metric} at training size`]: run.in_distribution?.[result.data?.metric],
    "final loss": run.final_loss, "train s": run.train_seconds }));
  if (!runs.length) return null;
  const caption = perProbe ? "Runs: the probes each did not learn" : "Runs: learned the training size?";
  return table(caption, Object.keys(runs[0]), runs, "Runs");
}
// The leaderboard (the probes' L_eff / L_train): each method's median with the seeds it rests on, "2/3" when
// fewer seeds were rated than ran, and the probes not learned with their seeds.
export function effectiveLengthRows(result) {
  return (result.leaderboard || []).map((entry) => {
    const perSeed = entry.per_seed || [];
    const run = entry.seeds_run ?? perSeed.length;
    const rated = entry.seeds_rated ?? perSeed.filter((value) => value !== null && value !== undefined).length;
    const missed = Object.entries(entry.not_learned || {})
      .map(([probe, seeds]) => `${probe} (seed${seeds.length > 1 ? "s" : ""} ${seeds.join(", ")})`);
    return { method: entry.method, median: entry.median ?? "not rated", min: entry.min,
      "seeds rated": rated < run ? `${rated}/${run} (fewer than ran)` : `${rated}/${run}`,
      "not learned": missed.join("; ") || "none" };
  });
}
function effectiveLengthTable(result) {
  const rows = effectiveLengthRows(result);
  if (!rows.length) return null;
  return table(`Ranking: ${result.leaderboard_label ?? "score"} (median over rated seeds)`, Object.keys(rows[0]),
    rows, "Effective length ranking");
}
function findingsOf(result) {
  if (result.findings?.length) return result.findings;
  const unit = result.data?.unit ? ` ${result.data.unit}` : "";
  const where = `the training size (${result.data?.train_size}${unit})`;
  return (result.runs || []).map((run) => {
    const score = run.in_distribution?.[result.data?.metric];
    return `Seed ${run.seed}: ${run.learned ? "learned" : "did not learn"} ${where}` +
      `${score === undefined || score === null ? "" : `, ${result.data.metric} ${fmt(score)}`}` +
      `${run.final_loss === undefined ? "" : `, final loss ${fmt(run.final_loss)}`}.`;
  });
}
function findingsList(sentences, label) {
  if (!sentences.length) return null;
  return el("ul", { class: "findings", "aria-label": label }, ...sentences.map((text) => el("li", {}, text)));
}

// ------------------------------------------------------------------------------------------------ render
// Draw `job`'s result into `root` (emptied first); chart ids start with `prefix`. `live`: loss lines seen while
// it ran. Returns the ids of the charts drawn (scores, losses, one per suite task).
export function renderResult(job, root, prefix, live = {}) {
  disposeCharts(root);
  root.replaceChildren();
  const result = job.result;
  const drawn = [];
  if (!result) {
    root.append(el("p", {}, job.error ? `No result: ${job.error}` : `No result yet (${job.status}).`));
    return drawn;
  }
  const slot = (id, label) => {
    const node = el("div", { id, class: "chart", role: "img", "aria-label": label });
    root.append(node);
    return id;
  };
  if (result.suite) {
    root.append(findingsList((result.mrr || []).map((entry) =>
      `${entry.method}: mean reciprocal rank ${fmt(entry.mrr)} over ${entry.entries} (task, seed)`),
    "Suite findings"));
    root.append(table(`Suite ${result.suite}: ${result.description}`, ["method", "mrr", "entries"], result.mrr || [],
      "Suite ranking"));
    if (result.leaderboard) root.append(leaderboardTable(result.leaderboard));
    result.tasks.forEach((task, index) => {
      root.append(el("h4", {}, `Task ${index + 1}: ${task.data?.task ?? task.data?.family}`));
      root.append(findingsList(task.findings || [], `Findings of task ${index + 1}`));
      scoreCharts(task).forEach(({ title, rows }, panel, all) => {
        const id = all.length > 1 ? `${prefix}-task-${index}-${panel}` : `${prefix}-task-${index}`;
        drawn.push([slot(id, `Scores of task ${index + 1}${title ? `: ${title}` : ""}`), task, rows, title]);
      });
      root.append(table("Summary (mean over seeds)", ["method", "size", "mean", "std", "seeds", "ratio"],
        task.summary.filter((row) => row.metric === task.data?.metric), `Summary of task ${index + 1}`));
    });
  } else {
    root.append(findingsList(findingsOf(result), "Findings"));
    scoreCharts(result).forEach(({ title, rows }, panel, all) => {
      const id = all.length > 1 ? `${prefix}-scores-${panel}` : `${prefix}-scores`;
      drawn.push([slot(id, `Score against size${title ? `: ${title}` : ""}`), result, rows, title]);
    });
    const losses = lossLines(result, live);
    if (Object.keys(losses).length) {
      drawn.push([slot(`${prefix}-losses`, "Training loss per run"), null, losses]);
    }
    if (Array.isArray(result.leaderboard)) root.append(effectiveLengthTable(result));
    if (result.summary) {
      root.append(table("Summary (mean over seeds; ratio to the training size)",
        ["method", "size", "metric", "mean", "std", "seeds", "ratio"], result.summary, "Benchmark table"));
    }
    root.append(runsTable(result));
  }
  if (job.artifacts?.length) {
    root.append(el("h4", {}, "Artifacts"), el("ul", { class: "artifacts" }, ...job.artifacts.map((artifact) => {
      const button = el("button", { type: "button" }, `Download ${artifact.name}`);
      button.addEventListener("click", () => attempt(() => download(artifact)));
      return el("li", {}, button, artifact.size ? ` ${artifact.size} bytes` : "");
    })));
  }
  // drawn once in the document, so that each chart knows its width
  for (const [id, source, rows, panel] of drawn) {
    if (source === null) drawLosses(id, rows);
    else drawScores(id, source, rows, panel);
  }
  return drawn.map(([id]) => id);
}
async function download(artifact) {
  const response = await fetch(artifact.url.replace(/^\//, ""), { headers: apiHeaders() });
  if (!response.ok) throw new Error(`${artifact.url}: ${response.status}`);
  const link = el("a", { href: URL.createObjectURL(await response.blob()), download: artifact.name.split("/").pop() });
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}
