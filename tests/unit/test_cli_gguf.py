"""``posenc-client rope doctor model.gguf --against config.json`` against a live gateway (uvicorn in a thread,
the real app): the table and the comparison's warnings, and one line with exit status 2 for a file that is not a
GGUF, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from posenc_client.cli import main

from posenc.real_models.presets import PRESETS
from posenc.settings import Settings
from tests.helpers.gguf_writer import convert
from tests.helpers.threads import app_in_thread

LLAMA = PRESETS["llama-3.1-8b"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(
        redis_url=None, api_keys=[], rate_limit_per_minute=None, cors_origins=[], data_dir=None, data_dirs=[],
        state_dir=tmp_path_factory.mktemp("state"),
    )  # fmt: skip
    with app_in_thread(settings) as url:
        yield url


def write_llama(path: Path, *, rope_freqs: bool = True) -> Path:
    return convert(LLAMA, path, rope_freqs=rope_freqs)


def doctor(gateway: str, *args: str) -> list[str]:
    return ["--base-url", gateway, "--max-retries", "0", "rope", "doctor", *args]


def test_doctor_reads_a_gguf_and_compares_it(gateway: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA))
    model = write_llama(tmp_path / "model.gguf")
    assert main(doctor(gateway, str(model), "--against", str(config))) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "model_type: llama  layers: 32"
    assert "rope_llama3" in out
    assert "no warnings" in out

    dropped = write_llama(tmp_path / "dropped.bin", rope_freqs=False)  # recognised by its magic, not its suffix
    assert main(doctor(gateway, str(dropped), "--against-preset", "llama-3.1-8b")) == 0
    out = capsys.readouterr().out
    assert "warning gguf_field_dropped: rope_scaling.factor is 8.0 in the config and missing from the GGUF" in out
    assert "warning gguf_layers_differ (layers 0-31)" in out

    assert main(doctor(gateway, str(model), "--json")) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["config"]["rope_scaling"]["factor"] == 8.0
    assert body["against"] is None


def test_a_bad_gguf_or_a_misplaced_against_is_one_line_and_exit_2(
    gateway: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + b"\x00" * 10)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA))
    cases = {
        (str(broken),): f"{broken}: truncated",
        (str(tmp_path / "missing.gguf"),): f"{tmp_path / 'missing.gguf'}: cannot read it",
        (str(config), "--against", str(config)): "--against and --against-preset compare a .gguf file",
    }
    for args, start in cases.items():
        assert main(doctor(gateway, *args)) == 2, args
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        [line] = captured.err.splitlines()
        assert line.startswith(f"posenc-client: {start}"), line
