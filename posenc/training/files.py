"""Atomic file writes and the saved-model format (``model.safetensors`` + ``model.json``).

Every file a job writes goes to a temporary name in the same directory and is moved into place with
``os.replace``, so a reader (or a redelivered job) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from posenc.training.graph_task import GraphTransformer
from posenc.training.model import ModelConfig, TinyTransformer
from posenc.training.vit import VisionTransformer


def _temporary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    temporary = _temporary(path)
    temporary.write_bytes(data)
    os.replace(temporary, path)


def write_json_atomic(path: Path, value: Any) -> None:
    """JSON with ``allow_nan=False``: a non-finite number is a bug here, not a file to write."""
    write_bytes_atomic(path, json.dumps(value, indent=1, allow_nan=False).encode())


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def save_model(
    model: TinyTransformer | VisionTransformer | GraphTransformer,
    metadata: dict[str, Any],
    directory: Path,
    stem: str = "model",
) -> None:
    """Weights as ``<stem>.safetensors`` and ``{"config": ..., **metadata}`` as ``<stem>.json``."""
    weights = {name: tensor.detach().cpu().contiguous() for name, tensor in model.state_dict().items()}
    temporary = _temporary(directory / f"{stem}.safetensors")
    save_file(weights, str(temporary))
    os.replace(temporary, directory / f"{stem}.safetensors")
    write_json_atomic(directory / f"{stem}.json", {"config": model.config.to_json(), **metadata})


def load_model(directory: Path, stem: str = "model", device: str = "cpu") -> tuple[TinyTransformer, dict[str, Any]]:
    """Rebuild a saved model (weights exactly as saved) and return it with its JSON metadata."""
    metadata: dict[str, Any] = read_json(directory / f"{stem}.json")
    model = TinyTransformer(ModelConfig.from_json(metadata["config"]))
    model.load_state_dict(load_file(str(directory / f"{stem}.safetensors")))
    model.eval()
    return model.to(torch.device(device)), metadata
