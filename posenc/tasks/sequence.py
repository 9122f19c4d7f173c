"""Synthetic sequence tasks (the NoPE paper's and CoPE's): one table of formats, read by the spec checks, the
cost and the generation alike.

Unit: items (a task's size n: symbols to copy, digits per operand, bits, ...). A spec gives the largest training
size as ``data.size`` (training draws n ~ U(1..size) per example) and the evaluation sizes as ``eval.sizes``,
default every size from 1 to 2·size, then 3·size and 4·size. One token per symbol, ``BOS prompt SEP target EOS``,
the loss on the target (and EOS) only; scored by greedy exact match (teacher-forced argmax at every target token:
a greedy decode reproduces the target iff every one is right) and per-token accuracy.

Formats (``FORMATS``; n the size, the longest sequence in tokens, and the source):

    copy            BOS x1 .. xn SEP x1 .. xn EOS            2n + 3      NoPE ``cmc`` (multi-char copy)
    copy_single     BOS a .. a SEP a .. a EOS                2n + 3      NoPE ``rsc`` (repeat single char)
    copy_replace    BOS a b a .. a SEP b .. b EOS            2n + 5      NoPE ``rdc`` (replace a with b, n times)
    reverse         BOS x1 .. xn SEP xn .. x1 EOS            2n + 3      NoPE ``mc`` reverse
    addition        BOS a1..an + b1..bn SEP s1..sm EOS       3n + 5      NoPE addition; m in {n, n + 1}
    selective_copy  BOS y1 .. y2n SEP x1 .. xn EOS           3n + 3      CoPE selective copy
    counting        BOS x1 .. xn q SEP c1..cm EOS            n + 4 + m   CoPE counting; m = digits of the count
    flip_flop       BOS o1 b1 .. on bn SEP b EOS             2n + 4      Liu et al. 2023 FFL(0.8)
    parity          BOS b1 .. bn SEP Y|N EOS                 n + 4       NoPE parity
    sort            BOS d1 .. dn SEP sorted(d) EOS           2n + 3      NoPE single-token sort

copy, copy_replace, reverse: letters of a 20-letter alphabet (copy_replace's a != b). copy_single: one letter
repeated (pure counting). addition: uniform n-digit operands (0 allowed when n = 1), the sum most significant
digit first. selective_copy: the n letters in order at n of 2n uniformly chosen positions, the noise token ``.``
elsewhere. counting: letters of ``abcde``, the query q uniform, its count U(0..n). flip_flop: ``w``/``r``/``i``
with probabilities 0.1/0.1/0.8 after a first write, the answer the last written bit. parity: uniform bits,
``Y`` if the count of 1s is even. sort: uniform digits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from posenc.tasks.base import SPECIAL_TOKENS, Instance, TokenTask, index_of, uniform

LETTERS = "abcdefghijklmnopqrst"  # 20 symbols
DIGITS = "0123456789"
NOISE = "."
COUNT_LETTERS = "abcde"  # as CoPE's largest program (nvars = 5)
FLIP_FLOP_WRITE_READ = (0.1, 0.1)  # FFL(0.8): P(w), P(r); P(i) = 0.8
DEFAULT_SIZE = 10  # the tiny CPU version of the NoPE paper's L = 20
MAX_SIZE = 4096

Example = Callable[[int, torch.Generator], tuple[str, str]]


def _copy(size: int, generator: torch.Generator) -> tuple[str, str]:
    symbols = uniform(LETTERS, size, generator)
    return symbols, symbols


def _copy_single(size: int, generator: torch.Generator) -> tuple[str, str]:
    symbol = uniform(LETTERS, 1, generator)
    return symbol * size, symbol * size


def _copy_replace(size: int, generator: torch.Generator) -> tuple[str, str]:
    first = int(torch.randint(0, len(LETTERS), (1,), generator=generator))
    second = (first + int(torch.randint(1, len(LETTERS), (1,), generator=generator))) % len(LETTERS)
    old, new = LETTERS[first], LETTERS[second]
    return old + new + old * size, new * size


def _reverse(size: int, generator: torch.Generator) -> tuple[str, str]:
    symbols = uniform(LETTERS, size, generator)
    return symbols, symbols[::-1]


def _digits(size: int, generator: torch.Generator) -> str:
    """A uniform n-digit number as text: no leading zero unless n = 1 (then 0..9)."""
    digits = torch.randint(0, 10, (size,), generator=generator)  # (n,)
    if size > 1:
        digits[0] = torch.randint(1, 10, (1,), generator=generator)
    return "".join(str(int(d)) for d in digits)


def _addition(size: int, generator: torch.Generator) -> tuple[str, str]:
    left, right = _digits(size, generator), _digits(size, generator)
    return f"{left}+{right}", str(int(left) + int(right))


def _selective_copy(size: int, generator: torch.Generator) -> tuple[str, str]:
    letters = uniform(LETTERS, size, generator)
    kept = sorted(torch.randperm(2 * size, generator=generator)[:size].tolist())
    sequence = [NOISE] * (2 * size)
    for position, letter in zip(kept, letters, strict=True):
        sequence[position] = letter
    return "".join(sequence), letters


def _counting(size: int, generator: torch.Generator) -> tuple[str, str]:
    count = int(torch.randint(0, size + 1, (1,), generator=generator))
    query = COUNT_LETTERS[int(torch.randint(0, len(COUNT_LETTERS), (1,), generator=generator))]
    sequence = list(uniform(COUNT_LETTERS.replace(query, ""), size, generator))
    for position in torch.randperm(size, generator=generator)[:count].tolist():
        sequence[position] = query
    return "".join(sequence) + query, str(count)


def _flip_flop(size: int, generator: torch.Generator) -> tuple[str, str]:
    draws = torch.rand(size, generator=generator).tolist()
    bits = uniform("01", size, generator)
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


def _parity(size: int, generator: torch.Generator) -> tuple[str, str]:
    bits = uniform("01", size, generator)
    return bits, "Y" if bits.count("1") % 2 == 0 else "N"


def _sort(size: int, generator: torch.Generator) -> tuple[str, str]:
    digits = uniform(DIGITS, size, generator)
    return digits, "".join(sorted(digits))


@dataclass(frozen=True)
class Format:
    """One task: its symbols (after the four specials), one example of size n, the longest ``BOS prompt SEP
    target EOS`` of size n in tokens, and where it comes from."""

    symbols: str
    example: Example
    longest: Callable[[int], int]
    source: str


FORMATS: dict[str, Format] = {
    "copy": Format(LETTERS, _copy, lambda n: 2 * n + 3, "NoPE paper cmc (multi-char copy)"),
    "copy_single": Format(LETTERS, _copy_single, lambda n: 2 * n + 3, "NoPE paper rsc (repeat single char)"),
    "copy_replace": Format(LETTERS, _copy_replace, lambda n: 2 * n + 5, "NoPE paper rdc (replace a with b)"),
    "reverse": Format(LETTERS, _reverse, lambda n: 2 * n + 3, "NoPE paper reverse (mc)"),
    "addition": Format(DIGITS + "+", _addition, lambda n: 3 * n + 5, "NoPE paper addition"),
    "selective_copy": Format(LETTERS + NOISE, _selective_copy, lambda n: 3 * n + 3, "CoPE selective copy"),
    "counting": Format(COUNT_LETTERS + DIGITS, _counting, lambda n: n + 4 + len(str(n)), "CoPE counting"),
    "flip_flop": Format("wir01", _flip_flop, lambda n: 2 * n + 4, "Liu et al. 2023 flip-flop FFL(0.8)"),
    "parity": Format("01YN", _parity, lambda n: n + 4, "NoPE paper parity"),
    "sort": Format(DIGITS, _sort, lambda n: 2 * n + 3, "NoPE paper single-token sort"),
}


class SequenceTasks(TokenTask):
    name = "sequence"
    unit = "items"
    metric = "exact_match"
    metrics = ("exact_match", "token_accuracy")
    train_field = ("data", "size")
    eval_field = ("eval", "sizes")
    data_fields = ("size",)
    eval_fields = ("sizes", "samples")

    @classmethod
    def task_names(cls) -> tuple[str, ...]:
        return tuple(FORMATS)

    @classmethod
    def about(cls, task: str) -> str:
        return FORMATS[task].source

    @property
    def format(self) -> Format:
        return FORMATS[self.task]

    def train_size(self) -> int:
        return self.spec.data.size if self.spec.data.size is not None else DEFAULT_SIZE

    def default_eval_sizes(self) -> list[int]:
        size = self.train_size()
        return [*range(1, 2 * size + 1), 3 * size, 4 * size]

    def given_eval_sizes(self) -> list[int] | None:
        return None if self.spec.eval.sizes is None else list(self.spec.eval.sizes)

    def tokens(self, size: int) -> int:
        return self.format.longest(size)

    def eval_tokens(self, size: int) -> int:
        return self.spec.eval.samples * self.tokens(size)

    def vocab(self) -> tuple[str, ...]:
        return (*SPECIAL_TOKENS, *self.format.symbols)

    def _instance(self, size: int, generator: torch.Generator) -> Instance:
        prompt, target = self.format.example(size, generator)
        index = index_of(self.vocab())
        return Instance([index[symbol] for symbol in prompt], [index[symbol] for symbol in target])

    def train_instances(self, count: int, generator: torch.Generator) -> list[Instance]:
        sizes = torch.randint(1, self.train_size() + 1, (count,), generator=generator).tolist()
        return [self._instance(size, generator) for size in sizes]

    def eval_instances(self, size: int, generator: torch.Generator) -> list[Instance]:
        return [self._instance(size, generator) for _ in range(self.spec.eval.samples)]

    def title(self) -> str:
        return f"{self.task}: exact match vs size (items), trained on sizes 1..{self.train_size()}"
