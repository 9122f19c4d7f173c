"""Evaluation protocols: scored-token arithmetic, the uniform model's perplexity, greedy exact match."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.schemas.jobs import JobSpec
from posenc.tasks import TokenTask, family_of
from posenc.tasks.base import EOS, SEP
from posenc.training.evaluate import evaluate_text, evaluate_tokens, protocol_windows

VOCAB = 13
COPY = family_of(
    JobSpec.model_validate({"methods": [{"method": "nope"}], "data": {"task": "copy"}, "eval": {"samples": 10}})
)
assert isinstance(COPY, TokenTask)


def uniform_model(ids: torch.Tensor) -> torch.Tensor:
    """Equal logits for every symbol: NLL = ln V at every position, whatever the context."""
    return torch.zeros(*ids.shape, VOCAB)


def test_nonoverlapping_windows_are_disjoint_and_score_every_token() -> None:
    windows = protocol_windows(available=1000, length=64, protocol="nonoverlapping")
    assert [w.start for w in windows] == [64 * k for k in range(15)]
    assert all(w.first_scored == 0 for w in windows)


def test_sliding_windows_score_each_target_once_with_context_after_the_first() -> None:
    length, stride = 64, 16
    windows = protocol_windows(available=1000, length=length, protocol="sliding", stride=stride)
    assert len(windows) == 1 + (1000 - length) // stride
    scored = [w.start + offset for w in windows for offset in range(w.first_scored, length)]
    assert scored == list(range(length + (len(windows) - 1) * stride))  # contiguous, no repeats
    assert all(w.first_scored == length - stride for w in windows[1:])  # >= L - S tokens of context


@pytest.mark.parametrize(
    ("protocol", "stride", "tokens", "windows"),
    [
        ("nonoverlapping", None, 15 * 64, 15),
        ("sliding", None, 64 + 29 * 32, 30),
        ("sliding", 8, 64 + 117 * 8, 118),
    ],
)
def test_uniform_model_has_perplexity_equal_to_vocab_size(
    protocol: str, stride: int | None, tokens: int, windows: int
) -> None:
    ids = torch.randint(0, VOCAB, (5000,), generator=torch.Generator().manual_seed(0))
    score = evaluate_text(uniform_model, ids, 64, protocol=protocol, stride=stride, max_tokens=1000)  # type: ignore[arg-type]
    assert score.ppl == pytest.approx(VOCAB, rel=1e-6)
    assert score.nll == pytest.approx(math.log(VOCAB), rel=1e-6)
    assert (score.tokens, score.windows, score.protocol) == (tokens, windows, protocol)


def test_nll_is_the_mean_over_the_scored_targets_only() -> None:
    """A model that is sure of token 0: NLL is -log p(0) where 0 follows, so it counts the scored zeros."""
    ids = torch.tensor([1, 0, 1, 1, 0, 0, 1, 1, 1], dtype=torch.int64)

    def sure_of_zero(batch: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*batch.shape, 2)
        logits[..., 0] = math.log(3.0)  # p(0) = 3/4, p(1) = 1/4
        return logits

    score = evaluate_text(sure_of_zero, ids, 4, protocol="nonoverlapping", max_tokens=8)
    targets = ids[1:9]
    expected = -sum(math.log(0.75) if t == 0 else math.log(0.25) for t in targets.tolist()) / 8
    assert score.nll == pytest.approx(expected)


def copy_oracle(ids: torch.Tensor) -> torch.Tensor:
    """A perfect copy model: after SEP at s, position p emits ids[p - s + 1], then EOS."""
    logits = torch.zeros(*ids.shape, len(COPY.vocab()))
    for row in range(ids.shape[0]):
        sep = int((ids[row] == SEP).nonzero()[0])
        size = sep - 1
        for position in range(sep, ids.shape[1]):
            offset = position - sep
            token = int(ids[row, offset + 1]) if offset < size else EOS
            logits[row, position, token] = 10.0
    return logits


def test_exact_match_is_one_for_an_oracle_and_zero_when_one_token_is_wrong() -> None:
    [perfect] = evaluate_tokens(copy_oracle, COPY, 6, batch_size=4)
    assert (perfect["exact_match"], perfect["token_accuracy"], perfect["samples"]) == (1.0, 1.0, 10)

    def wrong_eos(ids: torch.Tensor) -> torch.Tensor:
        logits = copy_oracle(ids)
        logits[..., EOS] = -10.0  # never predicts EOS: every target but the last is right
        return logits

    [missing_eos] = evaluate_tokens(wrong_eos, COPY, 6)
    assert missing_eos["exact_match"] == 0.0
    assert missing_eos["token_accuracy"] == pytest.approx(6 / 7)  # six symbols right, EOS wrong
