"""Corpora and text batches: deterministic, split nanoGPT-style (token tasks: tests/unit/tasks)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.training import data
from posenc.training.data import char_corpus, load_corpus_text, text_batch


def test_char_corpus_sorted_vocab_and_train_first_split() -> None:
    corpus = char_corpus("abcabcabcd", val_fraction=0.1)
    assert corpus.vocab == ("a", "b", "c", "d")
    assert corpus.train.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    assert corpus.val.tolist() == [3]


def test_text_batches_are_determined_by_the_generator_seed(text_file: Path) -> None:
    ids = char_corpus(text_file.read_text()).train

    def draw(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return text_batch(ids, 16, 4, torch.Generator().manual_seed(seed))

    first, again, other = draw(1), draw(1), draw(2)
    assert torch.equal(first[0], again[0])
    assert torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])
    inputs, targets = first
    assert inputs.shape == targets.shape == (4, 16)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the next characters


def test_tinyshakespeare_is_found_in_the_data_dir(data_dir: Path, shared_data_dir: Path | None) -> None:
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 40
    (data_dir / "tinyshakespeare.txt").write_text(text, encoding="utf-8")
    assert load_corpus_text("tinyshakespeare") == text  # POSENC_DATA_DIR
    corpus = char_corpus(load_corpus_text("tinyshakespeare", data_dir))
    assert corpus.vocab == tuple(sorted(set(text)))
    assert (len(corpus.train), len(corpus.val)) == (int(len(text) * 0.9), len(text) - int(len(text) * 0.9))
    if shared_data_dir is not None:  # the real file, when a shared data directory sits beside the checkout
        real = char_corpus(load_corpus_text("tinyshakespeare", shared_data_dir))
        assert real.vocab_size == 65
        assert (len(real.train), len(real.val)) == (1_003_854, 111_540)  # nanoGPT's split


def test_missing_corpus_is_an_invalid_input(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="a text file under the data directories") as missing:
        load_corpus_text(str(data_dir / "absent.txt"))
    assert missing.value.loc == ("body", "spec", "data", "corpus")
    with pytest.raises(InvalidInput, match=r"needs tinyshakespeare\.txt in a data directory"):
        load_corpus_text("tinyshakespeare", tmp_path)


def test_stdlib_corpus_is_deterministic_ascii_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "STDLIB_CORPUS_CHARS", 200_000)
    built = data.stdlib_corpus(tmp_path)
    assert len(built) == 200_000
    assert built.isascii()
    assert "def " in built
    assert "import " in built
    assert data.build_stdlib_corpus(200_000) == built
    [cached] = tmp_path.iterdir()
    assert cached.read_text() == built
    assert data.stdlib_corpus(tmp_path) == built
