"""Training data: character-level corpora, and token-task instances padded into batches, as int64 token ids.

Corpora (``load_corpus_text``):
    ``"stdlib"``           an offline code corpus built from this interpreter's own standard-library
                           ``.py`` sources (sorted relative paths, ASCII-only files, no tests, up to
                           ``STDLIB_CORPUS_CHARS`` characters), cached as a text file per Python version;
    ``"tinyshakespeare"``  ``tinyshakespeare.txt`` in a data directory (karpathy/char-rnn, 1,115,394 bytes);
    anything else          a UTF-8 text file under the data directories: a name relative to them
                           (``mytext.txt``, ``sub/a.txt``) or an absolute path inside one.
The data directories are ``POSENC_DATA_DIR`` (or the ``data_dir`` argument) then ``POSENC_DATA_DIRS``; no file
outside them is read, whatever symlinks or ``..`` a name holds (``posenc.corpora``, which the gateway also
runs at submission: the worker checks again with its own settings, as it may be another host).
The vocabulary is the sorted set of distinct characters; the split is nanoGPT's: the first
``1 - val_fraction`` of the text trains, the rest validates.

Token tasks (synthetic sequence tasks, probes): their instances come from their task family
(``posenc.tasks``); ``token_batch`` pads a list of them into one batch, ``BOS prompt SEP target EOS`` with the
loss on the target and EOS.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from posenc.corpora import corpus_file, data_directories
from posenc.errors import InvalidInput
from posenc.files import write_text_atomic
from posenc.tasks.base import BOS, EOS, PAD, SEP, Instance

STDLIB_CORPUS_CHARS = 3_000_000  # a few MB: enough for 1000s of steps at B=32, T=128 without repeating much
_STDLIB_SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"})


# ------------------------------------------------------------------------------------------------ corpora
def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/posenc`` (or ``~/.cache/posenc``): where derived corpora are kept between runs."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "posenc"


def stdlib_sources() -> list[Path]:
    """The standard-library ``.py`` files of the corpus, in their fixed order (sorted relative POSIX paths).

    Test suites and installed third-party packages are skipped so the corpus is the library itself.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        path for path in root.rglob("*.py") if not _STDLIB_SKIPPED_DIRS.intersection(path.relative_to(root).parts[:-1])
    ]
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def build_stdlib_corpus(max_chars: int | None = None) -> str:
    """Concatenate ASCII-only standard-library sources in ``stdlib_sources`` order until ``max_chars``.

    Files with any non-ASCII character are left out so the vocabulary stays small (about 100 symbols) and
    the same on every platform; the last file is cut so the corpus is exactly ``max_chars`` when enough exist.
    """
    limit = max_chars if max_chars is not None else STDLIB_CORPUS_CHARS
    pieces: list[str] = []
    total = 0
    for path in stdlib_sources():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.isascii():
            continue
        text = text.replace("\r\n", "\n")
        pieces.append(text[: limit - total])
        total += len(pieces[-1])
        if total >= limit:
            break
    return "".join(pieces)


def stdlib_corpus(cache_dir: Path | None = None) -> str:
    """The stdlib corpus, built once per Python version and cached under ``cache_dir``."""
    directory = cache_dir if cache_dir is not None else default_cache_dir()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    cached = directory / f"stdlib-corpus-py{version}-{STDLIB_CORPUS_CHARS}.txt"
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    text = build_stdlib_corpus(STDLIB_CORPUS_CHARS)
    write_text_atomic(cached, text)
    return text


def corpus_directories(data_dir: Path | None) -> list[Path]:
    """Where corpus files may be read from: ``data_dir`` (default ``POSENC_DATA_DIR``), then ``POSENC_DATA_DIRS``.

    Read from this process's settings, so a worker confines jobs by its own configuration, not the gateway's.
    """
    return data_directories(data_dir=data_dir)


def corpus_path(name: str, data_dir: Path | None) -> Path | None:
    """The file a corpus is read from: None for the built-in ``stdlib``. Anything that is not a registered name
    or a text file under the data directories raises InvalidInput with one message that does not say whether
    the path exists (``posenc.corpora``)."""
    return corpus_file(name, corpus_directories(data_dir))


def load_corpus_text(name: str, data_dir: Path | None = None, cache_dir: Path | None = None) -> str:
    """The raw text of a corpus by registered name or data-directory file (see the module docstring)."""
    path = corpus_path(name, data_dir)
    if path is None:
        return stdlib_corpus(cache_dir)
    return path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class CharCorpus:
    """A character-level corpus: vocabulary and the train/validation token ids (int64, 1D)."""

    vocab: tuple[str, ...]
    train: torch.Tensor  # (N_train,) int64
    val: torch.Tensor  # (N_val,) int64

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)


def encode(text: str, vocab: Sequence[str]) -> torch.Tensor:
    """Characters -> int64 ids (N,); raises InvalidInput on a character outside ``vocab``."""
    index = {char: i for i, char in enumerate(vocab)}
    try:
        return torch.tensor([index[char] for char in text], dtype=torch.int64)
    except KeyError as exc:
        raise InvalidInput(("body", "spec", "data"), f"character {exc.args[0]!r} is not in the vocabulary") from None


def char_corpus(text: str, val_fraction: float = 0.1, vocab: Sequence[str] | None = None) -> CharCorpus:
    """Split ``text`` nanoGPT-style (train first); encode with ``vocab`` (default: its sorted characters)."""
    chosen = tuple(vocab) if vocab is not None else tuple(sorted(set(text)))
    ids = encode(text, chosen)
    split = int(len(ids) * (1.0 - val_fraction))
    return CharCorpus(vocab=chosen, train=ids[:split], val=ids[split:])


def text_batch(
    ids: torch.Tensor, length: int, batch_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: inputs and next-character targets, each (B, T) int64, starts from ``generator``."""
    if len(ids) < length + 1:
        raise InvalidInput(("body", "spec", "train", "length"), f"corpus split of {len(ids)} chars < length + 1")
    starts = torch.randint(0, len(ids) - length, (batch_size,), generator=generator)  # (B,)
    windows = ids[starts[:, None] + torch.arange(length + 1)[None, :]]  # (B, T + 1)
    return windows[:, :-1], windows[:, 1:]


# -------------------------------------------------------------------------------------------- token tasks
@dataclass(frozen=True)
class TokenBatch:
    """Inputs, next-token targets and the loss mask (True on target tokens and EOS), each (B, T); ``starts``
    (B,) the input position that predicts each row's first target token (its SEP)."""

    inputs: torch.Tensor  # (B, T) int64
    targets: torch.Tensor  # (B, T) int64
    loss_mask: torch.Tensor  # (B, T) bool
    starts: list[int]


def token_batch(instances: Sequence[Instance]) -> TokenBatch:
    """One padded batch, one row per instance: ``BOS prompt SEP target EOS``, PAD after EOS, never scored."""
    sequences = [[BOS, *item.prompt, SEP, *item.target, EOS] for item in instances]
    width = max(len(sequence) for sequence in sequences) - 1
    inputs = torch.full((len(sequences), width), PAD, dtype=torch.int64)  # (B, T)
    targets = torch.full((len(sequences), width), PAD, dtype=torch.int64)  # (B, T)
    loss_mask = torch.zeros((len(sequences), width), dtype=torch.bool)  # (B, T)
    starts = []
    for row, (sequence, item) in enumerate(zip(sequences, instances, strict=True)):
        ids = torch.tensor(sequence, dtype=torch.int64)
        inputs[row, : len(ids) - 1] = ids[:-1]
        targets[row, : len(ids) - 1] = ids[1:]
        start = len(item.prompt) + 1  # input position p (SEP) predicts the first target token
        loss_mask[row, start : len(ids) - 1] = True
        starts.append(start)
    return TokenBatch(inputs=inputs, targets=targets, loss_mask=loss_mask, starts=starts)
