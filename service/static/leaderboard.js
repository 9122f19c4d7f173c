// posenc page: a finished leaderboard suite's table (result.leaderboard, posenc.training.leaderboard): per method
// its overall rank (MRR over learned runs of the methods that learned every task) and per task its score past the
// training length (mean ± std over the seeds that learned), the seeds that learned of those run, and the median
// steps to learn ("cap": never within the cap) with the verdicts of the seeds that did not learn; a † after a score
// marks a value that flips with the seed. Click a column's header to sort by it; again to reverse.
import { el, fmt } from "./common.js";

// The table's columns: [header, value to sort by, text to show]. Missing values sort last either way.
export function leaderboardColumns(board) {
  const columns = [
    ["rank", (row) => row.rank, (row) => (row.rank === null ? "–" : String(row.rank))],
    ["method", (row) => row.method, (row) => row.method],
    ["MRR", (row) => row.mrr, (row) => (row.mrr === null ? "unrated" : `${fmt(row.mrr)} (${row.entries})`)],
  ];
  for (const task of board.tasks) {
    const cell = (row) => row.cells[task.task];
    const arrow = task.higher_is_better ? "↑" : "↓";
    columns.push(
      [`${task.task} ${task.metric} ${arrow}`, (row) => cell(row)?.score ?? null, (row) => {
        const c = cell(row);
        if (!c || c.score === null) return "–";
        const mark = c.seed_dependent?.length ? "†" : "";  // the value flips with the seed
        return c.std === null ? `${fmt(c.score)}${mark}` : `${fmt(c.score)}${mark} ± ${fmt(c.std)}`;
      }],
      [`${task.task} learned`, (row) => (cell(row) ? cell(row).seeds_learned / cell(row).seeds_run : null),
        (row) => (cell(row) ? `${cell(row).seeds_learned}/${cell(row).seeds_run}` : "–")],
      [`${task.task} steps`, (row) => (cell(row) ? cell(row).steps_needed ?? Infinity : null), (row) => {
        const c = cell(row);
        if (!c) return "–";
        const steps = c.steps_needed === null ? "cap" : fmt(c.steps_needed);
        return c.diagnosis?.length ? `${steps} (${verdicts(c.diagnosis)})` : steps;
      }],
    );
  }
  return columns;
}

// The seeds that did not learn, by verdict (posenc.training.leaderboard.diagnose_run), most frequent first.
function verdicts(diagnosis) {
  const counts = {};
  for (const entry of diagnosis) counts[entry.verdict] = (counts[entry.verdict] || 0) + 1;
  return Object.entries(counts).sort((a, b) => b[1] - a[1]).map(([verdict, n]) => `${verdict} ×${n}`).join(", ");
}

function compare(a, b) {
  if (typeof a === "string" || typeof b === "string") return String(a).localeCompare(String(b));
  return a - b;
}

// Rows sorted by column `index`, ascending or not; rows without a value stay at the bottom.
export function sortedRows(rows, columns, index, ascending) {
  const key = columns[index][1];
  const present = rows.filter((row) => key(row) !== null && key(row) !== undefined);
  const missing = rows.filter((row) => key(row) === null || key(row) === undefined);
  present.sort((a, b) => (ascending ? 1 : -1) * compare(key(a), key(b)));
  return [...present, ...missing];
}

export function leaderboardTable(board) {
  const columns = leaderboardColumns(board);
  const state = { index: 0, ascending: true };
  const body = el("tbody");
  const headers = columns.map(([name], index) => {
    const button = el("button", { type: "button", class: "sort" }, name);
    button.addEventListener("click", () => {
      state.ascending = state.index === index ? !state.ascending : true;
      state.index = index;
      draw();
    });
    return el("th", { scope: "col", "aria-sort": "none" }, button);
  });
  function draw() {
    headers.forEach((th, index) =>
      th.setAttribute("aria-sort", index !== state.index ? "none" : state.ascending ? "ascending" : "descending"));
    body.replaceChildren(...sortedRows(board.rows, columns, state.index, state.ascending).map((row) =>
      el("tr", {}, ...columns.map(([, , show]) => el("td", {}, show(row))))));
  }
  draw();
  const rated = board.rated_over?.length ? `rated over ${board.rated_over.join(", ")}` : "no method learned every task";
  return el("div", { class: "table-wrap" },
    el("table", { "aria-label": "Leaderboard" },
      el("caption", {}, `Leaderboard (${rated}; click a header to sort)`),
      el("thead", {}, el("tr", {}, ...headers)), body),
    el("p", { class: "note" }, board.rule));
}
