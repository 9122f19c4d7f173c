"""Every synthetic task: instances checked by an independent solver, exact sequence-length arithmetic
(``task_sequence_length`` / ``max_task_size``), the loss mask, determinism and exact match by size."""

from __future__ import annotations

from typing import get_args

import pytest
import torch

from posenc.jobspec import max_task_size, task_sequence_length
from posenc.schemas.jobs import SyntheticTask
from posenc.training.data import (
    BOS,
    EOS,
    PAD,
    SEP,
    SPECIAL_TOKENS,
    TaskBatch,
    TaskName,
    task_batch,
    task_train_batch,
    task_vocab,
)
from posenc.training.evaluate import LogitsFn, evaluate_task

TASKS: tuple[TaskName, ...] = get_args(TaskName)
LETTERS = "abcdefghijklmnopqrst"


# ------------------------------------------------------------------------------------- independent solver
def solve(task: TaskName, prompt: str) -> tuple[int, str]:
    """(size n, expected target) of a prompt, asserting the prompt is well formed for its task."""
    if task in ("copy", "reverse"):
        assert prompt
        assert set(prompt) <= set(LETTERS)
        return len(prompt), prompt if task == "copy" else prompt[::-1]
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


def rows(task: TaskName, batch: TaskBatch) -> list[tuple[list[int], str, str]]:
    """(full token sequence, prompt, scored target without EOS) of each row, checking layout and loss mask."""
    vocab = task_vocab(task)
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
        prompt = "".join(vocab[i] for i in sequence[1:sep])
        target = "".join(vocab[i] for i in sequence[sep + 1 : -1])
        out.append((sequence, prompt, target))
    return out


# ------------------------------------------------------------------------------------------------- tests
def test_task_lists_agree_and_vocabularies_put_specials_first() -> None:
    assert set(TASKS) == set(get_args(SyntheticTask))
    assert {"selective_copy", "counting", "flip_flop", "parity", "sort"} <= set(TASKS)
    for task in TASKS:
        vocab = task_vocab(task)
        assert vocab[: len(SPECIAL_TOKENS)] == SPECIAL_TOKENS
        assert len(set(vocab)) == len(vocab)


@pytest.mark.parametrize("task", TASKS)
def test_instances_are_correct_and_reach_the_longest_sequence(task: TaskName) -> None:
    generator = torch.Generator().manual_seed(11)
    extra = [(99, 200), (100, 1500)] if task == "counting" else [(40, 50)]
    for size, count in [*((n, 200) for n in range(1, 13)), *extra]:
        lengths = []
        for sequence, prompt, target in rows(task, task_batch(task, [size] * count, generator)):
            assert solve(task, prompt) == (size, target)
            lengths.append(len(sequence))
        assert max(lengths) == task_sequence_length(task, size), (task, size)


@pytest.mark.parametrize("task", TASKS)
def test_mixed_sizes_pad_after_eos(task: TaskName) -> None:
    sizes = [5, 1, 9, 2]
    batch = task_batch(task, sizes, torch.Generator().manual_seed(3))
    longest = max(len(sequence) for sequence, _, _ in rows(task, batch))
    assert batch.inputs.shape == batch.targets.shape == batch.loss_mask.shape == (4, longest - 1)
    assert [solve(task, prompt)[0] for _, prompt, _ in rows(task, batch)] == sizes


@pytest.mark.parametrize("task", TASKS)
def test_max_task_size_is_the_largest_size_that_fits(task: TaskName) -> None:
    previous = 0
    for size in range(1, 3000):
        assert task_sequence_length(task, size) > previous  # strictly increasing in n
        previous = task_sequence_length(task, size)
    for length in [*range(2, 400), 9_999, 10_005, 10_006, 100_006, 100_007, 65_536]:
        size = max_task_size(task, length)
        assert size >= 0
        assert size == 0 or task_sequence_length(task, size) <= length
        assert task_sequence_length(task, size + 1) > length, (task, length)


@pytest.mark.parametrize("task", TASKS)
def test_training_batches_fit_and_draw_every_size(task: TaskName) -> None:
    n_train = max_task_size(task, 40)
    batch = task_train_batch(task, n_train, 256, torch.Generator().manual_seed(0))
    assert batch.inputs.shape[1] + 1 <= 40
    sizes = set()
    for _, prompt, target in rows(task, batch):
        size, expected = solve(task, prompt)
        assert target == expected
        sizes.add(size)
    assert sizes == set(range(1, n_train + 1))


@pytest.mark.parametrize("task", TASKS)
def test_the_generator_seed_determines_the_batch(task: TaskName) -> None:
    def draw(seed: int) -> TaskBatch:
        return task_train_batch(task, 8, 32, torch.Generator().manual_seed(seed))

    first, again, other = draw(4), draw(4), draw(5)
    for name in ("inputs", "targets", "loss_mask"):
        assert torch.equal(getattr(first, name), getattr(again, name))
    assert not torch.equal(first.inputs, other.inputs) or not torch.equal(first.targets, other.targets)


def oracle(task: TaskName, wrong: bool = False) -> LogitsFn:
    """A perfect model built on the independent solver (``wrong``: its answer's first token is changed)."""
    vocab = task_vocab(task)
    index = {symbol: i for i, symbol in enumerate(vocab)}

    def logits_fn(ids: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*ids.shape, len(vocab))
        for row in range(ids.shape[0]):
            sep = int((ids[row] == SEP).nonzero()[0])
            _, target = solve(task, "".join(vocab[i] for i in ids[row, 1:sep].tolist()))
            answer = [index[c] for c in target] + [EOS]
            if wrong:
                answer[0] = len(SPECIAL_TOKENS) + (answer[0] - len(SPECIAL_TOKENS) + 1) % (len(vocab) - 4)
            for offset, token in enumerate(answer):
                logits[row, sep + offset, token] = 10.0
        return logits

    return logits_fn


@pytest.mark.parametrize("task", TASKS)
def test_exact_match_by_size_scores_the_answer(task: TaskName) -> None:
    for size in (3, 11):
        assert evaluate_task(oracle(task), task, size, samples=12, batch_size=5).exact_match == 1.0
        assert evaluate_task(oracle(task, wrong=True), task, size, samples=12, batch_size=5).exact_match == 0.0
