"""Text: a character-level language model on a corpus (``data.corpus``), perplexity by evaluation length.

Unit: tokens (characters). The training length is ``train.length``, the evaluation lengths ``eval.lengths``,
default the ALiBi paper's grid L, 2L, 4L, 8L, read under the ``eval.protocol``:
non-overlapping windows, or a sliding window whose stride is ``eval.stride`` (default L/2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from posenc.corpora import check_corpus, data_directories
from posenc.errors import InvalidInput
from posenc.schemas.jobs import JobKind
from posenc.tasks.base import SPEC, Family

LENGTH_FACTORS = (1, 2, 4, 8)


class Text(Family):
    name = "text"
    unit = "tokens"
    model = "text"
    metric = "ppl"
    metrics = ("ppl", "nll")
    higher_is_better = False
    train_field = ("train", "length")
    eval_field = ("eval", "lengths")
    data_fields = ("val_fraction",)
    eval_fields = ("lengths", "protocol", "stride", "max_tokens")
    reads_train_length = True

    @classmethod
    def task_names(cls) -> tuple[str, ...]:
        return ()

    @classmethod
    def about(cls, task: str) -> str:
        return "a character-level LM on 'stdlib', 'tinyshakespeare' or a text file under the data directories"

    @property
    def corpus(self) -> str:
        assert self.spec.data.corpus is not None
        return self.spec.data.corpus

    @property
    def val_fraction(self) -> float:
        return self.spec.data.val_fraction

    def train_size(self) -> int:
        return self.spec.train.length

    def default_eval_sizes(self) -> list[int]:
        return [factor * self.train_size() for factor in LENGTH_FACTORS]

    def given_eval_sizes(self) -> list[int] | None:
        return None if self.spec.eval.lengths is None else list(self.spec.eval.lengths)

    def tokens(self, size: int) -> int:
        return size

    def eval_tokens(self, size: int) -> int:
        """Non-overlapping windows of ``size`` cover ``max_tokens``; sliding windows advance by the stride
        (default size // 2, as ``posenc.training.evaluate.default_stride``) and each reads ``size`` tokens;
        either way at least one window."""
        evaluation = self.spec.eval
        if evaluation.protocol == "nonoverlapping":
            return max(size, evaluation.max_tokens // size * size)
        stride = min(size, evaluation.stride if evaluation.stride is not None else max(1, size // 2))
        windows = 1 + max(0, evaluation.max_tokens - size) // stride
        return windows * size

    def validate(self, kind: JobKind, data_dirs: Sequence[Path] | None = None) -> None:
        super().validate(kind, data_dirs)
        check_corpus(self.corpus, data_dirs if data_dirs is not None else data_directories())
        stride = self.spec.eval.stride
        if self.spec.eval.protocol == "sliding" and stride is not None and stride > min(self.eval_sizes()):
            raise InvalidInput(
                (*SPEC, "eval", "stride"), f"stride {stride} is longer than eval length {min(self.eval_sizes())}"
            )

    def protocol(self) -> str:
        return self.spec.eval.protocol

    def title(self) -> str:
        protocol = self.spec.eval.protocol
        return f"{self.task}: {self.metric} vs length (tokens, {protocol}), trained at {self.train_size()}"

    def held_out(self, samples: int, seed: int) -> Self:
        """``train.until``'s held-out data: the first ``samples`` non-overlapping windows of the training length
        of the validation split (the same at every check; ``seed`` draws nothing)."""
        evaluation = self.spec.eval.model_copy(
            update={"protocol": "nonoverlapping", "stride": None, "max_tokens": samples * self.train_size()}
        )
        return type(self)(self.spec.model_copy(update={"eval": evaluation}))

    def learned(self, in_distribution: Mapping[str, float | None]) -> bool | None:
        return None  # perplexity has no threshold of having learned
