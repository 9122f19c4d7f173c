"""No tracked text file points at something a reader of the repository cannot open: an issue tracker's number
(the word issue followed by a number), a reference sheet kept outside the repository, or a directory beside
the checkout.
Text in the repository has to stand on its own: it carries the fact, not a pointer to where the fact was found."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        [
            r"issue[s]? ?#?[0-9]",
            r"method" + r"s\.md",
            r"evaluation" + r"\.md",
            r"\.\./" + "shared",
            r"/work/" + "shared",
        ]
    ),
    re.IGNORECASE,
)
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".txt",
    ".toml",
    ".yml",
    ".yaml",
    ".json",
    ".js",
    ".html",
    ".css",
    ".cfg",
    ".ini",
    ".sh",
    ".pyi",
}
TEXT_NAMES = {"Makefile", "Dockerfile", "run", ".gitignore", ".dockerignore"}


def tracked_text_files() -> list[Path]:
    """Every text file git tracks, or would track (new files not ignored count too)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
    ).stdout.split("\0")
    paths = [ROOT / name for name in listed if name]
    return [p for p in paths if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name in TEXT_NAMES)]


def outside_references(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line that points outside the repository."""
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def test_the_pattern_catches_each_kind_of_pointer() -> None:
    pointers = [
        "see iss" + "ue 21",
        "(iss" + "ues #7 and 8)",
        "as method" + "s.md B11 says",
        "evaluation" + ".md §2.4",
        "--data-dir ../" + "shared/data",
        "/work/" + "shared/reference",
    ]
    for line in pointers:
        assert outside_references(line) == [(1, line)]
    assert outside_references("the issue is that\nmethods/index.md\nshared memory") == []


def test_no_tracked_text_file_points_outside_the_repository() -> None:
    files = tracked_text_files()
    assert any(path.name == "README.md" for path in files)
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(ROOT)}:{number}: {line[:120]}" for number, line in outside_references(text)]
    assert found == [], "references to things outside the repository:\n" + "\n".join(found)
