// posenc page, the Jobs view: templates, submit, watch a job (live loss per run, at each run's own steps), the
// finished job's result (results.js), the recent jobs and two finished jobs side by side.
import { $, api, attempt, el, say } from "./common.js";
import { drawLosses, renderResult } from "./results.js";

// The job templates: each learns its training size within its stated time on 2 CPU cores through one worker
// (measured by tests/browser/test_jobs.py, which holds the stated time and the learned flag). Edit the JSON to
// make them bigger.
export const TEMPLATES = {
  "Train: RoPE on copy_single (about 1 s)": { seconds: 1, body: { kind: "train", spec: {
    methods: [{ method: "rope" }], data: { task: "copy_single", size: 4 }, model: { layers: 1, dim: 32, heads: 2 },
    train: { steps: 300, batch_size: 16, warmup_steps: 5, checkpoint_every: 100 } } } },
  "Extrapolate: RoPE on copy_single, 2 seeds (about 2 s)": { seconds: 2, body: { kind: "extrapolate", spec: {
    methods: [{ method: "rope" }], data: { task: "copy_single", size: 4 }, model: { layers: 1, dim: 32, heads: 2 },
    train: { steps: 300, batch_size: 16, warmup_steps: 5 }, eval: { sizes: [2, 4, 6, 8], samples: 20 },
    seeds: [0, 1] } } },
  "Benchmark: RoPE, ALiBi, NoPE on copy_single, 2 seeds (about 6 s)": { seconds: 6, body: { kind: "benchmark", spec: {
    methods: [{ method: "rope" }, { method: "alibi" }, { method: "nope" }], data: { task: "copy_single", size: 4 },
    model: { layers: 2, dim: 32, heads: 2 }, train: { steps: 250, batch_size: 16, lr: 0.005, warmup_steps: 5 },
    eval: { sizes: [2, 4, 6, 8], samples: 20 }, seeds: [0, 1] } } },
};
const TERMINAL = ["succeeded", "failed", "cancelled", "expired"];
const state = { job: null, timer: null, losses: {}, offsets: {}, finished: {} };
window.posencPage.templates = TEMPLATES;
window.posencPage.renderResult = renderResult;

// ------------------------------------------------------------------------------------------------ live loss
// Where each run starts in the job's step count: the worker counts steps over the whole job (a train job: each
// seed's training steps, one after the other; a benchmark or extrapolate job: each run's training steps and then
// one step per evaluated size), so a run's own step is the job's step less its offset.
function runOffsets(job) {
  const spec = job.spec || {};
  const steps = spec.train?.steps ?? 1000;
  const seeds = spec.seeds ?? [0];
  const names = (spec.methods || []).map((ref) => ref.name ?? ref.method);
  const sizes = new Set(spec.eval?.sizes ?? []);
  const n = spec.data?.size;
  if (n !== undefined && !spec.eval?.sizes) { // a sequence task's default: 1 … 2n, then 3n and 4n
    for (let size = 1; size <= 2 * n; size += 1) sizes.add(size);
    sizes.add(3 * n).add(4 * n);
  }
  if (n !== undefined) sizes.add(n); // the training size is always evaluated
  const perRun = job.kind === "train" ? steps : steps + sizes.size;
  const offsets = {};
  let index = 0;
  for (const name of names) for (const seed of seeds) offsets[`train ${name} seed ${seed}`] = perRun * index++;
  return offsets;
}
function recordLoss(progress, offsets = state.offsets) {
  if (progress.loss === null || !progress.stage?.startsWith("train ")) return;
  const offset = offsets[progress.stage] ?? 0;
  const name = progress.stage.slice("train ".length);
  const line = (state.losses[name] ||= []);
  const step = progress.step - offset;
  if (step > (line.at(-1)?.[0] ?? 0)) line.push([step, progress.loss]);
}

// ------------------------------------------------------------------------------------------------ jobs
export async function listJobs() {
  const jobs = await api("GET", "v1/jobs?limit=20");
  const rows = jobs.data.map((job) => {
    const open = el("button", { type: "button" }, `Show ${job.id.slice(0, 8)}`);
    open.addEventListener("click", () => attempt(() => watch(job.id), "#j-form-error"));
    return el("tr", {}, el("td", {}, open), el("td", {}, job.kind), el("td", {}, job.status),
      el("td", {}, (job.methods || []).join(", ")), // a summary: the whole spec is the job's own GET
      el("td", {}, new Date(job.created_at).toLocaleString()));
  });
  $("#j-list").replaceChildren(el("caption", {}, `Recent jobs (${jobs.count})`),
    el("tr", {}, ...["job", "kind", "status", "methods", "created"].map((c) => el("th", { scope: "col" }, c))), ...rows);
  const finished = jobs.data.filter((job) => job.status === "succeeded");
  for (const [index, select] of [$("#j-compare-a"), $("#j-compare-b")].entries()) {
    const kept = select.value;
    select.replaceChildren(...finished.map((job) => el("option", { value: job.id },
      `${job.id.slice(0, 8)} ${job.kind} (${(job.methods || []).join(", ")})`)));
    select.value = finished.some((job) => job.id === kept) ? kept : finished[index]?.id ?? finished[0]?.id ?? "";
  }
  $("#j-compare").hidden = finished.length < 2;
}
async function submitJob(event) {
  event.preventDefault();
  let body;
  try {
    body = JSON.parse($("#j-body").value);
  } catch (error) {
    throw new Error(`Job request: not JSON (${error.message})`);
  }
  const key = `page-${Date.now()}-${Math.random().toString(16).slice(2)}`;
  const job = await api("POST", "v1/jobs", body, { "Idempotency-Key": key });
  say(`Job ${job.id} submitted; estimate ${Math.round(job.estimate_s ?? 0)} s.`);
  await watch(job.id);
  await listJobs();
}
async function watch(id) {
  clearTimeout(state.timer);
  state.job = id;
  state.losses = {}; // one line per run ("rope seed 1"), each at its own steps
  $("#j-current").hidden = false;
  $("#j-id").textContent = id;
  $("#j-status").textContent = "";
  $("#j-events").replaceChildren();
  $("#j-result").replaceChildren();
  $("#j-live").hidden = false;
  drawLosses("j-loss", {});
  await poll();
}
async function poll() {
  const id = state.job;
  const job = await api("GET", `v1/jobs/${id}`);
  if (id !== state.job) return;
  state.offsets = runOffsets(job);
  const { progress } = job;
  $("#j-status").textContent = job.status;
  $("#j-stage").textContent = progress.stage || "";
  const estimate = job.estimate_s == null ? "" : ` (estimated ${Math.round(job.estimate_s)} s at submission)`;
  $("#j-eta").textContent = (progress.eta_s === null ? "–" : `${Math.round(progress.eta_s)} s`) + estimate;
  $("#j-progress").max = Math.max(progress.total, 1);
  $("#j-progress").value = progress.step;
  $("#j-error").textContent = job.error || "";
  $("#j-cancel").disabled = TERMINAL.includes(job.status);
  recordLoss(progress);
  // a benchmark that fanned out (one job per run): its own progress is the runs' summed, with no loss; each
  // running run's is its own (its steps counted from 1)
  for (const child of job.children || []) {
    if (child.status === "running") recordLoss((await api("GET", `v1/jobs/${child.id}`)).progress, {});
  }
  if (TERMINAL.includes(job.status)) {
    $("#j-live").hidden = true;
    state.finished[id] = state.losses;
    renderResult(job, $("#j-result"), "j", state.losses);
    await showEvents(id);
    await listJobs();
    say(`Job ${id} ${job.status}.`, job.status !== "succeeded");
    return;
  }
  drawLosses("j-loss", state.losses);
  state.timer = setTimeout(() => attempt(poll, "#j-error"), 1000);
}
async function showEvents(id) {
  const events = await api("GET", `v1/jobs/${id}/events`);
  $("#j-events").replaceChildren(...events.data.map((event) => el("li", {}, `${event.at}: ${event.event}`)));
}
// Two finished jobs side by side: each one's findings, curves and tables, drawn the same way.
async function compareJobs(event) {
  event.preventDefault();
  const ids = [$("#j-compare-a").value, $("#j-compare-b").value];
  if (!ids[0] || !ids[1]) throw new Error("Pick two finished jobs to compare.");
  const jobs = await Promise.all(ids.map((id) => api("GET", `v1/jobs/${id}`)));
  for (const [index, side] of ["a", "b"].entries()) {
    const root = $(`#j-side-${side}`);
    root.replaceChildren();
    const body = el("div");
    root.append(el("h3", {}, `${side.toUpperCase()}: ${jobs[index].kind} `, el("code", {}, ids[index])), body);
    renderResult(jobs[index], body, `j-cmp-${side}`, state.finished[ids[index]] || {});
  }
  $("#j-sides").hidden = false;
  say(`Comparing ${ids[0].slice(0, 8)} and ${ids[1].slice(0, 8)}.`);
}
export function setUpJobs() {
  const select = $("#j-template");
  for (const name of Object.keys(TEMPLATES)) select.append(el("option", { value: name }, name));
  const fill = () => { $("#j-body").value = JSON.stringify(TEMPLATES[select.value].body, null, 1); };
  select.addEventListener("change", fill);
  fill();
  $("#j-form").addEventListener("submit", (event) => attempt(() => submitJob(event), "#j-form-error"));
  $("#j-refresh").addEventListener("click", () => attempt(listJobs, "#j-form-error"));
  $("#j-compare").addEventListener("submit", (event) => attempt(() => compareJobs(event), "#j-compare-error"));
  $("#j-cancel").addEventListener("click", () => attempt(async () => {
    await api("POST", `v1/jobs/${state.job}/cancel`);
    say(`Cancel requested for ${state.job}.`);
  }, "#j-error"));
}
