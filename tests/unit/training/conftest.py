"""Shared fixtures of the training tests: a small text corpus, recording hooks, the shared data directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from posenc.training.hooks import Progress

REPO_ROOT = Path(__file__).resolve().parents[3]


class RecordingHooks:
    """Records every progress report; cancels once ``cancel_after`` steps have been reported."""

    def __init__(self, cancel_after: int | None = None) -> None:
        self.reports: list[Progress] = []
        self.cancel_after = cancel_after
        self.cancel_checks = 0

    def progress(self, progress: Progress) -> None:
        self.reports.append(progress)

    def should_cancel(self) -> bool:
        self.cancel_checks += 1
        return self.cancel_after is not None and len(self.reports) >= self.cancel_after


@pytest.fixture
def hooks() -> RecordingHooks:
    return RecordingHooks()


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    """About 20 kB of repetitive but not periodic text (so windows differ and a model can learn a little)."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "away"]
    lines = [" ".join(words[(i * j + j) % len(words)] for j in range(1, 9)) for i in range(400)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def shared_data_dir() -> Path:
    """``$POSENC_DATA_DIR`` or ``../shared/data`` from the repository root (holds tinyshakespeare.txt)."""
    from_env = os.environ.get("POSENC_DATA_DIR")
    return Path(from_env) if from_env else (REPO_ROOT / ".." / "shared" / "data").resolve()
