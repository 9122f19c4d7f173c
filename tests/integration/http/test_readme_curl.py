"""The curl examples of the README's tour and of the Compute API page (docs/compute.md), run as written against the
real app served by uvicorn on a free port."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import safetensors.torch

ROOT = Path(__file__).resolve().parents[3]
BEGIN, END = "<!-- curl-examples:begin -->", "<!-- curl-examples:end -->"
README_ADDRESS = "http://127.0.0.1:8000"


COMPUTE_PAGE = ROOT / "docs" / "compute.md"


def readme_examples() -> list[str]:
    text = COMPUTE_PAGE.read_text()
    section = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("uvicorn") / "server.log"
    log = log_path.open("wb")  # a file, not a pipe: nobody reads a pipe while the tests run, and it would fill
    env = {key: value for key, value in os.environ.items() if not key.startswith("POSENC_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "service.main:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{address}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not come up:\n{log_path.read_text()}")
            time.sleep(0.2)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def check_methods(stdout: str, _: Path) -> None:
    body = json.loads(stdout)
    assert body["count"] == len(body["data"]) >= 1
    assert all(item["kind"] == "bias" for item in body["data"])
    assert "alibi" in {item["name"] for item in body["data"]}


def check_bias(stdout: str, _: Path) -> None:
    body = json.loads(stdout)
    bias = body["tensors"]["bias"]
    assert bias["shape"] == [4, 6, 6]
    assert bias["data"][1] == "-inf"
    assert body["meta"]["method"] == "alibi"


def check_toeplitz(stdout: str, workdir: Path) -> None:
    assert stdout == ""  # written to a file, not printed (262 KB)
    path = workdir / "alibi_toeplitz.safetensors"
    assert path.stat().st_size < 300_000
    tensors = safetensors.torch.load(path.read_bytes())
    assert tensors["bias"].shape == (8, 4096 + 4096 - 1)


def check_yarn_file(_: str, workdir: Path) -> None:
    tensors = safetensors.torch.load((workdir / "yarn_qk.safetensors").read_bytes())
    assert set(tensors) == {"q", "k", "cos", "sin"}
    assert tensors["q"].shape == tensors["k"].shape == (1, 4, 1024, 64)
    assert tensors["cos"].shape == (1024, 32)


def check_attention(stdout: str, _: Path) -> None:
    body = json.loads(stdout)
    assert body["tensors"]["weights"]["shape"] == [1, 2, 8, 8]
    assert body["tensors"]["entropy"]["shape"] == [2]
    assert body["tensors"]["mean_distance"]["shape"] == [2]
    assert body["tensors"]["mass_by_distance"]["shape"] == [2, 8]


def check_decode_step(stdout: str, _: Path) -> None:
    body = json.loads(stdout)
    bias = body["tensors"]["bias"]
    assert bias["shape"] == [2, 1, 8]
    assert "-inf" not in bias["data"], "the decode query is the last token: it sees every cached key"
    assert body["meta"]["query_offset"] == 7


def check_grid_attention(stdout: str, _: Path) -> None:
    body = json.loads(stdout)
    assert body["tensors"]["weights"]["shape"] == [1, 2, 13, 13]
    assert body["meta"]["causal"] is False
    assert body["meta"]["tokens"].startswith("grid [3, 4] with 1 prefix")


def check_graph_bias(stdout: str, _: Path) -> None:
    body = json.loads(stdout)
    bias = body["tensors"]["bias"]
    assert bias["shape"] == [2, 5, 5]
    values = bias["data"]  # row-major (H, 5, 5): token 0 is the virtual graph token
    assert values[0] == values[1] == values[5]  # its learned distance t on row 0 and column 0
    assert values[6] == values[12]  # nodes 0 and 1 each at hop distance 0 from themselves


CHECKS: list[Callable[[str, Path], None]] = [
    check_methods,
    check_bias,
    check_toeplitz,
    check_yarn_file,
    check_attention,
    check_decode_step,
    check_grid_attention,
    check_graph_bias,
]


def test_the_readme_shows_its_curl_examples() -> None:
    examples = readme_examples()
    assert len(examples) == len(CHECKS)
    assert all(example.startswith("curl ") and README_ADDRESS in example for example in examples)


def test_the_readme_tour_curl_is_one_of_the_examples_run_here() -> None:
    """The README shows one compute curl call; it is run here as one of the Compute API page's examples."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.DOTALL)
    compute = [block for block in blocks if block.startswith("curl --fail-with-body")]
    assert compute, "the README's tour lost its curl call"
    assert all(block in readme_examples() for block in compute)


@pytest.mark.parametrize("index", range(len(CHECKS)))
def test_readme_curl_example(server: str, tmp_path: Path, index: int) -> None:
    example = readme_examples()[index].replace(README_ADDRESS, server)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{example}\nstdout: {result.stdout[:2000]}\nstderr: {result.stderr}"
    CHECKS[index](result.stdout, tmp_path)


def test_readme_python_safetensors_example(server: str, tmp_path: Path) -> None:
    """The Compute API page's safetensors request from Python, run as written (the address pointed at the test
    server)."""
    text = COMPUTE_PAGE.read_text()
    begin, end = "<!-- python-binary-example:begin -->", "<!-- python-binary-example:end -->"
    [example] = re.findall(r"```python\n(.*?)```", text[text.index(begin) : text.index(end)], flags=re.DOTALL)
    result = subprocess.run(
        [sys.executable, "-c", example.replace(README_ADDRESS, server)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[('k', (1, 8, 2048, 64)), ('q', (1, 8, 2048, 64))]"
