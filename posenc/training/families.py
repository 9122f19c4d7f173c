"""The torch half of each task family: the batches it trains on, the model it trains, and the score of one
evaluation size. The spec half (sizes, units, validation, metrics, generation of token tasks) is the family's
own (``posenc.tasks``); ``trainer_for`` picks the half by the family's ``model``:

- ``text``    a character-level LM (``TinyTransformer``) on the family's corpus, perplexity by length;
- ``tokens``  the same decoder on any token task (sequence tasks, probes): batches of the family's own
              instances, scored by the family's metrics per group of tags (``evaluate_tokens``);
- ``images``  the ViT of ``posenc.training.vit``, top-1 accuracy by resolution;
- ``graphs``  the graph transformer of ``posenc.training.graph_task``, accuracy by graph size.

A score is a list of *cells*, each ``{"size": s, **tags, metric: value, ...}``: one per size, or one per group
of tags (a probe and a depth) for token tasks.

``Trainer.until`` is ``train.until``'s check: the same scoring at the training size, on the family's held-out
data for the checks (``Family.held_out``), judged by the family's rule (``Family.until_reached``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch

from posenc.errors import InvalidInput
from posenc.schemas.jobs import MethodRef, UntilSpec
from posenc.tasks import Family, TokenTask
from posenc.tasks.base import SPEC
from posenc.tasks.graphs import Graphs
from posenc.tasks.images import Images
from posenc.tasks.text import Text
from posenc.training.data import char_corpus, load_corpus_text, text_batch, token_batch
from posenc.training.evaluate import evaluate_graphs, evaluate_images, evaluate_text, evaluate_tokens
from posenc.training.graph_task import GraphModelConfig, distance_classes, graph_batch
from posenc.training.model import ModelConfig
from posenc.training.train import AnyConfig, Batch, BatchSource, Model, Until
from posenc.training.vision import image_batch, task_classes
from posenc.training.vit import ViTConfig

F = TypeVar("F", bound=Family)
Cell = dict[str, Any]
HELD_OUT_SEED_OFFSET = 0xC4EC  # train.until's held-out draw, apart from the batches' and the weights' seeds


@dataclass(frozen=True)
class PreparedData:
    """The vocabulary (classification tasks: the class names), a batch source for training and the validation
    ids (text)."""

    vocab: tuple[str, ...]
    batches: BatchSource
    val: torch.Tensor | None = None  # (N_val,) int64 for text


class Trainer(ABC, Generic[F]):
    """The torch half of one family: ``family`` is its spec half for one job spec."""

    def __init__(self, family: F) -> None:
        self.family = family
        self.spec = family.spec

    @abstractmethod
    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        """Load or set up the data; ``vocab`` fixes the vocabulary of an already trained model."""

    @abstractmethod
    def model_config(self, ref: MethodRef, vocab_size: int) -> AnyConfig: ...

    @abstractmethod
    def score(self, model: Model, data: PreparedData, size: int, device: str) -> list[Cell]:
        """The cells of one evaluation size."""

    def until(self, until: UntilSpec, data: PreparedData, seed: int, device: str) -> Until:
        """``train.until`` for a run of ``seed``: every ``until.every`` steps, this trainer's own ``score`` at the
        training size over ``until.samples`` held-out examples (``Family.held_out``, drawn from the run's seed
        and the same at every check), judged by ``Family.until_reached``."""
        family = self.family
        held_out = type(self)(family.held_out(until.samples, (seed + HELD_OUT_SEED_OFFSET) % 2**32))
        size = family.train_size()

        def check(model: Model) -> tuple[float | None, bool]:
            return family.until_reached(held_out.score(model, data, size, device), until.score)

        return Until(every=until.every, check=check)

    def decoder_config(self, ref: MethodRef, vocab_size: int) -> ModelConfig:
        model = self.spec.model
        setups = self.family.layer_setups(ref)  # a layer pattern's, resolved; None for a plain entry
        return ModelConfig(
            vocab_size=vocab_size,
            layers=model.layers,
            dim=model.dim,
            heads=model.heads,
            ffn_mult=model.ffn_mult,
            pairing=model.pairing,
            # a config's entry has no method of its own: the model's is its first layer's
            method=setups[0].method if ref.method is None and setups else ref.method_name,
            params=dict(ref.params),
            train_length=self.family.train_tokens(),
            layer_setups=None if setups is None else [setup.to_json() for setup in setups],
        )


class TextTrainer(Trainer[Text]):
    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        family = self.family
        corpus = char_corpus(load_corpus_text(family.corpus, data_dir), family.val_fraction, vocab)
        length, batch_size = self.family.train_size(), self.spec.train.batch_size

        def text_batches(generator: torch.Generator) -> Batch:
            inputs, targets = text_batch(corpus.train, length, batch_size, generator)
            return Batch(inputs, targets)

        return PreparedData(vocab=corpus.vocab, batches=text_batches, val=corpus.val)

    def model_config(self, ref: MethodRef, vocab_size: int) -> AnyConfig:
        return self.decoder_config(ref, vocab_size)

    def score(self, model: Model, data: PreparedData, size: int, device: str) -> list[Cell]:
        evaluation = self.spec.eval
        assert data.val is not None
        if len(data.val) - 1 < size:
            raise InvalidInput(
                (*SPEC, "eval", "lengths"), f"length {size} is longer than the {len(data.val)}-char validation split"
            )
        score = evaluate_text(
            model,
            data.val,
            size,
            protocol=evaluation.protocol,
            stride=evaluation.stride,
            max_tokens=evaluation.max_tokens,
            device=device,
        ).to_json()
        cell = {"size": score.pop("length"), **score}
        if not math.isfinite(cell["ppl"]):
            cell["ppl"] = None
        return [cell]


class TokenTrainer(Trainer[TokenTask]):
    """Any token task: the decoder trained on the family's instances, the loss on the target and EOS."""

    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        family, batch_size = self.family, self.spec.train.batch_size

        def token_batches(generator: torch.Generator) -> Batch:
            drawn = token_batch(family.train_instances(batch_size, generator))
            return Batch(drawn.inputs, drawn.targets, drawn.loss_mask)

        return PreparedData(vocab=family.vocab(), batches=token_batches)

    def model_config(self, ref: MethodRef, vocab_size: int) -> AnyConfig:
        return self.decoder_config(ref, vocab_size)

    def score(self, model: Model, data: PreparedData, size: int, device: str) -> list[Cell]:
        return evaluate_tokens(model, self.family, size, device=device)


class ImageTrainer(Trainer[Images]):
    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        task, size, batch_size = self.family.task, self.family.train_size(), self.spec.train.batch_size
        tokens = batch_size * self.family.tokens(size)

        def image_batches(generator: torch.Generator) -> Batch:
            images, labels = image_batch(task, batch_size, size, generator)  # fresh scenes every step
            return Batch(images, labels, tokens=tokens)

        return PreparedData(vocab=task_classes(task), batches=image_batches)

    def model_config(self, ref: MethodRef, vocab_size: int) -> AnyConfig:
        model = self.spec.model
        return ViTConfig(
            num_classes=vocab_size,
            image_size=self.family.train_size(),
            patch_size=self.family.patch,
            layers=model.layers,
            dim=model.dim,
            heads=model.heads,
            ffn_mult=model.ffn_mult,
            cls_token=model.cls_token,
            pairing=model.pairing,
            method=ref.method_name,
            params=dict(ref.params),
        )

    def score(self, model: Model, data: PreparedData, size: int, device: str) -> list[Cell]:
        score = evaluate_images(
            model, self.family.task, size, samples=self.spec.eval.samples, device=device, seed=self.family.held_out_seed
        )
        cell = score.to_json()
        return [{"size": cell.pop("resolution"), **cell}]


class GraphTrainer(Trainer[Graphs]):
    def prepare(self, data_dir: Path | None, vocab: tuple[str, ...] | None) -> PreparedData:
        family = self.family
        task, nodes, batch_size = family.task, family.train_size(), self.spec.train.batch_size
        tokens = batch_size * family.tokens(nodes)

        def graph_batches(generator: torch.Generator) -> Batch:
            drawn = graph_batch(
                task, batch_size, nodes, generator, family=family.graph_family, max_distance=family.max_distance
            )
            return Batch(drawn.packed(), drawn.labels, tokens=tokens)  # fresh graphs every step

        return PreparedData(vocab=distance_classes(family.max_distance), batches=graph_batches)

    def model_config(self, ref: MethodRef, vocab_size: int) -> AnyConfig:
        model, family = self.spec.model, self.family
        return GraphModelConfig(
            layers=model.layers,
            dim=model.dim,
            heads=model.heads,
            ffn_mult=model.ffn_mult,
            method=ref.method_name,
            params=dict(ref.params),
            virtual_token=model.cls_token,
            train_nodes=family.train_size(),
            task=family.task,
            family=family.graph_family,
            max_distance=family.max_distance,
        )

    def score(self, model: Model, data: PreparedData, size: int, device: str) -> list[Cell]:
        family = self.family
        score = evaluate_graphs(
            model,
            family.task,
            size,
            family=family.graph_family,
            max_distance=family.max_distance,
            samples=self.spec.eval.samples,
            device=device,
            seed=family.held_out_seed,
        ).to_json()
        return [{"size": score.pop("num_nodes"), **score}]


TRAINERS: dict[str, type[Trainer[Any]]] = {
    "text": TextTrainer,
    "tokens": TokenTrainer,
    "images": ImageTrainer,
    "graphs": GraphTrainer,
}


def trainer_for(family: Family) -> Trainer[Any]:
    """The torch half of a family, by its ``model``."""
    return TRAINERS[family.model](family)
