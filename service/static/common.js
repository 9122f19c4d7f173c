// posenc page, shared helpers: DOM building, the API call with the user's key, errors shown where they belong,
// charts (ECharts instances kept by element id) and number formatting for reading.
/* global echarts */
export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];
export const KEY = "posenc.apiKey";
const NON_FINITE = { inf: Infinity, "-inf": -Infinity, nan: NaN };
export const charts = {};
// For tests and the curious: the matrix the heatmap shows, exactly as the API sent it (rows = queries).
window.posencPage = { heatmap: null, charts };

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}
export function say(message, error = false) {
  $("#status").textContent = message;
  $("#status").classList.toggle("error", error);
}
export function apiHeaders(extra = {}) {
  const headers = { Accept: "application/json", ...extra };
  const key = localStorage.getItem(KEY);
  if (key) headers["X-API-Key"] = key;
  return headers;
}
export async function api(method, path, body, extraHeaders = {}) {
  const headers = apiHeaders(extraHeaders);
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => null);
  if (response.status === 401) throw new Error("This gateway needs an API key: enter yours above (kept in this browser).");
  if (!response.ok) throw new Error(`${path}: ${data?.detail || data?.title || response.statusText} (${response.status})`);
  return data;
}
// Run an action; a failure is said in the status line and, when `where` names an element (a form's error slot,
// next to the control that started the action), there too, so the message sits beside its cause.
export async function attempt(action, where = null) {
  const slot = where ? $(where) : null;
  if (slot) slot.textContent = "";
  try {
    await action();
  } catch (error) {
    say(error.message, true);
    if (slot) slot.textContent = error.message;
  }
}
export function chart(id, option) {
  const node = document.getElementById(id);
  if (charts[id] && charts[id].getDom() !== node) disposeChart(id);
  charts[id] ??= echarts.init(node);
  charts[id].setOption({ animation: false, ...option }, true);
  return charts[id];
}
export function disposeChart(id) {
  charts[id]?.dispose();
  delete charts[id];
}
// Dispose of every chart drawn inside `root` (before its content is replaced).
export function disposeCharts(root) {
  for (const [id, instance] of Object.entries(charts)) if (root.contains(instance.getDom())) disposeChart(id);
}
export const number = (value) => (typeof value === "string" ? NON_FINITE[value] : value);
export const exact = (value) => (typeof value === "string" ? value : String(value));
export const compact = (value) => JSON.stringify(value);
// For reading: integers as they are, other numbers to 3 significant digits (0.7900000000000003 -> 0.79).
export function fmt(value) {
  if (value === null || value === undefined) return "";
  if (typeof value !== "number") return String(value);
  if (!Number.isFinite(value) || Number.isInteger(value)) return String(value);
  return String(Number(value.toPrecision(3)));
}
// Category-axis labels that do not overlap: every k-th (k a round step: 1, 2, 5, 10, 20, 50, …) so that labels
// are at least `pixels` px apart; ECharts' interval is k − 1.
export function labelInterval(count, length, pixels = 28) {
  const need = (count * pixels) / Math.max(length, 1);
  let step = 1;
  for (let scale = 1; step < need; scale *= 10) step = [1, 2, 5, 10].map((m) => m * scale).find((s) => s >= need) ?? step;
  return step - 1;
}
