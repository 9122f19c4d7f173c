"""Runs llama.cpp's own converter (``convert_hf_to_gguf.py`` with its vendored ``gguf-py``, unpacked into
``.venv/llama.cpp`` by ``make install``) on Hugging Face model directories, in a subprocess: the converter's
``gguf-py`` is put first on ``sys.path`` there and must not shadow the installed ``gguf`` package that posenc
uses in the test process. Every conversion of a test session runs in one such subprocess (``convert_all``).

The tokenizer: a tiny random model has none that the converter accepts (its ``set_vocab`` wants a sentencepiece
model, or a BPE tokenizer whose pre-tokenizer hash it knows, from a real checkpoint), and none of the rope keys
depend on it. The subprocess therefore replaces each model's ``set_vocab`` with one that writes a trivial vocabulary
(one token per id, type normal); every other step is the converter's own (``set_gguf_parameters``, the extra rope
tensors, the tensors themselves).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

LLAMA_CPP = Path(__file__).resolve().parents[2] / ".venv" / "llama.cpp"


def converter_present() -> bool:
    """Whether ``make install`` unpacked the converter (``.venv/llama.cpp/convert_hf_to_gguf.py``)."""
    return (LLAMA_CPP / "convert_hf_to_gguf.py").is_file() and (LLAMA_CPP / "gguf-py" / "gguf").is_dir()


def convert_all(jobs: Mapping[str, tuple[Path, Path]], timeout: float = 300.0) -> dict[str, str]:
    """Converts every model directory of ``jobs`` (name -> (model directory, GGUF path)) in one subprocess; returns
    name -> the converter's error for the ones it refused (empty when all were written)."""
    spec = {name: [str(model), str(out)] for name, (model, out) in jobs.items()}
    result = subprocess.run(
        [sys.executable, __file__, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONPATH": ""},  # the converter's own gguf-py goes first on sys.path there
        cwd=LLAMA_CPP,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the converter's subprocess failed ({result.returncode}):\n{result.stderr[-4000:]}")
    errors: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    return errors


def _trivial_vocab(model: object) -> None:
    """A vocabulary of ``vocab_size`` placeholder tokens (the converter's own ``set_vocab`` needs a real tokenizer)."""
    hparams = model.hparams  # type: ignore[attr-defined]
    size = int(hparams.get("vocab_size") or hparams.get("text_config", {}).get("vocab_size") or 32)
    writer = model.gguf_writer  # type: ignore[attr-defined]
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([f"<t{i}>" for i in range(size)])
    writer.add_token_scores([0.0] * size)
    writer.add_token_types([1] * size)


def _run(spec: Mapping[str, list[str]]) -> dict[str, str]:
    """In the subprocess: the converter's main() steps for each model (text model, output type f32)."""
    import logging
    import traceback
    import types

    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    sys.path.insert(0, str(LLAMA_CPP))
    import gguf  # the converter's own
    import torch
    from conversion import ModelBase, ModelType, get_model_architecture, get_model_class

    logging.basicConfig(level=logging.WARNING)
    errors: dict[str, str] = {}
    for name, (model_dir, out) in spec.items():
        try:
            with torch.inference_mode():
                hparams = ModelBase.load_hparams(Path(model_dir), False)
                model_class = get_model_class(get_model_architecture(hparams, ModelType.TEXT), mmproj=False)
                model = model_class(Path(model_dir), gguf.LlamaFileType.ALL_F32, Path(out))
                for target in (model, getattr(model, "impl", None)):  # Mistral3Model converts through its impl
                    if target is not None:
                        target.set_vocab = types.MethodType(_trivial_vocab, target)
                model.write()
        except Exception:  # reported to the test, which names the model
            errors[name] = traceback.format_exc(limit=4)
    return errors


if __name__ == "__main__":
    print(json.dumps(_run(json.loads(sys.argv[1]))))
