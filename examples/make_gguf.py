"""Regenerates ``examples/models/tiny-llama3.gguf`` and the config it was converted from,
``examples/models/tiny-llama3/config.json``.

The GGUF is written by llama.cpp's own converter (``convert_hf_to_gguf.py``, unpacked into ``.venv/llama.cpp`` by
``make install``) from a tiny random Llama 3 model that transformers saves (2 layers, 64 features, head size 32,
Llama 3.1's rope scaling: theta 500,000, factor 8, bands 1 and 4 over an original context of 8,192). The file is
a few tens of KB, so the repository carries it and ``posenc-client rope doctor`` has a real GGUF to read:

    .venv/bin/python examples/make_gguf.py
    posenc-client rope doctor examples/models/tiny-llama3.gguf --against examples/models/tiny-llama3/config.json

Needs transformers and torch (the test dependencies). The converter's tokenizer step wants a real tokenizer (a
sentencepiece model, or a BPE one whose pre-tokenizer it knows); a random model has none, and no rope key depends
on it, so the conversion subprocess swaps that one step for a placeholder vocabulary (one token per id). Every
other step is the converter's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMA_CPP = ROOT / ".venv" / "llama.cpp"
MODELS = ROOT / "examples" / "models"
NAME = "tiny-llama3"

# A Llama 3.1 config at toy size: the rope fields are Llama 3.1 8B's, the sizes are as small as the converter and
# the Llama 3 bands allow (16 rotary pairs, so the three bands each get some).
CONFIG = {
    "vocab_size": 32,
    "hidden_size": 64,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "rope_parameters": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


def save_model(directory: Path) -> None:
    """Saves the tiny random model (weights, config.json) with transformers, weights from seed 0."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**CONFIG))
    model.save_pretrained(directory)


def convert(model_dir: Path, gguf_path: Path) -> None:
    """Runs the converter on ``model_dir`` in a subprocess whose ``sys.path`` starts with the converter's own
    gguf-py (it must not mix with the ``gguf`` package installed in the venv)."""
    if not (LLAMA_CPP / "convert_hf_to_gguf.py").is_file():
        sys.exit(f"{LLAMA_CPP}/convert_hf_to_gguf.py is missing: run `make install` first")
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--convert", str(model_dir), str(gguf_path)],
        check=True,
        cwd=LLAMA_CPP,
        env={**os.environ, "PYTHONPATH": ""},
    )


def _placeholder_vocab(model: object) -> None:
    """Stands in for the converter's set_vocab: ``vocab_size`` tokens named <t0>, <t1>, ..., all of type normal."""
    size = int(model.hparams["vocab_size"])  # type: ignore[attr-defined]
    writer = model.gguf_writer  # type: ignore[attr-defined]
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([f"<t{index}>" for index in range(size)])
    writer.add_token_scores([0.0] * size)
    writer.add_token_types([1] * size)


def _convert_here(model_dir: Path, gguf_path: Path) -> None:
    """In the subprocess: the converter's own steps (architecture lookup, model class, write), f16 weights."""
    import types

    sys.path[:0] = [str(LLAMA_CPP / "gguf-py"), str(LLAMA_CPP)]
    import gguf
    import torch
    from conversion import ModelBase, ModelType, get_model_architecture, get_model_class

    with torch.inference_mode():
        hparams = ModelBase.load_hparams(model_dir, False)
        model_class = get_model_class(get_model_architecture(hparams, ModelType.TEXT), mmproj=False)
        model = model_class(model_dir, gguf.LlamaFileType.MOSTLY_F16, gguf_path)
        model.set_vocab = types.MethodType(_placeholder_vocab, model)
        model.write()


def main() -> None:
    config_dir = MODELS / NAME
    config_dir.mkdir(parents=True, exist_ok=True)
    gguf_path = MODELS / f"{NAME}.gguf"
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = Path(scratch) / NAME
        save_model(model_dir)
        convert(model_dir, gguf_path)
        saved = json.loads((model_dir / "config.json").read_text())
    (config_dir / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    print(f"wrote {gguf_path.relative_to(ROOT)} ({gguf_path.stat().st_size} bytes) and {NAME}/config.json")  # noqa: T201 (a script's report)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--convert":
        _convert_here(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
