"""The saved-model format (``model.safetensors`` + ``model.json``), written atomically (``posenc.files``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from posenc.files import read_json, write_atomic, write_json_atomic
from posenc.training.graph_task import GraphTransformer
from posenc.training.model import ModelConfig, TinyTransformer
from posenc.training.vit import VisionTransformer


def save_model(
    model: TinyTransformer | VisionTransformer | GraphTransformer,
    metadata: dict[str, Any],
    directory: Path,
    stem: str = "model",
) -> None:
    """Weights as ``<stem>.safetensors`` and ``{"config": ..., **metadata}`` as ``<stem>.json``."""
    weights = {name: tensor.detach().cpu().contiguous() for name, tensor in model.state_dict().items()}
    write_atomic(directory / f"{stem}.safetensors", lambda temporary: save_file(weights, str(temporary)))
    write_json_atomic(directory / f"{stem}.json", {"config": model.config.to_json(), **metadata})


def load_model(directory: Path, stem: str = "model", device: str = "cpu") -> tuple[TinyTransformer, dict[str, Any]]:
    """Rebuild a saved model (weights exactly as saved) and return it with its JSON metadata."""
    metadata: dict[str, Any] = read_json(directory / f"{stem}.json")
    model = TinyTransformer(ModelConfig.from_json(metadata["config"]))
    model.load_state_dict(load_file(str(directory / f"{stem}.safetensors")))
    model.eval()
    return model.to(torch.device(device)), metadata
