"""Every shell command of the documentation, run as written against a live gateway and worker.

The commands are the fenced ```bash, ```console, ```sh and ```shell blocks of README.md and of every Markdown
file under docs/ (a console block's commands are its "$ " lines; the rest is output). Each
block's commands run in order in one bash process (so a variable one command sets, like ``job=$(curl ...)``, is
there for the next), from a directory that mirrors the repository root (every top-level entry linked, so
``examples/...`` and ``.venv/bin/...`` resolve as written, and files a command writes with ``-o`` land outside
the checkout). The gateway (``uvicorn service.main:app``) and a worker (``posenc worker``) are the integration
fixtures' real processes; the documented address ``http://127.0.0.1:8000`` is replaced by the gateway's own, and
``POSENC_BASE_URL`` points ``posenc-client`` at it.

A command that cannot run inside a test (it starts a long-lived server, installs software, runs another test
suite or rewrites the docs) matches an entry of ``NOT_RUN``, each with its reason, and every other command runs;
the listing test prints each command left out with its reason, so none is left out silently. A command that
states its duration ("about 20 s", "takes about 2 min") is timed and must finish within 0.5x to 2x of it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
DOCUMENTED_ADDRESSES = ("http://127.0.0.1:8000", "http://localhost:8000")
SHELL_LANGUAGES = {"bash", "console", "sh", "shell"}
COMMAND_TIMEOUT_S = 600.0

# (pattern matched against the start of a command, why it does not run here). Checked in order.
NOT_RUN: list[tuple[str, str]] = [
    (r"make (run|install)\b", "creates the virtual environment and starts the service: the fixtures start it"),
    (r"make docs\b|(\S*/)?mkdocs serve\b", "serves the documentation site until stopped"),
    (r"make test\b", "runs the whole test suite, this test included"),
    (r"make (lint|bench)\b", "runs the linters or the benchmarks over the whole project (minutes; CI runs them)"),
    (r"(POSENC_\w+=\S+ )*posenc (serve|worker)\b", "starts a long-lived server; the fixtures start the same ones"),
    (r"(\w+=\S+ )*docker\b", "needs Docker, which the test machine does not have"),
    (r"(sudo )?apt(-get)? ", "installs system packages"),
    (r"(\S*/)?pip3? install\b|(\S*/)?python3? -m pip install\b", "installs packages (needs the network)"),
    (r"(\. |source )\S*activate\b", "changes the shell of the reader; the test puts .venv/bin on PATH instead"),
    (r"(\S*/)?pytest\b", "runs another part of the test suite"),
    (r"(\S*/)?python3? bench/", "a benchmark script: minutes of measurement (some need CUDA)"),
    (r"(\S*/)?python3? -m posenc\.catalogue --write", "rewrites README.md's generated tables"),
    (r"git ", "changes or queries the checkout, not the service"),
    (r"cd ", "leaves the repository root"),
]

_DURATION = re.compile(r"\babout (\d+(?:\.\d+)?) ?(s|sec|seconds?|min|minutes?)\b")
_HEREDOC = re.compile(r"(?<!<)<<-?\s*['\"]?(\w+)['\"]?(?!<)")  # not a <<< here-string
_TAKES = re.compile(r"\btakes about (\d+(?:\.\d+)?) ?(s|sec|seconds?|min|minutes?)\b")


@dataclass(frozen=True)
class Command:
    """One shell command of the docs: where it is, its text (continuation lines joined as written), and the
    duration the docs state for it (None when they state none)."""

    source: str  # "README.md:277"
    text: str
    block: int  # index of its block in its file
    prose: str = ""  # the paragraph just before its block, when the block is this one command

    @property
    def stated_seconds(self) -> float | None:
        """The duration stated for the command: by its own comment ("# about 20 s"), else by the paragraph just
        before a block of this one command ("... takes about 2 min:"), in seconds."""
        comment = self.text.partition(" #")[2]
        match = _DURATION.search(comment) or _TAKES.search(self.prose)
        if match is None:
            return None
        return float(match.group(1)) * (60.0 if match.group(2).startswith("min") else 1.0)


def documented_files() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def shell_blocks(path: Path) -> list[tuple[int, str, str]]:
    """The fenced shell blocks of a Markdown file: (line of the first command, body, the paragraph just before
    the fence)."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```(\w+)[^\n]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL):
        if match.group(1).lower() in SHELL_LANGUAGES:
            paragraph = text[: match.start()].rstrip().rpartition("\n\n")[2]
            blocks.append((text.count("\n", 0, match.start(2)) + 1, match.group(2), " ".join(paragraph.split())))
    return blocks


def _complete(text: str) -> bool:
    """Whether ``text`` is a whole command: no trailing backslash, every quote closed, every here-document
    (``<<EOF`` ... ``EOF``) ended."""
    if text.rstrip().endswith("\\"):
        return False
    lines = text.splitlines()
    for index, line in enumerate(lines):
        for delimiter in _HEREDOC.findall(line):
            if delimiter not in (other.strip() for other in lines[index + 1 :]):
                return False
    if _HEREDOC.search(text):
        return True  # shlex cannot read a here-document's body; its end was found
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def split_commands(body: str) -> list[tuple[int, str]]:
    """A block's commands, each with its line offset in the block: a line continues the command before it while
    that one ends in a backslash or has an open quote. A ``$ `` prompt (console blocks) is dropped; console
    output lines (no prompt in a block that has prompts) and comment-only lines are not commands."""
    lines = body.splitlines()
    prompted = any(line.startswith("$ ") for line in lines)
    commands: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for offset, line in enumerate(lines):
        if not current:
            if prompted:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = offset
        current.append(line)
        joined = "\n".join(current)
        if _complete(joined):
            commands.append((start, joined))
            current = []
    if current:
        commands.append((start, "\n".join(current)))
    return commands


def documented_commands() -> list[Command]:
    found = []
    for path in documented_files():
        for index, (line, body, paragraph) in enumerate(shell_blocks(path)):
            commands = split_commands(body)
            prose = paragraph if len(commands) == 1 else ""
            for offset, text in commands:
                found.append(Command(f"{path.relative_to(REPO)}:{line + offset}", text, index, prose))
    return found


def not_run_reason(command: Command) -> str | None:
    """The allow-list's reason when the command does not run in the test, else None."""
    for pattern, reason in NOT_RUN:
        if re.match(pattern, command.text.lstrip()):
            return reason
    return None


# ------------------------------------------------------------------------------------------------ parsing
def test_the_docs_hold_shell_commands_that_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Also prints which commands the run test leaves out and why (shown whatever pytest captures)."""
    commands = documented_commands()
    left_out = [(command, reason) for command in commands if (reason := not_run_reason(command)) is not None]
    with capsys.disabled():
        print(f"\n{len(commands) - len(left_out)} documented commands run, {len(left_out)} left out:")
        for command, reason in left_out:
            print(f"  {command.source}: {command.text.splitlines()[0][:70]!r}: {reason}")
    assert len(commands) - len(left_out) >= 5, [command.source for command in commands]


def test_split_commands_joins_continuations_and_reads_prompts() -> None:
    body = 'curl -s a \\\n  -d \'{"x": 1,\n   "y": 2}\'\n# a comment\nls -l   # lists\n'
    assert split_commands(body) == [(0, 'curl -s a \\\n  -d \'{"x": 1,\n   "y": 2}\''), (4, "ls -l   # lists")]
    heredoc = 'cat > spec.json <<\'EOF\'\n{"a": "it\'s"}\nEOF\necho done\n'
    assert split_commands(heredoc) == [(0, 'cat > spec.json <<\'EOF\'\n{"a": "it\'s"}\nEOF'), (3, "echo done")]
    console = "$ posenc-client methods\nname  kind\n$ echo done\ndone\n"
    assert split_commands(console) == [(0, "posenc-client methods"), (2, "echo done")]


def test_a_stated_duration_is_read_from_the_comment_or_the_paragraph_before() -> None:
    assert Command("x:1", "run thing   # about 50 s on 2 cores", 0).stated_seconds == 50.0
    assert Command("x:1", "run thing   # takes about 2 min", 0).stated_seconds == 120.0
    assert Command("x:1", "curl -d 'about 5 s'", 0).stated_seconds is None
    assert Command("x:1", "run it", 0, "A small benchmark (it takes about 40 s on 2 cores):").stated_seconds == 40.0
    assert Command("x:1", "run it", 0, "Each job is about 3 s slower.").stated_seconds is None


def test_blocks_carry_the_paragraph_before_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("Intro.\n\nThe benchmark\ntakes about 1 min:\n\n```bash\nposenc-client jobs list\n```\n")
    ((line, body, paragraph),) = shell_blocks(page)
    assert (line, body) == (7, "posenc-client jobs list\n")
    assert paragraph == "The benchmark takes about 1 min:"


# ------------------------------------------------------------------------------------------------ running
@pytest.fixture
def mirror_root(tmp_path: Path) -> Path:
    """A directory whose entries link to the repository root's, so relative paths resolve as from the root
    while the files commands write stay in the test's directory."""
    root = tmp_path / "root"
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in {".git"}:
            (root / entry.name).symlink_to(entry)
    return root


@dataclass
class Outcome:
    command: Command
    returncode: int
    seconds: float


def _script(commands: list[Command], address: str, marks: Path) -> str:
    """One bash script running ``commands`` in order; after each it appends "index status start end" to ``marks``."""
    lines = ["set -o pipefail"]
    for index, command in enumerate(commands):
        text = command.text
        for documented in DOCUMENTED_ADDRESSES:
            text = text.replace(documented, address)
        lines += [
            "__start=$EPOCHREALTIME",
            text,
            f'__rc=$?; echo "{index} $__rc $__start $EPOCHREALTIME" >> {shlex.quote(str(marks))}',
        ]
    return "\n".join(lines) + "\n"


def run_block(commands: list[Command], address: str, cwd: Path, env: dict[str, str]) -> tuple[list[Outcome], str]:
    """Runs one block's commands in one bash process; returns each command's outcome and the output's tail."""
    marks = cwd.parent / f"marks-{commands[0].source.replace('/', '_')}"
    script = cwd.parent / f"block-{commands[0].source.replace('/', '_')}.sh"
    script.write_text(_script(commands, address, marks))
    result = subprocess.run(
        ["bash", str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S * len(commands),
        check=False,
    )
    outcomes = []
    for line in marks.read_text().splitlines() if marks.exists() else []:
        index, returncode, start, end = line.split()
        outcomes.append(Outcome(commands[int(index)], int(returncode), float(end) - float(start)))
    return outcomes, (result.stdout[-1500:] + "\n" + result.stderr[-1500:]).strip()


def _blocks_to_run(path: Path) -> Iterator[list[Command]]:
    source = str(path.relative_to(REPO))
    by_block: dict[int, list[Command]] = {}
    for command in documented_commands():
        if command.source.rsplit(":", 1)[0] == source and not_run_reason(command) is None:
            by_block.setdefault(command.block, []).append(command)
    yield from by_block.values()


def files_with_runnable_commands() -> list[Path]:
    return [path for path in documented_files() if any(_blocks_to_run(path))]


@pytest.mark.parametrize("path", files_with_runnable_commands(), ids=lambda path: path.name)
def test_documented_commands_exit_zero(
    path: Path,
    start_gateway: Callable[..., Any],
    start_worker: Callable[..., Any],
    job_env: dict[str, str],
    mirror_root: Path,
) -> None:
    blocks = list(_blocks_to_run(path))
    gateway = start_gateway()
    start_worker()
    env = job_env | {
        "POSENC_BASE_URL": gateway.url,
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{job_env.get('PATH', os.defpath)}",
    }
    failures: list[str] = []
    outputs: list[str] = []
    for commands in blocks:
        outcomes, output = run_block(commands, gateway.url, mirror_root, env)
        found = _block_failures(commands, outcomes)
        failures += found
        if found:
            outputs.append(f"--- the output of the block at {commands[0].source} (its last lines):\n{output}")
    assert not failures, "\n".join(failures) + "\n\n" + "\n".join(outputs) + f"\n\ngateway log:\n{gateway.tail(1500)}"


def _block_failures(commands: list[Command], outcomes: list[Outcome]) -> list[str]:
    """One line per command of the block that did not run, exited non-zero, or missed its stated duration."""
    ran = {outcome.command for outcome in outcomes}
    failures = [
        f"{command.source}: did not run (the block stopped before it)" for command in commands if command not in ran
    ]
    for outcome in outcomes:
        head = f"{outcome.command.source}: {outcome.command.text.splitlines()[0][:80]!r}"
        if outcome.returncode != 0:
            failures.append(f"{head} exited {outcome.returncode}")
        stated = outcome.command.stated_seconds
        if stated is not None and not 0.5 * stated <= outcome.seconds <= 2.0 * stated:
            failures.append(f"{head} took {outcome.seconds:.1f} s; the docs say about {stated:g} s")
    return failures
