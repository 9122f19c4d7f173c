// posenc page: three views over the public API (/v1 with the user's X-API-Key); charts by Apache ECharts.
import { $, $$, KEY, api, attempt, chart, charts, compact, el, exact, labelInterval, number, say } from "./common.js";
import { listJobs, setUpJobs } from "./jobs.js";

const state = { methods: {}, presets: {}, request: null, result: null };

// ------------------------------------------------------------------------------------------------ tabs
// The panels' ids are "view-<name>", not the name the address keeps ("#jobs"): an element with the fragment's id
// would make the browser scroll to it when the page opens.
const viewOf = (tab) => tab.getAttribute("aria-controls").replace(/^view-/, "");
function show(view) {
  for (const tab of $$("[role=tab]")) {
    const selected = viewOf(tab) === view;
    tab.setAttribute("aria-selected", String(selected));
    tab.tabIndex = selected ? 0 : -1;
    document.getElementById(tab.getAttribute("aria-controls")).hidden = !selected;
  }
  history.replaceState(null, "", `#${view}`);
  for (const instance of Object.values(charts)) instance.resize();
  if (view === "jobs" && loaded) attempt(listJobs, "#j-form-error");
}
function setUpTabs() {
  const tabs = $$("[role=tab]");
  tabs.forEach((tab, index) => {
    tab.addEventListener("click", () => show(viewOf(tab)));
    tab.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (!step) return;
      const next = tabs[(index + step + tabs.length) % tabs.length];
      next.focus();
      show(viewOf(next));
    });
  });
  show(["methods", "configs", "jobs"].includes(location.hash.slice(1)) ? location.hash.slice(1) : "methods");
  window.addEventListener("resize", () => Object.values(charts).forEach((instance) => instance.resize()));
}

// ------------------------------------------------------------------------------------------------ methods
function paramInput(name, schema, required) {
  const options = schema.anyOf ? schema.anyOf.filter((s) => s.type !== "null") : [schema];
  const type = options.length === 1 ? options[0].type : "json";
  const input = type === "boolean" ? el("input", { type: "checkbox" }) : el("input");
  if (type === "boolean") input.checked = Boolean(schema.default);
  else if (schema.enum || options[0].enum) {
    const select = el("select");
    for (const value of schema.enum || options[0].enum) select.append(el("option", { value }, value));
    select.value = schema.default ?? "";
    Object.assign(select.dataset, { name, type: "string" });
    return el("label", { title: schema.description || "" }, schema.title || name, select);
  } else {
    input.value = schema.default === undefined || schema.default === null ? "" : typeof schema.default === "object"
      ? compact(schema.default) : schema.default;
    input.placeholder = required ? "required" : schema.default === null ? "none" : "";
  }
  Object.assign(input.dataset, { name, type });
  return el("label", { title: schema.description || "" }, `${schema.title || name}${required ? " *" : ""}`, input);
}
function readParams() {
  const params = {};
  for (const input of $$("#m-params [data-name]")) {
    const { name, type } = input.dataset;
    if (type === "boolean") params[name] = input.checked;
    else if (input.value.trim() === "") continue;
    else if (type === "number" || type === "integer") params[name] = Number(input.value);
    else if (type === "string") params[name] = input.value;
    else params[name] = JSON.parse(input.value);
  }
  return params;
}
function selectMethod() {
  const info = state.methods[$("#m-method").value];
  const schema = info.params_schema;
  const fields = Object.entries(schema.properties || {}).map(([name, property]) =>
    paramInput(name, property, (schema.required || []).includes(name)));
  $("#m-params").replaceChildren(el("legend", {}, "Parameters"), ...(fields.length ? fields : ["none"]));
  for (const label of $$("#m-layout [data-axes]")) label.hidden = !label.dataset.axes.split(" ").includes(String(info.axes));
  for (const label of $$("#m-layout [data-kind]")) label.hidden = label.dataset.kind !== info.kind;
  if (info.axes === 3) $("#m-grid").value = "2,3,3";
  else if (info.axes === 2) $("#m-grid").value = "4,4";
  const conventions = Object.entries(info.conventions).flatMap(([name, text]) => [el("dt", {}, name), el("dd", {}, text)]);
  $("#m-about").replaceChildren(
    el("p", {}, el("strong", {}, info.name), ` (${info.kind}): ${info.summary}`),
    el("p", {}, `Paper: ${info.paper}`),
    conventions.length ? el("dl", {}, ...conventions) : el("p", {}, "No conventions to choose."));
}
function methodRequest() {
  const info = state.methods[$("#m-method").value];
  const heads = Number($("#m-heads").value);
  const dim = Number($("#m-dim").value);
  const layout = {};
  let tokens = Number($("#m-length").value);
  let keys = $("#m-keys").value ? Number($("#m-keys").value) : tokens;
  if (info.axes >= 2) {
    layout.grid = $("#m-grid").value.split(/[ ,x×]+/).filter(Boolean).map(Number);
    tokens = keys = layout.grid.reduce((a, b) => a * b, 1);
  } else if (info.axes === 0) {
    const edges = $("#m-edges").value.split(/[\s,]+/).filter(Boolean).map((pair) => pair.split("-").map(Number));
    layout.graph = { num_nodes: Number($("#m-nodes").value), edges };
    tokens = keys = layout.graph.num_nodes;
  }
  const base = { method: info.name, params: readParams() };
  if (info.kind === "bias") {
    const sizes = info.axes === 1 ? { query_length: tokens, ...($("#m-keys").value ? { key_length: keys } : {}) } : layout;
    return { path: "v1/bias", body: { ...base, num_heads: heads, ...sizes }, tensor: "bias" };
  }
  const body = { ...base, q: { random: { shape: [1, heads, tokens, dim], seed: 0 } },
    k: { random: { shape: [1, heads, keys, dim], seed: 1 } }, ...layout };
  if (info.needs.includes("x")) body.x = { random: { shape: [1, keys, heads * dim], seed: 2 } };
  return { path: "v1/attention", body, tensor: "weights" };
}
function headMatrix(tensor, head) {
  const [rows, cols] = tensor.shape.slice(-2);
  const start = head * rows * cols;
  return Array.from({ length: rows }, (_, i) => tensor.data.slice(start + i * cols, start + (i + 1) * cols));
}
function drawHeatmap() {
  if (!state.result) return;
  const { tensor, title } = state.result;
  const head = Number($("#m-head").value || 0);
  const matrix = headMatrix(tensor, head);
  window.posencPage.heatmap = { head, matrix };
  const cells = [];
  let low = Infinity;
  let high = -Infinity;
  matrix.forEach((row, i) => row.forEach((value, j) => {
    const finite = Number.isFinite(number(value));
    cells.push([j, i, finite ? value : "-"]);
    if (finite) [low, high] = [Math.min(low, value), Math.max(high, value)];
  }));
  if (low > high) [low, high] = [0, 1];
  $("#m-title").textContent = `${title}, head ${head}: ${matrix.length} queries × ${matrix[0].length} keys`;
  // a label per cell only while cells are wide enough for one: then every k-th (the grid's inner size)
  const box = document.getElementById("m-heatmap");
  const across = labelInterval(matrix[0].length, box.clientWidth - 72, 30);
  const down = labelInterval(matrix.length, box.clientHeight - 106, 18);
  chart("m-heatmap", {
    tooltip: { formatter: (p) => `query ${p.value[1]}, key ${p.value[0]}<br>${exact(matrix[p.value[1]][p.value[0]])}` },
    grid: { left: 60, right: 16, top: 16, bottom: 90 },
    xAxis: { type: "category", name: "key j", nameLocation: "middle", nameGap: 24, data: matrix[0].map((_, j) => j),
      axisLabel: { interval: across, hideOverlap: true }, axisTick: { interval: across } },
    yAxis: { type: "category", name: "query i", nameLocation: "middle", nameGap: 38, inverse: true,
      data: matrix.map((_, i) => i),
      axisLabel: { interval: down, hideOverlap: true }, axisTick: { interval: down } },
    visualMap: { min: low, max: high === low ? low + 1 : high, calculable: true, orient: "horizontal", left: "center",
      bottom: 0, precision: 4, inRange: { color: ["#313695", "#74add1", "#ffffbf", "#f46d43", "#a50026"] } },
    series: [{ type: "heatmap", data: cells, progressive: cells.length > 100000 ? 20000 : 0 }],
  });
}
function drawToeplitz(table, meta) {
  const keys = meta.key_length;
  const offsets = Array.from({ length: table.shape[1] }, (_, t) => t - keys + 1);
  const series = Array.from({ length: table.shape[0] }, (_, h) => ({ type: "line", name: `head ${h}`, showSymbol: false,
    data: table.data.slice(h * offsets.length, (h + 1) * offsets.length).map((v, t) =>
      [offsets[t], Number.isFinite(number(v)) ? v : null]) }));
  chart("m-profile", { tooltip: { trigger: "axis", valueFormatter: exact }, legend: { type: "scroll", top: 0 },
    grid: { left: 60, right: 16, top: 32, bottom: 40 },
    xAxis: { type: "value", name: "i − j", nameLocation: "middle", nameGap: 24 }, yAxis: { type: "value", scale: true },
    series });
  $("#m-profile-note").textContent = `Toeplitz profile: B[h, i, j] = table[h, i − j + ${keys - 1}] (${meta.index || ""}).`;
}
function drawFrequencies(answer) {
  const bands = [...new Set(answer.pairs.map((pair) => pair.band || "rotated"))];
  const series = bands.map((band) => ({ type: "bar", name: band, barGap: "-100%",
    data: answer.pairs.map((pair) => ((pair.band || "rotated") === band ? pair.wavelength : null)) }));
  series[0].markLine = { symbol: "none", label: { position: "insideStartTop", formatter: `training length ${answer.train_length}` },
    data: [{ yAxis: answer.train_length }] };
  const tip = (items) => {
    const pair = answer.pairs[items[0].dataIndex];
    return Object.entries(pair).map(([name, value]) => `${name}: ${value}`).join("<br>");
  };
  chart("m-profile", { tooltip: { trigger: "axis", formatter: tip }, legend: { top: 0 },
    grid: { left: 70, right: 16, top: 32, bottom: 40 },
    xAxis: { type: "category", name: "pair k", nameLocation: "middle", nameGap: 24, data: answer.pairs.map((p) => p.pair) },
    yAxis: { type: "log", name: "wavelength 2π/ω (tokens)" }, series });
  const wrapping = answer.pairs.filter((pair) => pair.wraps).map((pair) => pair.pair);
  $("#m-profile-note").textContent = `${answer.wrapping_pairs} of ${answer.pairs.length} pairs wrap within ` +
    `${answer.train_length} tokens (pairs ${wrapping.join(", ") || "none"}); attention scale ${answer.attention_scale}.`;
}
async function compute(event) {
  event?.preventDefault();
  clearMethodResult(); // a failed Compute must not leave the previous method's heatmap under the new heading
  const request = methodRequest();
  state.request = request;
  window.posencPage.request = request;
  $("#m-request").value = asCurl(request);
  say(`POST /${request.path} …`);
  const answer = await api("POST", request.path, request.body);
  const tensor = answer.tensors[request.tensor];
  const heads = tensor.shape.at(-3);
  state.result = { tensor, title: request.tensor === "bias" ? "bias B" : "attention weights" };
  $("#m-head").replaceChildren(...Array.from({ length: heads }, (_, h) => el("option", { value: h }, `head ${h}`)));
  drawHeatmap();
  const info = state.methods[request.body.method];
  charts["m-profile"]?.clear();
  $("#m-profile-note").textContent = "";
  if (info.kind === "bias" && info.toeplitz && info.axes === 1) {
    const toeplitz = await api("POST", request.path, { ...request.body, form: "toeplitz" });
    drawToeplitz(toeplitz.tensors.bias, toeplitz.meta);
  } else if (info.kind === "rotary") {
    const setup = { method: info.name, params: request.body.params, rotary_dim: Number($("#m-dim").value) };
    try {
      drawFrequencies(await api("POST", "v1/rope/frequencies", { setup, train_length: Number($("#m-train").value) }));
    } catch (error) {
      $("#m-profile-note").textContent = error.message;
    }
  }
  say(`${info.name}: ${tensor.shape.join(" × ")} ${tensor.dtype}, hover a cell for its exact value.`);
}
function clearMethodResult() {
  state.result = null;
  window.posencPage.heatmap = null;
  for (const id of ["m-heatmap", "m-profile"]) charts[id]?.clear();
  $("#m-head").replaceChildren();
  for (const id of ["#m-title", "#m-profile-note", "#m-error"]) $(id).textContent = "";
}
function asCurl({ path, body }) {
  const quoted = JSON.stringify(body).replaceAll("'", "'\\''");
  return `curl -s -X POST '${new URL(path, location.href)}' \\\n  -H 'Content-Type: application/json' \\\n` +
    `  -H "X-API-Key: $POSENC_API_KEY" \\\n  -d '${quoted}'`;
}
function pythonLiteral(value, indent = "") {
  if (value === null) return "None";
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value !== "object") return JSON.stringify(value);
  const inner = `${indent}    `;
  const items = Array.isArray(value) ? value.map((v) => pythonLiteral(v, inner))
    : Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${pythonLiteral(v, inner)}`);
  const [open, close] = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
  const flat = `${open}${items.join(", ")}${close}`;
  return flat.length < 80 ? flat : `${open}\n${inner}${items.join(`,\n${inner}`)},\n${indent}${close}`;
}
function asPython({ path, body }) {
  return `import os\n\nimport httpx\n\nresponse = httpx.post(\n    "${new URL(path, location.href)}",\n` +
    `    headers={"X-API-Key": os.environ.get("POSENC_API_KEY", "")},\n    json=${pythonLiteral(body, "    ")},\n)\n` +
    "response.raise_for_status()\ntensors = response.json()[\"tensors\"]\n";
}
async function copy(text) {
  $("#m-request").value = text;
  try {
    await navigator.clipboard.writeText(text);
    say("Copied to the clipboard.");
  } catch {
    $("#m-request").select();
    say("Select the request below and copy it (the clipboard is not available here).");
  }
}
async function setUpMethods() {
  const list = await api("GET", "v1/methods");
  const select = $("#m-method");
  for (const info of list.data) {
    state.methods[info.name] = info;
    select.append(el("option", { value: info.name }, `${info.name} (${info.kind})`));
  }
  select.value = "alibi" in state.methods ? "alibi" : list.data[0].name;
  select.addEventListener("change", selectMethod);
  selectMethod();
  $("#m-form").addEventListener("submit", (event) => attempt(() => compute(event), "#m-error"));
  $("#m-head").addEventListener("change", drawHeatmap);
  $("#m-curl").addEventListener("click", () => state.request && copy(asCurl(state.request)));
  $("#m-python").addEventListener("click", () => state.request && copy(asPython(state.request)));
}

// ------------------------------------------------------------------------------------------------ configs
const side = (name) => $(`.setup[data-side="${name}"]`);
function configOf(name) {
  const text = $(".c-config", side(name)).value.trim();
  if (!text) throw new Error(`Setup ${name.toUpperCase()}: paste a config.json, upload one or pick a preset`);
  return JSON.parse(text);
}
function runsOf(layers) {
  const runs = [];
  for (const layer of layers) {
    const { layer: index, ...setup } = layer;
    const last = runs.at(-1);
    if (last && compact(last.setup) === compact(setup)) last.to = index;
    else runs.push({ from: index, to: index, setup });
  }
  return runs;
}
async function resolve(name) {
  const root = side(name);
  $(".c-warnings", root).replaceChildren(); // a failed resolve leaves no earlier answer behind
  $(".c-layers", root).replaceChildren();
  const answer = await api("POST", "v1/models/resolve", { config: configOf(name) });
  $(".c-warnings", root).replaceChildren(...answer.warnings.map((warning) => el("li", { "data-code": warning.code },
    el("strong", {}, warning.code), `: ${warning.message}`,
    el("br"), `layers: ${warning.layers.join(", ") || "all"}; evidence: `, el("code", {}, compact(warning.evidence)))));
  if (!answer.warnings.length) $(".c-warnings", root).append(el("li", { class: "ok" }, "No known bug pattern."));
  const columns = ["layers", "type", "method", "params", "rotary dim", "slice", "pairing", "attention scale",
    "softmax scale", "window / chunk"];
  const rows = runsOf(answer.layers).map(({ from, to, setup }) => el("tr", {}, ...[
    from === to ? `${from}` : `${from}–${to} (${to - from + 1})`, setup.layer_type, setup.method ?? "none (NoPE)",
    compact(setup.params), setup.rotary_dim, setup.rotary_slice.join("–"), setup.pairing, setup.attention_scale,
    `${setup.softmax_scale} (${setup.softmax_scale_source})`, setup.window ?? setup.chunk ?? "",
  ].map((cell) => el("td", {}, String(cell)))));
  $(".c-layers", root).replaceChildren(
    el("caption", {}, `${answer.model_type || "model"}: ${answer.layers.length} layers, ${rows.length} runs`),
    el("tr", {}, ...columns.map((column) => el("th", { scope: "col" }, column))), ...rows);
  say(`Setup ${name.toUpperCase()} resolved: ${answer.warnings.length} warning(s).`);
}
async function compare(event) {
  event.preventDefault();
  const request = { setup_a: { config: configOf("a"), layer: Number($("#c-layer-a").value) },
    setup_b: { config: configOf("b"), layer: Number($("#c-layer-b").value) }, max_position: Number($("#c-max").value) };
  const tolerances = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1];
  $("#c-result").textContent = "";
  charts["c-chart"]?.clear();
  say("Comparing …");
  const answers = [];
  for (const tolerance of tolerances) {
    answers.push(await api("POST", "v1/rope/compare", { ...request, tolerance_angle: tolerance, tolerance_logit: tolerance }));
  }
  const at = answers[3];
  $("#c-result").textContent = at.first_angle_divergence === null
    ? `At tolerance 1e-3 the two setups agree up to position ${at.max_position}.`
    : `At tolerance 1e-3 the angles part at position ${at.first_angle_divergence} (pair ${at.angle_pair}, ` +
      `δ = ${at.angle_difference} rad); the probe logits at ${at.first_logit_divergence ?? "none"} ` +
      `(${at.logit_a} vs ${at.logit_b}).`;
  const line = (name, field) => ({ type: "line", name, connectNulls: false,
    data: answers.map((answer, i) => [tolerances[i], answer[field]]) });
  chart("c-chart", { tooltip: { trigger: "axis", valueFormatter: (v) => (v === null ? "never" : String(v)) },
    legend: { top: 0 }, grid: { left: 70, right: 24, top: 32, bottom: 44 },
    xAxis: { type: "log", name: "tolerance", nameLocation: "middle", nameGap: 26 },
    yAxis: { type: "value", name: "first divergent position" },
    series: [line("angle", "first_angle_divergence"), line("probe logit", "first_logit_divergence")] });
  say("Compared: a gap in a line means no divergence up to the last position.");
}
async function setUpConfigs() {
  const presets = await api("GET", "v1/models");
  for (const preset of presets.data) state.presets[preset.name] = preset.config;
  for (const name of ["a", "b"]) {
    const root = side(name);
    $(".c-preset", root).append(...presets.data.map((p) => el("option", { value: p.name }, p.name)));
    $(".c-preset", root).addEventListener("change", (event) => {
      const preset = state.presets[event.target.value];
      if (preset) $(".c-config", root).value = JSON.stringify(preset, null, 1);
    });
    $(".c-file", root).addEventListener("change", async (event) => {
      const [file] = event.target.files;
      if (file) $(".c-config", root).value = await file.text();
      $(".c-preset", root).value = "";
    });
    $(".c-resolve", root).addEventListener("click", () => attempt(() => resolve(name), `.setup[data-side="${name}"] .c-error`));
  }
  $("#c-compare").addEventListener("submit", (event) => attempt(() => compare(event), "#c-error"));
}

// ------------------------------------------------------------------------------------------------ start
async function start() {
  const key = $("#api-key");
  key.value = localStorage.getItem(KEY) || "";
  $("#key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    localStorage.setItem(KEY, key.value);
    attempt(load);
  });
  setUpTabs();
  setUpJobs();
  await attempt(load);
}
let loaded = false;
async function load() {
  if (loaded) return;
  await setUpMethods();
  await setUpConfigs();
  loaded = true;
  say("Ready.");
  if (location.hash === "#jobs") await listJobs();
}
start();
