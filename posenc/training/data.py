"""Training data: character-level corpora and synthetic sequence tasks, both as int64 token ids.

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

Synthetic tasks (``TaskSpec``): one token per symbol, ``BOS prompt SEP target EOS``, loss on target tokens
(and EOS) only; each task has its own vocabulary, the four specials first (``task_vocab``). The task *size* n
and the formats, with the sequence length (its maximum over instances of size n is ``task_sequence_length``):
    copy            BOS x1 .. xn SEP x1 .. xn EOS                  2n + 3          NoPE (Kazemnejad et al. 2023)
    reverse         BOS x1 .. xn SEP xn .. x1 EOS                  2n + 3          NoPE
    addition        BOS a1..an + b1..bn SEP s1..sm EOS             3n + 4 + m      NoPE; m ∈ {n, n + 1}
    selective_copy  BOS y1 .. y2n SEP x1 .. xn EOS                 3n + 3          CoPE (Golovneva et al. 2024)
    counting        BOS x1 .. xn q SEP c1..cm EOS                  n + 4 + m       CoPE; m ≤ digits of n
    flip_flop       BOS o1 b1 .. on bn SEP b EOS                   2n + 4          CoPE / Liu et al. 2023
    parity          BOS b1 .. bn SEP Y|N EOS                       n + 4           NoPE
    sort            BOS d1 .. dn SEP sorted(d) EOS                 2n + 3          NoPE (single-token sort)
copy/reverse: x uniform over a 20-letter alphabet. addition: a, b uniform n-digit numbers (0 allowed when
n = 1), the sum most significant digit first. selective_copy: the n letters x (20-letter alphabet) in order at
n positions chosen uniformly among 2n, the other n positions the noise token ``.``; the target is the letters
without the noise. counting: x over the letters ``abcde``, query q uniform over them, the count c = #{i: xi = q}
drawn U(0..n) (then its positions uniformly, the other tokens uniform over the 4 other letters), written in
decimal most significant digit first. flip_flop: Liu et al.'s FFL(0.8): instruction o1 = ``w``, later ones
``w`` (write) / ``r`` (read) / ``i`` (ignore) with probabilities 0.1 / 0.1 / 0.8, bits uniform for w and i,
a read's bit is the last written bit; the target is the last written bit (a final read). parity: bits uniform,
target ``Y`` if the number of 1s is even, else ``N``. sort: digits 0..9 uniform, target ascending.
Training draws n ~ U(1..n_train) per example, where n_train is the largest size whose longest sequence fits
the training length L (``max_task_size``); evaluation sizes are ``spec.eval.lengths`` read as task sizes,
default [n, 2n, 4n, 8n] with n = n_train.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from posenc.corpora import corpus_file, data_directories
from posenc.errors import InvalidInput

TaskName = Literal["copy", "reverse", "addition", "selective_copy", "counting", "flip_flop", "parity", "sort"]

STDLIB_CORPUS_CHARS = 3_000_000  # a few MB: enough for 1000s of steps at B=32, T=128 without repeating much
_STDLIB_SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"})

PAD, BOS, SEP, EOS = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<bos>", "<sep>", "<eos>")
COPY_ALPHABET = "abcdefghijklmnopqrst"  # 20 symbols (evaluation.md §2.4)
DIGITS = "0123456789"
ADDITION_SYMBOLS = DIGITS + "+"
NOISE = "."  # selective_copy's blank token
COUNT_ALPHABET = "abcde"  # counting: 5 symbols, as CoPE's largest program (nvars = 5)
FLIP_FLOP_WRITE_READ = (0.1, 0.1)  # FFL(0.8): P(w), P(r); P(i) = 0.8
TASK_SYMBOLS: dict[str, str] = {  # one token per character, after the specials
    "copy": COPY_ALPHABET,
    "reverse": COPY_ALPHABET,
    "addition": ADDITION_SYMBOLS,
    "selective_copy": COPY_ALPHABET + NOISE,
    "counting": COUNT_ALPHABET + DIGITS,
    "flip_flop": "wir01",
    "parity": "01YN",
    "sort": DIGITS,
}


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
    directory.mkdir(parents=True, exist_ok=True)
    temporary = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, cached)
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


# -------------------------------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class TaskBatch:
    """Inputs, next-token targets and the loss mask (True on target tokens and EOS), each (B, T)."""

    inputs: torch.Tensor  # (B, T) int64
    targets: torch.Tensor  # (B, T) int64
    loss_mask: torch.Tensor  # (B, T) bool


def task_vocab(task: TaskName) -> tuple[str, ...]:
    """Token strings of a task: the four specials, then its symbols."""
    return (*SPECIAL_TOKENS, *TASK_SYMBOLS[task])


def _task_example(task: TaskName, size: int, generator: torch.Generator) -> tuple[list[int], list[int]]:
    """(prompt ids, target ids) of one instance; ids index ``task_vocab(task)``."""
    prompt, target = _TASK_TEXT[task](size, generator)
    index = _TASK_INDEX[task]
    return [index[c] for c in prompt], [index[c] for c in target]


def _uniform(alphabet: str, size: int, generator: torch.Generator) -> str:
    """``size`` symbols drawn uniformly from ``alphabet``."""
    return "".join(alphabet[i] for i in torch.randint(0, len(alphabet), (size,), generator=generator).tolist())


def _copy_text(size: int, generator: torch.Generator) -> tuple[str, str]:
    symbols = _uniform(COPY_ALPHABET, size, generator)
    return symbols, symbols


def _reverse_text(size: int, generator: torch.Generator) -> tuple[str, str]:
    symbols = _uniform(COPY_ALPHABET, size, generator)
    return symbols, symbols[::-1]


def _addition_text(size: int, generator: torch.Generator) -> tuple[str, str]:
    left, right = (_random_digits(size, generator) for _ in range(2))
    return f"{left}+{right}", str(int(left) + int(right))


def _selective_copy_text(size: int, generator: torch.Generator) -> tuple[str, str]:
    """n letters kept in order at n of 2n positions (uniform subset), noise elsewhere."""
    letters = _uniform(COPY_ALPHABET, size, generator)
    kept = sorted(torch.randperm(2 * size, generator=generator)[:size].tolist())
    sequence = [NOISE] * (2 * size)
    for position, letter in zip(kept, letters, strict=True):
        sequence[position] = letter
    return "".join(sequence), letters


def _counting_text(size: int, generator: torch.Generator) -> tuple[str, str]:
    """n letters and a query letter q; the count of q is U(0..n), so every answer length occurs."""
    count = int(torch.randint(0, size + 1, (1,), generator=generator))
    query = COUNT_ALPHABET[int(torch.randint(0, len(COUNT_ALPHABET), (1,), generator=generator))]
    others = COUNT_ALPHABET.replace(query, "")
    sequence = list(_uniform(others, size, generator))
    for position in torch.randperm(size, generator=generator)[:count].tolist():
        sequence[position] = query
    return "".join(sequence) + query, str(count)


def _flip_flop_text(size: int, generator: torch.Generator) -> tuple[str, str]:
    """n (instruction, bit) pairs of FFL(0.8), the first a write; the answer is the last written bit."""
    draws = torch.rand(size, generator=generator).tolist()
    bits = _uniform("01", size, generator)
    write, read = FLIP_FLOP_WRITE_READ
    memory = bits[0]
    pieces = ["w", memory]
    for draw, bit in zip(draws[1:], bits[1:], strict=True):
        if draw < write:
            memory = bit
            pieces += ["w", bit]
        elif draw < write + read:
            pieces += ["r", memory]
        else:
            pieces += ["i", bit]
    return "".join(pieces), memory


def _parity_text(size: int, generator: torch.Generator) -> tuple[str, str]:
    bits = _uniform("01", size, generator)
    return bits, "Y" if bits.count("1") % 2 == 0 else "N"


def _sort_text(size: int, generator: torch.Generator) -> tuple[str, str]:
    digits = _uniform(DIGITS, size, generator)
    return digits, "".join(sorted(digits))


_TASK_TEXT: dict[str, Callable[[int, torch.Generator], tuple[str, str]]] = {
    "copy": _copy_text,
    "reverse": _reverse_text,
    "addition": _addition_text,
    "selective_copy": _selective_copy_text,
    "counting": _counting_text,
    "flip_flop": _flip_flop_text,
    "parity": _parity_text,
    "sort": _sort_text,
}

_TASK_INDEX = {
    task: {symbol: i for i, symbol in enumerate(SPECIAL_TOKENS + tuple(symbols))}
    for task, symbols in TASK_SYMBOLS.items()
}


def _random_digits(size: int, generator: torch.Generator) -> str:
    """A uniform n-digit number as text: no leading zero unless n = 1 (then 0..9)."""
    digits = torch.randint(0, 10, (size,), generator=generator)  # (n,)
    if size > 1:
        digits[0] = torch.randint(1, 10, (1,), generator=generator)
    return "".join(str(int(d)) for d in digits)


def task_batch(task: TaskName, sizes: Sequence[int], generator: torch.Generator) -> TaskBatch:
    """One padded batch with one instance per entry of ``sizes``; PAD after EOS, never scored."""
    sequences: list[list[int]] = []
    target_starts: list[int] = []
    for size in sizes:
        prompt, target = _task_example(task, size, generator)
        sequences.append([BOS, *prompt, SEP, *target, EOS])
        target_starts.append(len(prompt) + 2)  # index in the sequence of the first target token
    width = max(len(sequence) for sequence in sequences) - 1
    inputs = torch.full((len(sequences), width), PAD, dtype=torch.int64)  # (B, T)
    targets = torch.full((len(sequences), width), PAD, dtype=torch.int64)  # (B, T)
    loss_mask = torch.zeros((len(sequences), width), dtype=torch.bool)  # (B, T)
    for row, (sequence, start) in enumerate(zip(sequences, target_starts, strict=True)):
        ids = torch.tensor(sequence, dtype=torch.int64)
        inputs[row, : len(ids) - 1] = ids[:-1]
        targets[row, : len(ids) - 1] = ids[1:]
        loss_mask[row, start - 1 : len(ids) - 1] = True  # input position p predicts sequence token p + 1
    return TaskBatch(inputs=inputs, targets=targets, loss_mask=loss_mask)


def task_train_batch(task: TaskName, max_size: int, batch_size: int, generator: torch.Generator) -> TaskBatch:
    """A training batch: sizes n ~ U(1..max_size) per example."""
    sizes = torch.randint(1, max_size + 1, (batch_size,), generator=generator).tolist()
    return task_batch(task, sizes, generator)
