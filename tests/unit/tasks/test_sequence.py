"""Every synthetic sequence task: instances checked by an independent solver, the longest sequence of a size
(``tokens``), the padded batch and its loss mask, determinism, and exact match and per-token accuracy."""

from __future__ import annotations

import pytest
import torch

from posenc.schemas.jobs import JobSpec
from posenc.tasks import family_of
from posenc.tasks.base import BOS, EOS, PAD, SEP, SPECIAL_TOKENS, Instance
from posenc.tasks.sequence import FORMATS, SequenceTasks
from posenc.training.data import TokenBatch, token_batch
from posenc.training.evaluate import LogitsFn, evaluate_tokens

TASKS = tuple(FORMATS)
LETTERS = "abcdefghijklmnopqrst"


def family(task: str, size: int = 8, samples: int = 12) -> SequenceTasks:
    chosen = family_of(JobSpec.model_validate({"methods": [{"method": "nope"}], "data": {"task": task, "size": size},
                                               "eval": {"samples": samples}}))  # fmt: skip
    assert isinstance(chosen, SequenceTasks)
    return chosen


# ------------------------------------------------------------------------------------- independent solver
def solve(task: str, prompt: str) -> tuple[int, str]:
    """(size n, expected target) of a prompt, asserting the prompt is well formed for its task."""
    if task in ("copy", "reverse"):
        assert prompt
        assert set(prompt) <= set(LETTERS)
        return len(prompt), prompt if task == "copy" else prompt[::-1]
    if task == "copy_single":
        assert len(set(prompt)) == 1
        assert prompt[0] in LETTERS
        return len(prompt), prompt
    if task == "copy_replace":
        old, new, rest = prompt[0], prompt[1], prompt[2:]
        assert old != new
        assert {old, new} <= set(LETTERS)
        assert rest
        assert set(rest) == {old}
        return len(rest), new * len(rest)
    if task == "addition":
        left, right = prompt.split("+")
        assert len(left) == len(right)
        assert (left + right).isdigit()
        assert len(left) == 1 or (left[0] != "0" and right[0] != "0")
        return len(left), str(int(left) + int(right))
    if task == "selective_copy":
        letters = [c for c in prompt if c != "."]
        assert len(prompt) == 2 * len(letters)
        assert set(letters) <= set(LETTERS)
        return len(letters), "".join(letters)
    if task == "counting":
        sequence, query = prompt[:-1], prompt[-1]
        assert sequence
        assert set(prompt) <= set("abcde")
        return len(sequence), str(sum(1 for c in sequence if c == query))
    if task == "flip_flop":
        pairs = [prompt[i : i + 2] for i in range(0, len(prompt), 2)]
        assert pairs
        assert all(len(p) == 2 and p[0] in "wir" and p[1] in "01" for p in pairs)
        assert pairs[0][0] == "w"
        memory = ""
        for op, bit in ((p[0], p[1]) for p in pairs):
            if op == "w":
                memory = bit
            elif op == "r":
                assert bit == memory  # a read shows the last written bit
        return len(pairs), memory
    if task == "parity":
        assert prompt
        assert set(prompt) <= set("01")
        return len(prompt), "Y" if prompt.count("1") % 2 == 0 else "N"
    if task == "sort":
        assert prompt
        assert set(prompt) <= set("0123456789")
        return len(prompt), "".join(sorted(prompt, key=int))
    raise AssertionError(task)


def rows(chosen: SequenceTasks, batch: TokenBatch) -> list[tuple[list[int], str, str]]:
    """(full token sequence, prompt, scored target without EOS) of each row, checking layout and loss mask."""
    vocab = chosen.vocab()
    out = []
    for inputs, targets, mask in zip(batch.inputs, batch.targets, batch.loss_mask, strict=True):
        length = int((inputs != PAD).sum()) + 1  # the last input predicts EOS
        assert bool((inputs[: length - 1] != PAD).all())
        assert bool((inputs[length - 1 :] == PAD).all())
        assert torch.equal(inputs[1 : length - 1], targets[: length - 2])  # targets are the next tokens
        sequence = [*inputs[: length - 1].tolist(), int(targets[length - 2])]
        assert sequence[0] == BOS
        assert sequence[-1] == EOS
        assert sequence.count(SEP) == 1
        assert bool((targets[length - 1 :] == PAD).all())
        sep = sequence.index(SEP)
        assert all(token >= len(SPECIAL_TOKENS) for token in sequence[1:sep] + sequence[sep + 1 : -1])
        # the loss covers exactly target + EOS: predictions made at SEP .. the last target token
        assert mask.nonzero().flatten().tolist() == list(range(sep, length - 1))
        assert targets[mask].tolist() == sequence[sep + 1 :]
        out.append(
            (sequence, "".join(vocab[i] for i in sequence[1:sep]), "".join(vocab[i] for i in sequence[sep + 1 : -1]))
        )
    return out


# ------------------------------------------------------------------------------------------------- tests
def test_vocabularies_put_specials_first_and_every_nope_copy_variant_is_there() -> None:
    assert {"copy", "copy_single", "copy_replace", "reverse", "addition"} <= set(TASKS)
    for task in TASKS:
        vocab = family(task).vocab()
        assert vocab[: len(SPECIAL_TOKENS)] == SPECIAL_TOKENS
        assert len(set(vocab)) == len(vocab)


@pytest.mark.parametrize("task", TASKS)
def test_instances_are_correct_and_reach_the_longest_sequence(task: str) -> None:
    chosen = family(task)
    generator = torch.Generator().manual_seed(11)
    extra = [(99, 200), (100, 1500)] if task == "counting" else [(40, 50)]
    for size, count in [*((n, 200) for n in range(1, 13)), *extra]:
        instances = [chosen._instance(size, generator) for _ in range(count)]
        lengths = []
        for sequence, prompt, target in rows(chosen, token_batch(instances)):
            assert solve(task, prompt) == (size, target)
            lengths.append(len(sequence))
        assert max(lengths) == chosen.tokens(size), (task, size)


@pytest.mark.parametrize("task", TASKS)
def test_training_draws_every_size_up_to_the_training_size(task: str) -> None:
    chosen = family(task, size=6)
    batch = token_batch(chosen.train_instances(256, torch.Generator().manual_seed(0)))
    assert batch.inputs.shape[1] + 1 <= chosen.tokens(6)
    sizes = set()
    for _, prompt, target in rows(chosen, batch):
        size, expected = solve(task, prompt)
        assert target == expected
        sizes.add(size)
    assert sizes == set(range(1, 7))


@pytest.mark.parametrize("task", TASKS)
def test_the_generator_seed_determines_the_batch(task: str) -> None:
    chosen = family(task)

    def draw(seed: int) -> TokenBatch:
        return token_batch(chosen.train_instances(32, torch.Generator().manual_seed(seed)))

    first, again, other = draw(4), draw(4), draw(5)
    for name in ("inputs", "targets", "loss_mask"):
        assert torch.equal(getattr(first, name), getattr(again, name))
    assert not torch.equal(first.inputs, other.inputs) or not torch.equal(first.targets, other.targets)


def test_evaluation_instances_depend_on_the_size_alone() -> None:
    chosen = family("copy", samples=5)
    first = chosen.eval_instances(7, chosen.eval_generator(7))
    again = chosen.eval_instances(7, chosen.eval_generator(7))
    assert [i.prompt for i in first] == [i.prompt for i in again]
    assert [i.prompt for i in first] != [i.prompt for i in chosen.eval_instances(7, chosen.eval_generator(8))]


def oracle(chosen: SequenceTasks, wrong_at: int | None = None) -> LogitsFn:
    """A perfect model built on the independent solver; ``wrong_at``: that target token is changed."""
    vocab = chosen.vocab()
    index = {symbol: i for i, symbol in enumerate(vocab)}

    def logits_fn(ids: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*ids.shape, len(vocab))
        for row in range(ids.shape[0]):
            sep = int((ids[row] == SEP).nonzero()[0])
            _, target = solve(chosen.task, "".join(vocab[i] for i in ids[row, 1:sep].tolist()))
            answer = [index[c] for c in target] + [EOS]
            if wrong_at is not None and wrong_at < len(answer):
                answer[wrong_at] = BOS  # never a target token
            for offset, token in enumerate(answer):
                logits[row, sep + offset, token] = 10.0
        return logits

    return logits_fn


@pytest.mark.parametrize("task", TASKS)
def test_exact_match_and_token_accuracy_score_the_answer(task: str) -> None:
    chosen = family(task)
    for size in (3, 11):
        [perfect] = evaluate_tokens(oracle(chosen), chosen, size, batch_size=5)
        assert (perfect["size"], perfect["exact_match"], perfect["token_accuracy"], perfect["samples"]) == (
            size, 1.0, 1.0, 12
        )  # fmt: skip
        [first_wrong] = evaluate_tokens(oracle(chosen, wrong_at=0), chosen, size, batch_size=5)
        assert first_wrong["exact_match"] == 0.0
        assert 0.0 < first_wrong["token_accuracy"] < 1.0  # every other target token (and EOS) still right


def test_per_token_accuracy_is_the_share_of_right_target_tokens() -> None:
    chosen = family("copy")
    instance = Instance(prompt=[4, 5, 6], target=[4, 5, 6])
    assert chosen.score([True, True, False, True], instance) == {"exact_match": 0.0, "token_accuracy": 0.75}
