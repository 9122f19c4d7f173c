"""RULER-style probes at tiny scale and one effective length per PE: six retrieval, tracking
and aggregation probes in one character-level token family, every model trained on a mixed stream of them.

Unit: tokens. The training length L is ``train.length``: training draws each example's probe uniformly from
``data.probes`` (default all six), its length uniformly from max(ceil(L/4), the probe's shortest) to L and its
needle depth uniformly from [0, 1). The evaluation lengths are ``eval.lengths``, default {1/4, 1/2, 1, 2, 4, 8}
x L (rounded, at least the shortest length every probe of the spec can fill); each length is scored on
``eval.samples // len(depths)`` instances (at least one) per probe and per depth of ``eval.depths`` (default 0,
1/4, 1/2, 3/4, 1), every instance exactly that many tokens long, tagged ``{"probe", "depth"}``.

One token per character: the four specials, a-z, A-Z, 0-9 and ``= . ? ~ , * #`` and space. An instance is
``BOS haystack query SEP answer EOS``, the loss and the score on the answer (and EOS). The haystack is a
sequence of *atoms* (filler letters drawn uniformly from a-z, and distractor pieces at uniformly drawn places);
the queried needle is inserted before atom round(depth x atoms), so depth 0 is the start of the haystack and 1
is right before the query. Probes with several queried needles (multi_value's three values, variable tracking's
chain) put the first at the depth and the others, in order, at uniformly drawn atoms after it. Formats:

    probe              haystack pieces                                            query  answer       metric
    passkey            K=48213. among keyed Q=90210. and unkeyed 55031 runs        K?     48213        exact
    multi_key          AB=12345. and three distractors CD=67890. of the same form  AB?    12345        exact
    multi_value        X=123. three times among Q=456. and unkeyed 789 runs        X*?    123,456,789  recall
    variable_tracking  A=7. B=A. C=B. (2-4 hops); maybe a second chain D=3. E=D.   7?     ABC          recall
    common_words       two-letter words and spaces, no filler, no needle           #?     at,go,up     recall
    no_literal         X=12345. among keyed and unkeyed distractors                q?     12345        exact

- passkey (RULER ``niah_single``, llama.cpp passkey): the key letter is always K, the value 5 uniform digits.
  The haystack holds max(1, B // 64) keyed distractors (other letters, 5 digits) and as many unkeyed 5-digit
  runs, B the haystack tokens left after the needle: the answer's digits are never the only digits, so only
  the key finds the value (without distractors, small models learn to copy "the only digits" instead).
- multi_key (RULER ``niah_multikey``): 4 distinct two-letter keys with 5-digit values, one queried.
- multi_value (RULER ``niah_multivalue``): one key letter with 3 distinct 3-digit values, answered in order of
  appearance separated by commas; distractors as passkey's, with 3 digits.
- variable_tracking (RULER ``vt``): 1 or 2 chains of 2-4 hops each (a hop is ``B=A.``; a chain of h hops has
  h + 1 names, all distinct uppercase letters), each chain's value a distinct digit; the query names the value
  of one chain, the answer is that chain's names in chain order (the order they appear). The other chain is a
  distractor placed anywhere in the haystack, in order.
- common_words (RULER ``cwe``, the CONTROL): words from ``WORDS`` (20 two-letter words), the context filled
  with them (W words, each followed by a space; the 0-2 tokens left over double some spaces): o = max(1,
  round(W / 26)), the others appear o times each (as many of the 17 as leave the frequent words 9o occurrences,
  at least 2), and the 3 frequent words share the rest evenly, so each appears at least 3o times (3o when W is
  a multiple of 26); the answer is the 3 frequent words in alphabetical order. Depth does not apply: its depth
  tags are independent samples. It needs little position information, so it should be flat across PEs; if it
  is not, something other than position is broken.
- no_literal (NoLiMa): the needle names a key X (an uppercase letter), the query names X's alias (a lowercase
  letter, ``ALIASES``: a fixed bijection with no letter mapped to itself). The alias map is taught only in
  separate short training lines ``X~y`` (prompt ``X~``, answer ``y``, or prompt ``y~``, answer ``X``): a share
  ``ALIAS_SHARE`` of the training stream when no_literal is trained, never in an evaluation context. The
  alias's letter never appears in the context (it is left out of the filler), so nothing in the context
  matches the query literally.

Shortest instance (every random choice at its longest, no filler; ``PROBES[name].shortest``): passkey 31,
multi_key 47, multi_value 44, variable_tracking 50, common_words 46, no_literal 31 tokens. A training length
below the longest of the spec's probes is refused, and so is an evaluation length below it.

Metric ``score`` per instance: exact match for the single-value probes (every answer token and EOS right);
recall for the set-valued ones (multi_value, variable_tracking, common_words): the share of the answer's parts
(``Instance.parts``: each value, name or word) whose every token is right. Both are teacher-forced argmax
(``posenc.training.evaluate.evaluate_tokens``): exact match is then the same as a greedy decode; recall scores
each part given the right parts before it, which a free decode would not have.

Effective length (``effective_length``, the result's ``effective_length`` and ``leaderboard``;
NoLiMa's relative rule with a prefix condition). Per (method, seed) and probe t: a_t(L) is the mean score
over depths at length L; the base b_t is the mean of a_t at the two shortest evaluated lengths; t is "not
learned" by that run when b_t < 0.8 and is then left out of the number and listed in its
``not_learned_probes`` (and, as ``{"method", "seed", "probe"}``, in the result's ``not_learned_probes``), never
dropped silently. S(L) is the mean of a_t(L) / b_t over the learned probes except the control (common_words:
its score is reported beside, in ``control``, not counted); L_eff is the largest evaluated L with S(L') >= 0.85
for every evaluated L' <= L, so one lucky long length cannot count; None when S fails at the shortest length or
no probe is learned. Headline: L_eff / L, the median over seeds with the minimum beside it and the seeds it rests
on (``seeds_rated`` of ``seeds_run``: a run that learned no probe but the control is unrated, ``unrated_seeds``).
In a context-extension study every arm is rated against the base model's b_t of its seed (the base model's own
numbers are the baseline): a rule that breaks the model even at the training length scores 0, it is not "not
learned".

Sources: RULER (Hsieh et al. 2024, arXiv 2404.06654; NVIDIA/RULER); NoLiMa (Modarressi et al. 2025, arXiv
2502.05167; adobe-research/NoLiMa).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch

from posenc.errors import InvalidInput
from posenc.extension import BASE_LABEL
from posenc.schemas.jobs import JobKind
from posenc.tasks.base import SPEC, SPECIAL_TOKENS, Instance, TokenTask, index_of, scaled_sizes, uniform

LOWER = "abcdefghijklmnopqrstuvwxyz"
UPPER = LOWER.upper()
DIGITS = "0123456789"
PUNCTUATION = "=.?~,*# "
VOCAB = (*SPECIAL_TOKENS, *LOWER, *UPPER, *DIGITS, *PUNCTUATION)
FILLER = LOWER
PASSKEY = "K"
ALIASES = dict(zip(UPPER, "qwertyuiopasdfghjklzxcvbnm", strict=True))  # keyboard order: no X maps to x
WORDS = ("an", "as", "at", "be", "by", "do", "go", "he", "if", "in",
         "is", "it", "me", "my", "no", "of", "on", "or", "so", "up")  # fmt: skip
CONTROL = "common_words"
LENGTH_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
ALIAS_SHARE = 0.125  # of the training stream, when no_literal is trained
DISTRACTOR_SPACING = 64  # haystack tokens per (keyed, unkeyed) distractor pair
BASE_LEARNED = 0.8  # b_t below this: the probe is not learned by that run
KEEP = 0.85  # S(L) at least this at every length up to L_eff

KEY_DIGITS = 5  # passkey, multi_key, no_literal values
MULTI_KEYS = 4
MULTI_VALUES, MULTI_VALUE_DIGITS = 3, 3
CHAINS, HOPS = (1, 2), (2, 4)  # variable tracking: chains per instance, hops per chain (inclusive ranges)
TOP_WORDS, OTHER_WORDS, FEWEST_OTHERS = 3, 17, 2  # common words: frequent words, the others, the others at least
WORDS_PER_ROUND = 3 * TOP_WORDS + OTHER_WORDS  # 26: each other word once, each frequent word three times


@dataclass(frozen=True)
class Layout:
    """One instance before it is laid out: the queried needles (the first at the depth), the distractor pieces
    of the haystack (kept in order when ``ordered``: a distractor chain), the query, the answer and its parts."""

    needles: list[str]
    distractors: list[str]
    query: str
    answer: str
    parts: list[tuple[int, int]] | None = None
    ordered: bool = False
    filler: str = FILLER


def _integer(low: int, high: int, generator: torch.Generator) -> int:
    """Uniform in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def _distinct(alphabet: str | Sequence[str], count: int, generator: torch.Generator) -> list[str]:
    """``count`` distinct symbols of ``alphabet`` in a uniformly random order."""
    return [alphabet[i] for i in torch.randperm(len(alphabet), generator=generator)[:count].tolist()]


def _number(digits: int, generator: torch.Generator) -> str:
    """``digits`` uniform digits (a leading 0 allowed)."""
    return uniform(DIGITS, digits, generator)


def _parts(pieces: Sequence[str], separator: str) -> tuple[str, list[tuple[int, int]]]:
    """The pieces joined by ``separator``, and each piece's [start, stop) in the result."""
    parts, start = [], 0
    for piece in pieces:
        parts.append((start, start + len(piece)))
        start += len(piece) + len(separator)
    return separator.join(pieces), parts


def _keyed_pair(digits: int) -> int:
    """Tokens of one keyed (``Q=`` digits ``.``) and one unkeyed distractor of ``digits`` digits."""
    return (digits + 3) + digits


def _pair_count(free: int, pair: int) -> int:
    """Keyed and unkeyed distractors, as many of each: one pair per ``DISTRACTOR_SPACING`` free haystack tokens,
    at least one, never more than fit in ``free`` tokens (pairs of ``pair`` tokens)."""
    return min(max(1, free // DISTRACTOR_SPACING), free // pair)


def _keyed_distractors(free: int, key: str, digits: int, generator: torch.Generator) -> list[str]:
    """Keyed ``Q=...`` (keys other than ``key``) and unkeyed digit runs of ``digits`` digits, filling at most
    ``free`` tokens at one pair per ``DISTRACTOR_SPACING``."""
    count = _pair_count(free, _keyed_pair(digits))
    others = UPPER.replace(key, "")
    keys = uniform(others, count, generator)
    keyed = [f"{k}={_number(digits, generator)}." for k in keys]
    unkeyed = [_number(digits, generator) for _ in range(count)]
    return keyed + unkeyed


def _passkey(length: int, generator: torch.Generator) -> Layout:
    value = _number(KEY_DIGITS, generator)
    needle, query = f"{PASSKEY}={value}.", f"{PASSKEY}?"
    free = length - 3 - len(query) - len(value) - len(needle)
    return Layout([needle], _keyed_distractors(free, PASSKEY, KEY_DIGITS, generator), query, value)


def _multi_key(length: int, generator: torch.Generator) -> Layout:
    del length
    keys: list[str] = []
    for code in torch.randperm(len(UPPER) ** 2, generator=generator)[:MULTI_KEYS].tolist():
        keys.append(UPPER[code // len(UPPER)] + UPPER[code % len(UPPER)])
    statements = [f"{key}={_number(KEY_DIGITS, generator)}." for key in keys]
    chosen = _integer(0, MULTI_KEYS - 1, generator)
    value = statements[chosen][3:-1]
    return Layout([statements[chosen]], statements[:chosen] + statements[chosen + 1 :], f"{keys[chosen]}?", value)


def _multi_value(length: int, generator: torch.Generator) -> Layout:
    key = _distinct(UPPER, 1, generator)[0]
    values = [f"{v:0{MULTI_VALUE_DIGITS}d}" for v in
              torch.randperm(10**MULTI_VALUE_DIGITS, generator=generator)[:MULTI_VALUES].tolist()]  # fmt: skip
    needles = [f"{key}={value}." for value in values]
    answer, parts = _parts(values, ",")
    query = f"{key}*?"
    free = length - 3 - len(query) - len(answer) - sum(map(len, needles))
    distractors = _keyed_distractors(free, key, MULTI_VALUE_DIGITS, generator)
    return Layout(needles, distractors, query, answer, parts)


def _variable_tracking(length: int, generator: torch.Generator) -> Layout:
    del length
    chains = _integer(*CHAINS, generator)
    hops = [_integer(*HOPS, generator) for _ in range(chains)]
    names = _distinct(UPPER, sum(hops) + chains, generator)
    values = _distinct(DIGITS, chains, generator)
    statements: list[list[str]] = []
    members: list[list[str]] = []
    for chain in range(chains):
        first = sum(hops[:chain]) + chain
        own = names[first : first + hops[chain] + 1]
        members.append(own)
        statements.append([f"{own[0]}={values[chain]}."] + [f"{b}={a}." for a, b in pairwise(own)])
    answer = "".join(members[0])
    parts = [(i, i + 1) for i in range(len(answer))]
    distractors = statements[1] if chains > 1 else []
    return Layout(statements[0], distractors, f"{values[0]}?", answer, parts, ordered=True)


def _no_literal(length: int, generator: torch.Generator) -> Layout:
    key = _distinct(UPPER, 1, generator)[0]
    value = _number(KEY_DIGITS, generator)
    needle, query = f"{key}={value}.", f"{ALIASES[key]}?"
    free = length - 3 - len(query) - len(value) - len(needle)
    distractors = _keyed_distractors(free, key, KEY_DIGITS, generator)
    return Layout([needle], distractors, query, value, filler=FILLER.replace(ALIASES[key], ""))


def _common_words(length: int, generator: torch.Generator) -> tuple[str, str, list[tuple[int, int]]]:
    """(prompt, answer, parts) of a common-words instance of ``length`` tokens."""
    query = "#?"
    answer_length = TOP_WORDS * 3 - 1
    context = length - 3 - len(query) - answer_length
    count, extra_spaces = divmod(context, 3)  # a word and a space; the remainder as second spaces
    each = max(1, math.floor(count / WORDS_PER_ROUND + 0.5))
    others = min(OTHER_WORDS, (count - 3 * TOP_WORDS * each) // each)
    chosen = _distinct(WORDS, TOP_WORDS + others, generator)
    top, rest = chosen[:TOP_WORDS], chosen[TOP_WORDS:]
    frequent = count - others * each
    counts = [frequent // TOP_WORDS + (i < frequent % TOP_WORDS) for i in range(TOP_WORDS)] + [each] * others
    words = [word for word, times in zip(top + rest, counts, strict=True) for _ in range(times)]
    words = [words[i] for i in torch.randperm(len(words), generator=generator).tolist()]
    doubled = set(torch.randperm(count, generator=generator)[:extra_spaces].tolist())
    text = "".join(word + (" " if i not in doubled else "  ") for i, word in enumerate(words))
    answer, parts = _parts(sorted(top), ",")
    return text + query, answer, parts


@dataclass(frozen=True)
class Probe:
    """One probe: its layout from (length, generator), or its whole instance (common words); its shortest
    instance in tokens; whether it is scored by recall; and what it mirrors."""

    layout: Callable[[int, torch.Generator], Layout] | None
    shortest: int
    recall: bool
    source: str


PROBES: dict[str, Probe] = {
    "passkey": Probe(_passkey, 3 + 2 + KEY_DIGITS + (KEY_DIGITS + 3) + _keyed_pair(KEY_DIGITS), False,
                     "RULER niah_single, llama.cpp passkey"),
    "multi_key": Probe(_multi_key, 3 + 3 + KEY_DIGITS + MULTI_KEYS * (KEY_DIGITS + 4), False, "RULER niah_multikey"),
    "multi_value": Probe(_multi_value, 3 + 3 + (MULTI_VALUE_DIGITS + 1) * MULTI_VALUES - 1
                         + MULTI_VALUES * (MULTI_VALUE_DIGITS + 3) + _keyed_pair(MULTI_VALUE_DIGITS), True,
                         "RULER niah_multivalue"),
    "variable_tracking": Probe(_variable_tracking, 3 + 2 + (HOPS[1] + 1) + CHAINS[1] * 4 * (HOPS[1] + 1), True,
                               "RULER vt"),
    "common_words": Probe(None, 3 + 2 + TOP_WORDS * 3 - 1 + 3 * (3 * TOP_WORDS + FEWEST_OTHERS), True,
                          "RULER cwe (the control)"),
    "no_literal": Probe(_no_literal, 3 + 2 + KEY_DIGITS + (KEY_DIGITS + 3) + _keyed_pair(KEY_DIGITS), False,
                        "NoLiMa"),
}  # fmt: skip


def lay_out(layout: Layout, length: int, depth: float, generator: torch.Generator) -> str:
    """The prompt (haystack and query) of ``length`` tokens in all (with BOS, SEP, the answer and EOS): filler
    letters and the distractors as atoms, the needles inserted from atom round(depth x atoms) on."""
    haystack = length - 3 - len(layout.query) - len(layout.answer)
    filler = haystack - sum(map(len, layout.needles)) - sum(map(len, layout.distractors))
    if filler < 0:
        raise ValueError(f"{length} tokens are too few for this instance ({length - filler} needed)")
    letters = iter(uniform(layout.filler, filler, generator))
    slots = set(torch.randperm(filler + len(layout.distractors), generator=generator)[: len(layout.distractors)]
                .tolist())  # fmt: skip
    order = (range(len(layout.distractors)) if layout.ordered
             else torch.randperm(len(layout.distractors), generator=generator).tolist())  # fmt: skip
    pieces = iter(layout.distractors[index] for index in order)
    atoms = [next(pieces) if slot in slots else next(letters) for slot in range(filler + len(layout.distractors))]
    first = math.floor(depth * len(atoms) + 0.5)
    later = torch.randint(first, len(atoms) + 1, (len(layout.needles) - 1,), generator=generator).tolist()
    places = [first, *sorted(later)]  # the atom each needle goes before (len(atoms): after the last)
    laid: list[str] = []
    needles = iter(zip(places, layout.needles, strict=True))
    upcoming = next(needles, None)
    for position in range(len(atoms) + 1):
        while upcoming is not None and upcoming[0] == position:
            laid.append(upcoming[1])
            upcoming = next(needles, None)
        if position < len(atoms):
            laid.append(atoms[position])
    return "".join(laid) + layout.query


def alias_line(generator: torch.Generator) -> tuple[str, str]:
    """One training line of the alias map: (``X~``, ``y``) or (``y~``, ``X``), uniformly."""
    key = _distinct(UPPER, 1, generator)[0]
    if _integer(0, 1, generator):
        return f"{key}~", ALIASES[key]
    return f"{ALIASES[key]}~", key


class Probes(TokenTask):
    name = "probes"
    group_tag = "probe"
    unit = "tokens"
    metric = "score"
    metrics = ("score",)
    train_field = ("train", "length")
    eval_field = ("eval", "lengths")
    data_fields = ("probes",)
    eval_fields = ("lengths", "depths", "samples")
    reads_train_length = True

    @classmethod
    def task_names(cls) -> tuple[str, ...]:
        return ("probes",)

    @classmethod
    def about(cls, task: str) -> str:
        return (
            f"tiny RULER-style probes ({', '.join(PROBES)}) with a needle at each of `eval.depths`; "
            "effective length per method"
        )

    # ---- the spec's probes and sizes
    @property
    def probes(self) -> list[str]:
        """The spec's probes (default all of them); unknown names are left out here and refused by validate."""
        given = self.spec.data.probes
        return list(PROBES) if given is None else [name for name in given if name in PROBES]

    @property
    def depths(self) -> list[float]:
        return list(DEFAULT_DEPTHS) if self.spec.eval.depths is None else list(self.spec.eval.depths)

    def shortest(self) -> int:
        """The shortest length every probe of the spec can fill."""
        return max((PROBES[name].shortest for name in self.probes), default=1)

    def train_size(self) -> int:
        return self.spec.train.length

    def default_eval_sizes(self) -> list[int]:
        return scaled_sizes(self.train_size(), LENGTH_FACTORS, least=self.shortest())

    def given_eval_sizes(self) -> list[int] | None:
        return None if self.spec.eval.lengths is None else list(self.spec.eval.lengths)

    def tokens(self, size: int) -> int:
        return size

    def per_depth(self) -> int:
        return max(1, self.spec.eval.samples // len(self.depths))

    def eval_tokens(self, size: int) -> int:
        """Every instance is ``size`` tokens: per probe, ``per_depth`` of them at each depth (at most
        ``samples``, or one per depth when there are more depths than samples)."""
        return self.per_depth() * len(self.depths) * len(self.probes) * size

    def vocab(self) -> tuple[str, ...]:
        return VOCAB

    # ---- validation
    def validate(self, kind: JobKind, data_dirs: Sequence[Path] | None = None) -> None:
        """Known probes, each once; the training length and every evaluation length at least the shortest
        instance of the longest probe."""
        super().validate(kind, data_dirs)
        given = self.spec.data.probes
        if given is not None:
            unknown = [name for name in given if name not in PROBES]
            if unknown:
                raise InvalidInput(
                    (*SPEC, "data", "probes"),
                    f"unknown probe {unknown[0]!r}; known: {', '.join(PROBES)}",
                )
            if len(set(given)) != len(given):
                raise InvalidInput((*SPEC, "data", "probes"), "each probe at most once")
        shortest = self.shortest()
        longest_probe = max(self.probes, key=lambda name: PROBES[name].shortest)
        if self.train_size() < shortest:
            raise InvalidInput(
                (*SPEC, "train", "length"),
                f"train.length {self.train_size()} is shorter than the shortest {longest_probe} instance: "
                f"at least {shortest} tokens with these probes",
            )
        short = [length for length in self.given_eval_sizes() or [] if length < shortest]
        if short:
            raise InvalidInput(
                (*SPEC, "eval", "lengths"),
                f"evaluation length {short[0]} is shorter than the shortest {longest_probe} instance: "
                f"at least {shortest} tokens with these probes",
            )

    # ---- instances
    def instance(self, probe: str, length: int, depth: float, generator: torch.Generator) -> Instance:
        """One instance of ``probe``, exactly ``length`` tokens from BOS to EOS, its needle at ``depth``."""
        spec = PROBES[probe]
        if length < spec.shortest:
            raise ValueError(f"{probe} needs at least {spec.shortest} tokens, not {length}")
        parts: list[tuple[int, int]] | None
        if spec.layout is None:
            prompt, answer, parts = _common_words(length, generator)
        else:
            layout = spec.layout(length, generator)
            prompt, answer, parts = lay_out(layout, length, depth, generator), layout.answer, layout.parts
        index = index_of(VOCAB)
        return Instance(
            [index[c] for c in prompt],
            [index[c] for c in answer],
            tags={"probe": probe, "depth": depth},
            parts=parts if spec.recall else None,
        )

    def train_instances(self, count: int, generator: torch.Generator) -> list[Instance]:
        """A mixed stream: a share ``ALIAS_SHARE`` of alias lines when no_literal is trained, else a probe drawn
        uniformly, its length from U(max(ceil(L/4), its shortest), L), its depth from U[0, 1)."""
        probes, length = self.probes, self.train_size()
        index = index_of(VOCAB)
        drawn: list[Instance] = []
        for _ in range(count):
            if "no_literal" in probes and float(torch.rand(1, generator=generator)) < ALIAS_SHARE:
                prompt, answer = alias_line(generator)
                drawn.append(Instance([index[c] for c in prompt], [index[c] for c in answer], {"probe": "alias"}))
                continue
            probe = probes[_integer(0, len(probes) - 1, generator)]
            size = _integer(max(math.ceil(length / 4), PROBES[probe].shortest), length, generator)
            depth = float(torch.rand(1, generator=generator))
            drawn.append(self.instance(probe, size, depth, generator))
        return drawn

    def eval_instances(self, size: int, generator: torch.Generator) -> list[Instance]:
        return [
            self.instance(probe, size, depth, generator)
            for probe in self.probes
            for depth in self.depths
            for _ in range(self.per_depth())
        ]

    def score(self, correct_tokens: Sequence[bool], instance: Instance) -> dict[str, float]:
        """Exact match (every answer token and EOS right) or, with ``parts``, recall: the share of the parts
        whose every token is right (EOS not counted; teacher-forced, see the module docstring)."""
        if instance.parts is None:
            return {"score": float(all(correct_tokens))}
        right = [all(correct_tokens[start:stop]) for start, stop in instance.parts]
        return {"score": sum(right) / len(right)}

    # ---- results
    def protocol(self) -> str:
        return "teacher_forced_argmax"

    def title(self) -> str:
        return f"probes: score vs length (tokens), trained on lengths up to {self.train_size()}"

    def learned(self, in_distribution: Mapping[str, float | None]) -> bool | None:
        """None: whether a run learned is per probe here (``effective_length``'s learned and not-learned
        probes), not one threshold on the mean over probes."""
        return None

    def until_reached(self, cells: Sequence[Mapping[str, Any]], score: float | None) -> tuple[float | None, bool]:
        """With a ``score``: the mean over probes and depths (the headline). Without: the probes' own rule, every
        probe (the control included) at least ``BASE_LEARNED``, its score averaged over depths; the value is the
        lowest probe's."""
        if score is not None:
            return super().until_reached(cells, score)
        by_probe: dict[str, list[float]] = defaultdict(list)
        for cell in cells:
            if cell.get(self.metric) is not None:
                by_probe[cell["probe"]].append(float(cell[self.metric]))
        if not by_probe:
            return None, False
        lowest = min(_mean(values) for values in by_probe.values())
        return lowest, lowest >= BASE_LEARNED

    def extra_results(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        # a context-extension study's arms are rated against the base model's own short-length scores
        baseline = BASE_LABEL if self.spec.extension is not None else None
        return effective_length(rows, self.train_size(), self.metric, baseline=baseline)


# ------------------------------------------------------------------------------------------ effective length
def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values)


def _spread(seed_means: Sequence[float]) -> dict[str, float | int]:
    """Mean and spread over seeds."""
    return {
        "mean": _mean(seed_means),
        "std": statistics.pstdev(seed_means) if len(seed_means) > 1 else 0.0,
        "seeds": len(seed_means),
    }


def _base_scores(scores: Mapping[str, Mapping[int, list[float]]]) -> dict[str, float]:
    """b_t of every probe of one run: its mean score at the two shortest lengths evaluated."""
    sizes = sorted({size for by_size in scores.values() for size in by_size})
    by_length = {probe: {size: _mean(values) for size, values in by_size.items()} for probe, by_size in scores.items()}
    return {probe: _mean([a[size] for size in sizes[:2] if size in a]) for probe, a in by_length.items()
            if any(size in a for size in sizes[:2])}  # fmt: skip


def _run_length(
    scores: Mapping[str, Mapping[int, list[float]]], train_length: int, reference: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """One run's effective length from its scores per probe and length (values over depths); ``reference``: the
    b_t to divide by and to decide which probes count (a study's base model's), instead of the run's own."""
    sizes = sorted({size for by_size in scores.values() for size in by_size})
    by_length = {probe: {size: _mean(values) for size, values in sorted(by_size.items())}
                 for probe, by_size in scores.items()}  # fmt: skip
    base = dict(reference) if reference is not None else _base_scores(scores)
    learned = [probe for probe in by_length if probe != CONTROL and base.get(probe, 0.0) >= BASE_LEARNED]
    not_learned = [probe for probe in by_length if base.get(probe, 0.0) < BASE_LEARNED]
    relative: dict[int, float | None] = {}
    for size in sizes:
        kept = [by_length[probe][size] / base[probe] for probe in learned if size in by_length[probe]]
        relative[size] = _mean(kept) if kept else None
    l_eff: int | None = None
    if learned:
        for size in sizes:
            value = relative[size]
            if value is None or value < KEEP:
                break
            l_eff = size
    return {
        "l_eff": l_eff,
        "ratio": l_eff / train_length if l_eff is not None else None,
        "learned_probes": learned,
        "not_learned_probes": not_learned,
        "score_by_length": {str(size): value for size, value in relative.items()},
        "base": base,
        "base_from": "own" if reference is None else "baseline",
        "probe_scores": {probe: {str(size): value for size, value in a.items()} for probe, a in by_length.items()},
    }


def effective_length(
    rows: Sequence[Mapping[str, Any]], train_length: int, metric: str = "score", *, baseline: str | None = None
) -> dict[str, Any]:
    """The effective length of every (method, seed) run, the leaderboard of L_eff / L per method and the
    control probe's score by length, from a benchmark's long-format rows (columns method, seed, size, probe,
    depth, metric, value); pure Python. See the module docstring for the rule.

    ``baseline`` (a context-extension study's base model): every run of a seed is rated against that method's
    b_t of the same seed, so a probe counts where the base model learned it, and an arm that loses it even at the
    shortest lengths scores 0 (below the grid) instead of being read as not having learned it."""
    runs: dict[tuple[str, int], dict[str, dict[int, list[float]]]] = {}
    control: dict[str, dict[int, dict[int, list[float]]]] = {}  # method -> size -> seed -> values
    for row in rows:
        if row.get("metric") != metric or row.get("value") is None or row.get("probe") is None:
            continue
        method, seed, size, value = row["method"], row["seed"], int(row["size"]), float(row["value"])
        runs.setdefault((method, seed), defaultdict(lambda: defaultdict(list)))[row["probe"]][size].append(value)
        if row["probe"] == CONTROL:
            control.setdefault(method, defaultdict(lambda: defaultdict(list)))[size][seed].append(value)
    references = {seed: _base_scores(scores) for (method, seed), scores in runs.items() if method == baseline}
    entries = [{"method": method, "seed": seed, **_run_length(scores, train_length, references.get(seed))}
               for (method, seed), scores in runs.items()]  # fmt: skip
    leaderboard = []
    for method in dict.fromkeys(entry["method"] for entry in entries):
        own = [entry for entry in entries if entry["method"] == method]
        # a run with a learned probe that fails at the shortest length scores 0 (below the grid); a run that
        # learned nothing has no ratio (None) and is listed under unrated_seeds
        per_seed = [entry["ratio"] if entry["ratio"] is not None else (0.0 if entry["learned_probes"] else None)
                    for entry in own]  # fmt: skip
        rated = [ratio for ratio in per_seed if ratio is not None]
        not_learned: dict[str, list[int]] = defaultdict(list)
        for entry in own:
            for probe in entry["not_learned_probes"]:
                not_learned[probe].append(entry["seed"])
        leaderboard.append(
            {
                "method": method,
                "median": statistics.median(rated) if rated else None,
                "min": min(rated) if rated else None,
                "per_seed": per_seed,
                "seeds": [entry["seed"] for entry in own],
                "unrated_seeds": [entry["seed"] for entry, ratio in zip(own, per_seed, strict=True) if ratio is None],
                # the median rests on seeds_rated of the seeds_run seeds: a reader must see when it is fewer
                "seeds_rated": len(rated),
                "seeds_run": len(own),
                "not_learned": dict(not_learned),
            }
        )
    leaderboard.sort(key=lambda entry: (entry["median"] is None, -(entry["median"] or 0.0)))
    control_scores = {method: {str(size): _spread([_mean(values) for values in by_seed.values()])
                               for size, by_seed in sorted(by_size.items())}
                      for method, by_size in control.items()}  # fmt: skip
    return {
        "effective_length": entries,
        "leaderboard": leaderboard,
        "leaderboard_label": "effective length / training length",
        "leaderboard_title": f"probes: L_eff / L_train (L_train = {train_length}; median over rated seeds, "
        "points: seeds)",
        "control": {"probe": CONTROL, "by_method": control_scores},
        "not_learned_probes": not_learned_probes(entries),
    }


def not_learned_probes(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``{"method", "seed", "probe"}`` for every probe a run did not learn (b_t < ``BASE_LEARNED``), the control
    included (a control that is not learned says something other than position is broken), from
    ``effective_length``'s per-run entries; in the runs' order, each run's probes by name."""
    return [{"method": entry["method"], "seed": entry["seed"], "probe": probe}
            for entry in entries for probe in sorted(entry["not_learned_probes"])]  # fmt: skip
