"""The documentation's generated tables: the methods (from the method registry), the tasks (from the task
families) and the settings (from the Settings model), each on the docs page its section belongs to.

``python -m posenc.catalogue`` prints them; ``python -m posenc.catalogue --write`` puts each in place between its
markers on its page (under the repository root, or the root given after ``--write``). A test compares every page
with the code, so no table can drift.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import posenc.pe as pe
from posenc.settings import Settings

METHODS_MARKERS = ("<!-- methods-table:begin -->", "<!-- methods-table:end -->")
SETTINGS_MARKERS = ("<!-- settings-table:begin -->", "<!-- settings-table:end -->")
TASKS_MARKERS = ("<!-- tasks-table:begin -->", "<!-- tasks-table:end -->")


_URL = re.compile(r"(https?://[^\s;)]+)")


def _cell(text: str) -> str:
    """Markdown-table safe: pipes escaped, URLs as autolinks."""
    return _URL.sub(r"<\1>", text.replace("|", "\\|"))


def methods_table() -> str:
    lines = [
        "| method | kind | learned | Toeplitz | what it is | paper |",
        "|---|---|---|---|---|---|",
    ]
    for spec in pe.list_methods():
        lines.append(
            f"| `{spec.name}` | {spec.kind.value} | {'yes' if spec.learned else ''} | "
            f"{'yes' if spec.toeplitz else ''} | {_cell(spec.summary)} | {_cell(spec.paper)} |"
        )
    return "\n".join(lines)


def tasks_table() -> str:
    """Every task of every family: its unit, where a spec gives its sizes, the metric, what it is; then the
    suites (``posenc.tasks.catalogue``, which ``GET /v1/tasks`` answers too)."""
    from posenc.tasks import catalogue

    listed = catalogue()
    lines = [
        "| task | family | unit | training size | evaluation sizes | metric | what it is |",
        "|---|---|---|---|---|---|---|",
    ]
    for info in listed.tasks:
        name = f"(`{info.task[1:-1]}`)" if info.task.startswith("(") else f"`{info.task}`"
        lines.append(
            f"| {name} | {info.family} | {info.unit} | `{info.train_field}` | `{info.eval_field}` | {info.metric} "
            f"| {_cell(info.about)} |"
        )
    lines += ["", "| suite | tasks | sized for |", "|---|---|---|"]
    for suite in listed.suites:
        lines.append(f"| `{suite.name}` | {', '.join(f'`{task}`' for task in suite.tasks)} | {_cell(suite.budget)} |")
    lines += ["", "| pattern | shipped by | layers (the unit repeats) |", "|---|---|---|"]
    for pattern in listed.patterns:
        lines.append(f"| `{pattern.name}` | {_cell(pattern.model)} | {_cell(pattern.description)} |")
    return "\n".join(lines)


def settings_table() -> str:
    lines = ["| environment variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "(computed)" if field.default_factory is not None else repr(field.default)
        lines.append(f"| `POSENC_{name.upper()}` | `{default}` | {_cell(field.description or '')} |")
    return "\n".join(lines)


# Which docs page holds which table (paths relative to the repository root).
PAGES: dict[tuple[str, str], str] = {
    METHODS_MARKERS: "docs/methods/index.md",
    TASKS_MARKERS: "docs/jobs.md",
    SETTINGS_MARKERS: "docs/deployment.md",
}


def blocks() -> dict[tuple[str, str], str]:
    """Each generated block (by its markers) and what it must contain."""
    return {METHODS_MARKERS: methods_table(), TASKS_MARKERS: tasks_table(), SETTINGS_MARKERS: settings_table()}


def update_pages(root: Path) -> list[Path]:
    """Replace each block between its markers on its page under ``root`` with the generated table; the pages
    written. A page that lost its markers is an error rather than a silent no-op."""
    written = []
    for markers, table in blocks().items():
        begin, end = markers
        path = root / PAGES[markers]
        text = path.read_text()
        if begin not in text or end not in text:
            raise ValueError(f"{path} has no {begin} ... {end} block")
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        path.write_text(f"{head}{begin}\n{table}\n{end}{tail}")
        written.append(path)
    return written


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        for page in update_pages(Path(sys.argv[2] if len(sys.argv) > 2 else ".")):
            print(f"wrote {page}")
    else:
        for (begin, end), table in blocks().items():
            print(f"{begin}\n{table}\n{end}\n")
