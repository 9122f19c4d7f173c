"""The CUDA path: every method gives the CPU answer on the GPU, and a training job runs there.

Marked ``gpu``; skipped with a reason where CUDA is absent (CI has no GPU). Run on a CUDA host with
``pytest -m gpu``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
import torch

import posenc.pe as pe
from posenc.schemas.jobs import JobSpec
from posenc.settings import get_settings
from posenc.training.hooks import NoHooks
from posenc.training.jobs import run_job

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA; this host has no usable GPU"),
]
CUDA = torch.device("cuda")


@pytest.mark.parametrize(
    "spec", [s for s in pe.list_methods("bias") if s.axes == 1 or s.name == "alibi_2d"], ids=lambda s: s.name
)
def test_bias_on_cuda_matches_cpu(spec: pe.MethodSpec) -> None:
    params = spec.parse_params({"grid_width": 8} if spec.name == "alibi_2d" else {})
    cpu = pe.bias_dense(spec, params, pe.BiasContext(num_heads=4, query_length=64, key_length=64, causal=True))
    ctx = pe.BiasContext(num_heads=4, query_length=64, key_length=64, causal=True, device=CUDA)
    gpu = pe.bias_dense(spec, params, ctx)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", [s for s in pe.list_methods("rotary") if s.axes == 1], ids=lambda s: s.name)
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rotary_on_cuda_matches_cpu(
    spec: pe.MethodSpec, pairing: Literal["half", "interleaved"], example_params: Callable[..., dict[str, Any]]
) -> None:
    params = spec.parse_params(example_params(spec.name, rotary_dim=32))
    x = torch.randn(2, 4, 128, 32, generator=torch.Generator().manual_seed(0))
    results = []
    for device in (torch.device("cpu"), CUDA):
        positions = torch.arange(128, device=device) + 100_000  # far positions: where precision bugs show
        freqs = pe.rotary_frequencies(spec, params, pe.RotaryContext(rotary_dim=32, seq_len=100_128, device=device))
        cos, sin = pe.rotary_tables(freqs, positions)
        results.append(pe.apply_rotary(x.to(device), cos, sin, pairing=pairing).cpu())
    torch.testing.assert_close(results[1], results[0], rtol=1e-4, atol=1e-4)


def test_a_training_job_runs_on_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSENC_DATA_DIR", str(tmp_path))  # jobs read corpus files from the data dirs only
    get_settings.cache_clear()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    spec = JobSpec.model_validate(
        {
            "methods": [{"method": "rope"}],
            "data": {"corpus": str(corpus)},
            "model": {"layers": 1, "dim": 32, "heads": 2},
            "train": {"length": 32, "steps": 30, "batch_size": 8, "checkpoint_every": 10},
            "eval": {"lengths": [32, 64], "max_tokens": 512},
            "device": "cuda",
        }
    )
    try:
        result = run_job(
            "train", spec, job_dir=tmp_path / "job", artifact_root=tmp_path, hooks=NoHooks(), device="cuda"
        )
    finally:
        get_settings.cache_clear()
    assert result["device"] == "cuda"
    assert torch.isfinite(torch.tensor(result["final_loss"]))
    assert (tmp_path / "job" / "model.safetensors").is_file()


@pytest.mark.parametrize("name", ["alibi", "t5", "transformer_xl", "fox", "cope"])
def test_flex_attention_trains_like_the_materialised_path_on_cuda(name: str) -> None:
    """On CUDA, bias and score_mod methods train through compiled FlexAttention: output and gradients equal
    the materialised attention's."""
    from posenc.pe.appliers import Layer, build_applier, future_mask, positions

    if name not in {spec.name for spec in pe.list_methods()}:
        pytest.fail(f"{name} is not registered")
    spec = pe.get_method(name)
    layer = Layer(num_heads=4, head_dim=32, causal=True, model_dim=128, device=CUDA)
    applier = build_applier(spec, spec.parse_params({}), layer)
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(2, 4, 128, 32, generator=generator).to(CUDA).requires_grad_() for _ in range(3)]
    x = torch.randn(2, 128, 128, generator=generator).to(CUDA)
    flex = applier.flex_attend(*inputs, x=x)
    assert flex is not None
    flex_grads = torch.autograd.grad(flex.sum(), inputs)
    pos = positions(128, CUDA)
    reference = applier.attend(*inputs, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos), x=x).output
    assert reference is not None
    reference_grads = torch.autograd.grad(reference.sum(), inputs)
    torch.testing.assert_close(flex, reference, rtol=2e-4, atol=2e-4)
    for got, expected in zip(flex_grads, reference_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(
    ("name", "length", "path"),
    [("rope", 256, "sdpa_causal"), ("alibi", 256, "sdpa_mask"), ("fox", 256, "sdpa_mask"), ("alibi", 4160, "flex")],
)
def test_a_cuda_model_takes_the_path_table_s_choice_and_gives_the_cpu_output(
    name: str, length: int, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from posenc.training.model import ModelConfig, TinyTransformer, attention_paths_of

    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)  # a bf16 run before may have set it

    config = ModelConfig(vocab_size=32, layers=1, dim=32, heads=2, method=name, train_length=length)
    model = TinyTransformer(config, 0)
    ids = torch.randint(0, 32, (2, length), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cpu = model(ids)
        model.to(CUDA)
        assert attention_paths_of(model, "cuda") == [path]
        gpu = model(ids.to(CUDA)).cpu()
    torch.testing.assert_close(gpu, cpu, rtol=2e-4, atol=2e-4)
