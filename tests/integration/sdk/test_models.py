"""Real models' configs through the SDK and the CLI against a live gateway: the real-models page's examples as
written (docs/real-models.md, from the repository root), ``client.models`` sync and async, and
``posenc-client rope doctor`` on a config file with a known bug."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posenc.real_models.presets import PRESETS

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
CLI = str(Path(sys.executable).with_name("posenc-client"))
BLOCK = re.compile(r"<!-- rope-examples:begin -->(.*?)<!-- rope-examples:end -->", re.S)


def page_blocks(language: str) -> list[str]:
    match = BLOCK.search((ROOT / "docs" / "real-models.md").read_text())
    assert match, "docs/real-models.md has no rope-examples block"
    return re.findall(rf"```{language}\n(.*?)```", match.group(1), flags=re.S)


def buggy_gemma_config() -> dict[str, Any]:
    """Gemma 3 (v5, per layer type) with the global linear factor on its sliding layers too."""
    text = copy.deepcopy(PRESETS["gemma-3-4b"]["text_config"])
    del text["rope_scaling"], text["rope_local_base_freq"]
    linear = {"rope_type": "linear", "factor": 8.0}
    text["rope_parameters"] = {
        "full_attention": linear | {"rope_theta": 1000000.0},
        "sliding_attention": linear | {"rope_theta": 10000.0},
    }
    return {"model_type": "gemma3", "text_config": text}


def test_the_real_models_page_python_example_runs_as_written(compute_gateway: Any, tmp_path: Path) -> None:
    [example] = page_blocks("python")
    env = {**os.environ, "POSENC_BASE_URL": compute_gateway.url}
    ran = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("4 sliding_attention rope {'base': 10000.0} 1024")
    assert lines[1].startswith("5 full_attention rope_linear {'base': 1000000.0, 'factor': 8.0} None")
    assert lines[2].startswith("deepseek rotates [128, 192] softmax scale 0.1352")


def test_the_real_models_page_cli_examples_run_as_written(compute_gateway: Any, tmp_path: Path) -> None:
    [block] = page_blocks("bash")
    commands = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    assert [shlex.split(command)[:3] for command in commands] == [["posenc-client", "rope", "doctor"]] * 3 + [
        ["posenc-client", "rope", "serve-check"]
    ]
    # the example config is the port bug this module builds (buggy_gemma_config)
    assert json.loads((ROOT / "examples/models/gemma-3-4b-scaled-sliding/config.json").read_text()) == (
        buggy_gemma_config()
    )
    outputs = []
    for command in commands:  # from the repository root, as the page says
        argv = [CLI, "--base-url", compute_gateway.url, *shlex.split(command)[1:]]
        ran = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert ran.returncode == 0, ran.stderr
        outputs.append(ran.stdout)
    deepseek, gemma, gguf_file, serving = outputs
    assert "0-60" in deepseek
    assert "rope_yarn" in deepseek
    assert "[128:192] of 192" in deepseek
    assert "warning static_yarn (layers 0-60)" in deepseek
    assert "engine note mla_mscale_softmax (layers 0-60)" in deepseek
    assert "warning sliding_layers_scaled (layers 0-4,6-10,12-16,18-22,24-28,30-33)" in gemma
    assert "rope_llama3" in gguf_file
    assert "no warnings" in gguf_file  # the GGUF keeps every rope field of its source
    # dynamic NTK past its original length (32): cached keys go stale, the decode and chunked variants say where
    rows = [line.split() for line in serving.splitlines()]
    assert all(row[2] == "exact" for row in rows if row[1:2] == ["correct"])
    assert any(row[0].startswith("stale_cached_keys") and row[2] == "caught" for row in rows)


def test_doctor_json_and_errors(compute_gateway: Any, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2}))
    bad = subprocess.run(
        [CLI, "--base-url", compute_gateway.url, "rope", "doctor", str(tmp_path / "bad.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 1
    assert "num_attention_heads" in bad.stderr
    listed = subprocess.run(
        [CLI, "--base-url", compute_gateway.url, "rope", "presets", "--json"], capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert {preset["name"] for preset in json.loads(listed.stdout)} == set(PRESETS)


def test_models_sync_and_async(call: Callable[..., Any], tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(buggy_gemma_config()))
    from_file = call(lambda client: client.models.resolve(path))
    assert "sliding_layers_scaled" in {warning.code for warning in from_file.warnings}
    from_dict = call(lambda client: client.models.resolve(PRESETS["llama-3.1-8b"]))
    assert {layer.method for layer in from_dict.layers} == {"rope_llama3"}
    presets = call(lambda client: client.models.list())
    assert {preset.name for preset in presets} == set(PRESETS)
    rotated = call(
        lambda client: client.rotary.apply(
            {"random": {"shape": [1, 1, 4, 128], "seed": 1}}, config=PRESETS["qwen3-8b"], layer=0, rotate="query"
        )
    )
    assert tuple(rotated.q.shape) == (1, 1, 4, 128)
    assert rotated.meta["config_layer"]["method"] == "rope"


def test_position_ids_and_convert_sync_and_async(call: Callable[..., Any]) -> None:
    segments = [{"kind": "text", "length": 2}, {"kind": "image", "grid": [1, 4, 4]}]
    result = call(lambda client: client.rope.position_ids(segments))
    assert result.ids == [[0, 1, 2, 2, 2, 2], [0, 1, 2, 2, 3, 3], [0, 1, 2, 3, 2, 3]]
    converted = call(lambda client: client.models.convert(PRESETS["llama-3.1-8b"], "v5"))
    assert converted["rope_parameters"]["rope_theta"] == 500000.0
    assert "rope_scaling" not in converted


def test_diagnostics_sync_and_async(call: Callable[..., Any]) -> None:
    gemma = {"config": PRESETS["gemma-3-4b"], "layer": 5}
    report = call(lambda client: client.rope.frequencies(gemma, train_length=32768))
    assert len(report["pairs"]) == 128
    decoded = call(lambda client: client.rope.decode({"method": "rope", "rotary_dim": 32}, prefill=4, steps=4))
    assert decoded["max_logit_error"] == 0.0
    parted = call(
        lambda client: client.rope.compare(
            {"method": "rope", "rotary_dim": 32}, {"method": "rope", "params": {"base": 10001}, "rotary_dim": 32},
            max_position=100000, tolerance_angle=1e-3,
        )
    )  # fmt: skip
    assert parted["first_angle_divergence"] is not None
    precise = call(lambda client: client.rope.precision({"method": "rope", "rotary_dim": 32}, positions_per_band=4))
    assert precise["dtype"] == "bfloat16"
    assert call(lambda client: client.rope.permutation(4, "interleaved")) == [0, 2, 1, 3]
