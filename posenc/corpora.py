"""Which corpus a job may train on: a registered name, or a text file under the configured data directories.

A job spec names its corpus in ``data.corpus``. Without a confinement rule any file the worker can read would
be trained on and its characters written to ``model.json`` (``/etc/passwd`` was), and an error saying "no file
at ..." would tell a caller which paths exist. So:

- ``stdlib`` and ``tinyshakespeare`` are registered names (``tinyshakespeare`` is ``tinyshakespeare.txt`` in a
  data directory);
- anything else is a file name resolved inside the data directories (``POSENC_DATA_DIR``, then each of
  ``POSENC_DATA_DIRS``): ``mytext.txt`` and ``sub/a.txt`` are looked up in each in turn, an absolute path is
  accepted only if it lies in one. Both the directories and the candidate are resolved (``Path.resolve``) before
  the containment test, so neither ``..`` nor a symlink can leave a directory;
- everything else (outside, missing, a directory, a name the OS rejects) is one and the same error,
  :data:`CORPUS_RULE`, which says nothing about the path.

The gateway checks a spec with :func:`check_corpus` before queueing (``posenc.jobspec``); the worker checks it
again with its own settings and opens the file :func:`corpus_file` returns (``posenc.training.data``): in docker
compose the two are different hosts with different mounts. Torch-free, so the gateway may import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from posenc.errors import InvalidInput
from posenc.settings import Settings, get_settings

STDLIB = "stdlib"
TINYSHAKESPEARE = "tinyshakespeare"
REGISTERED_CORPORA = (STDLIB, TINYSHAKESPEARE)
TINYSHAKESPEARE_FILE = "tinyshakespeare.txt"
# Linux's PATH_MAX: no longer name is a file, and resolving one costs time quadratic in its length.
MAX_NAME_CHARS = 4096

CORPUS_LOC = ("body", "spec", "data", "corpus")
CORPUS_RULE = (
    "corpus must be 'stdlib', 'tinyshakespeare' or a text file under the data directories "
    "(POSENC_DATA_DIR, POSENC_DATA_DIRS)"
)
TINYSHAKESPEARE_MISSING = (
    f"corpus 'tinyshakespeare' needs {TINYSHAKESPEARE_FILE} in a data directory (POSENC_DATA_DIR, POSENC_DATA_DIRS)"
)


def data_directories(settings: Settings | None = None, *, data_dir: Path | None = None) -> list[Path]:
    """The directories corpora may come from, in lookup order: ``data_dir`` (default ``settings.data_dir``),
    then ``settings.data_dirs``. ``settings`` defaults to this process's own (``get_settings()``): the gateway
    passes its app settings, a worker uses the ones it was started with."""
    chosen = settings if settings is not None else get_settings()
    first = data_dir if data_dir is not None else chosen.data_dir
    return [*([first] if first is not None else []), *chosen.data_dirs]


def confined_file(name: str, directories: Sequence[Path]) -> Path | None:
    """The resolved regular file ``name`` names inside one of ``directories`` (first match), else None.

    ``directory / name`` is ``name`` itself when ``name`` is absolute, so relative and absolute names take the
    same path: resolve (symlinks and ``..`` followed), then require the result to lie in the resolved directory.
    Errors the OS raises for odd names (NUL bytes, names too long, loops) count as "not there"; a name longer
    than any path is refused before any file system call.
    """
    if len(name) > MAX_NAME_CHARS:
        return None
    for directory in directories:
        try:
            root = directory.expanduser().resolve()
            candidate = (root / name).resolve()
            if candidate.is_relative_to(root) and candidate.is_file():
                return candidate
        except (OSError, ValueError, RuntimeError):
            continue
    return None


def check_corpus(name: str, directories: Sequence[Path]) -> None:
    """The submission check: a registered name, or a file under ``directories``; else :data:`CORPUS_RULE`.

    A registered name is not looked up here: ``tinyshakespeare`` lives with the workers, which may be other
    hosts than the gateway; :func:`corpus_file` finds it (or says it is missing) when the job runs.
    """
    if name in REGISTERED_CORPORA:
        return
    if confined_file(name, directories) is None:
        raise InvalidInput(CORPUS_LOC, CORPUS_RULE)


def corpus_file(name: str, directories: Sequence[Path]) -> Path | None:
    """The file to read for a corpus: None for the built-in ``stdlib``; raises InvalidInput when none is allowed.

    A missing ``tinyshakespeare.txt`` has its own message (it names the setting to fix, and reveals nothing a
    caller chose); every other refusal is :data:`CORPUS_RULE`.
    """
    if name == STDLIB:
        return None
    if name == TINYSHAKESPEARE:
        found = confined_file(TINYSHAKESPEARE_FILE, directories)
        if found is None:
            raise InvalidInput(CORPUS_LOC, TINYSHAKESPEARE_MISSING)
        return found
    found = confined_file(name, directories)
    if found is None:
        raise InvalidInput(CORPUS_LOC, CORPUS_RULE)
    return found
