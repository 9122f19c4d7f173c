"""Shared fixtures of the training tests: a configured data directory holding a small text corpus, recording
hooks, the shared data directory when the checkout has one beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from posenc.settings import get_settings
from posenc.training.hooks import Progress

REPO_ROOT = Path(__file__).resolve().parents[3]


class RecordingHooks:
    """Records every progress report; cancels once ``cancel_after`` steps have been reported."""

    def __init__(self, cancel_after: int | None = None) -> None:
        self.reports: list[Progress] = []
        self.notes: list[str] = []
        self.cancel_after = cancel_after
        self.cancel_checks = 0

    def progress(self, progress: Progress) -> None:
        self.reports.append(progress)

    def should_cancel(self) -> bool:
        self.cancel_checks += 1
        return self.cancel_after is not None and len(self.reports) >= self.cancel_after

    def note(self, message: str) -> None:
        self.notes.append(message)


@pytest.fixture
def hooks() -> RecordingHooks:
    return RecordingHooks()


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's ``POSENC_DATA_DIR``, as a worker has one: jobs read corpus files from nowhere else."""
    directory = tmp_path / "data"
    directory.mkdir()
    monkeypatch.setenv("POSENC_DATA_DIR", str(directory))
    monkeypatch.delenv("POSENC_DATA_DIRS", raising=False)
    get_settings.cache_clear()
    yield directory
    get_settings.cache_clear()


@pytest.fixture
def text_file(data_dir: Path) -> Path:
    """About 20 kB of repetitive but not periodic text (so windows differ and a model can learn a little), in
    the data directory."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "away"]
    lines = [" ".join(words[(i * j + j) % len(words)] for j in range(1, 9)) for i in range(400)]
    path = data_dir / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def shared_data_dir() -> Path | None:
    """The ``shared/data`` directory beside the checkout when it holds the real tinyshakespeare.txt, else None: a fresh
    clone has no such directory, so no test may need it."""
    directory = (REPO_ROOT / ".." / "shared" / "data").resolve()
    return directory if (directory / "tinyshakespeare.txt").is_file() else None
