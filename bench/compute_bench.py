"""Compute benchmarks, each reported as a ratio against a baseline measured in the same run.

Absolute times depend on the machine and on whoever else is using it; a ratio to a baseline that does
comparable memory traffic in the same process, seconds apart, says whether the code is near what the
hardware allows. Nothing here asserts a number: the script prints a table and a reader judges it.

    (a) ALiBi dense bias H=8, N=4096, float32 via posenc.pe.bias_dense   vs  torch clone of as many bytes
    (b) RoPE on q (1, 32, 4096, 128) via posenc.pe (half pairing)       vs  a plain rotate_half reference
    (c) 32 MiB application/octet-stream bias over loopback (live gateway) vs  an in-memory copy of 32 MiB
    (d) the same small bias (H=8, N=256) as application/json            vs  as application/octet-stream

(c) and (d) start the real gateway (``service.main:app``) with uvicorn in a subprocess on a free loopback
port. Usage, from the repository root:

    .venv/bin/python bench/compute_bench.py [--repeats 5] [--no-server]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from posenc import pe

REPO_ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024


@dataclass(frozen=True)
class Row:
    name: str
    measured_s: float
    baseline_name: str
    baseline_s: float
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.measured_s / self.baseline_s


def paired_medians(
    measured: Callable[[], object], baseline: Callable[[], object], repeats: int, warmup: int = 1
) -> tuple[float, float]:
    """Median wall times of ``measured`` and ``baseline``, timed alternately so that both see the same
    background load (the machine is shared); ``warmup`` untimed calls of each first (allocator, caches)."""
    for _ in range(warmup):
        measured()
        baseline()
    measured_times: list[float] = []
    baseline_times: list[float] = []
    for _ in range(repeats):
        for fn, times in ((measured, measured_times), (baseline, baseline_times)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(measured_times), statistics.median(baseline_times)


# ------------------------------------------------------------------------------------------- (a) ALiBi
def bench_alibi(repeats: int) -> Row:
    spec = pe.get_method("alibi")
    params = spec.parse_params({})
    ctx = pe.BiasContext(num_heads=8, query_length=4096, key_length=4096, causal=True, dtype=torch.float32)
    bias = pe.bias_dense(spec, params, ctx)
    same_size = torch.randn(tuple(bias.shape), dtype=bias.dtype)  # (8, 4096, 4096): the bytes bias_dense writes
    del bias
    measured, baseline = paired_medians(lambda: pe.bias_dense(spec, params, ctx), same_size.clone, repeats)
    size = same_size.numel() * same_size.element_size() // MiB
    return Row("(a) alibi bias_dense H=8 N=4096 fp32", measured, f"clone {size} MiB", baseline)


# -------------------------------------------------------------------------------------------- (b) RoPE
def reference_rope(q: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """The textbook GPT-NeoX/HF form: q·cos + rotate_half(q)·sin with cos/sin built over the full width."""
    seq_len, head_dim = q.shape[-2], q.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))  # (d/2,)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # (N, d/2)
    full = torch.cat((angles, angles), dim=-1)  # (N, d): each angle for both members of its pair
    cos, sin = full.cos(), full.sin()
    first, second = q[..., : head_dim // 2], q[..., head_dim // 2 :]
    rotated_half = torch.cat((-second, first), dim=-1)  # (..., N, d)
    return q * cos + rotated_half * sin


def bench_rope(repeats: int) -> Row:
    spec = pe.get_method("rope")
    params = spec.parse_params({})
    q = torch.randn(1, 32, 4096, 128, generator=torch.Generator().manual_seed(0))  # (B, H, N, d)
    positions = torch.arange(q.shape[-2], dtype=torch.int64)  # (N,)

    def posenc_rope() -> torch.Tensor:
        freqs = pe.rotary_frequencies(spec, params, pe.RotaryContext(rotary_dim=128, seq_len=q.shape[-2]))
        cos, sin = pe.rotary_tables(freqs, positions)
        return pe.apply_rotary(q, cos, sin, pairing="half")

    max_diff = (posenc_rope() - reference_rope(q)).abs().max().item()
    measured, baseline = paired_medians(posenc_rope, lambda: reference_rope(q), repeats)
    return Row(
        "(b) rope q (1,32,4096,128) fp32",
        measured,
        "plain rotate_half",
        baseline,
        f"max |diff| {max_diff:.1e}",
    )


# ------------------------------------------------------------------------------------ (c), (d) gateway
def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def live_gateway(timeout_s: float = 90.0) -> Iterator[str]:
    """Start ``service.main:app`` under uvicorn on a free loopback port; yield its base URL; stop it."""
    port = free_loopback_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "service.main:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    server = subprocess.Popen([*command, "--log-level", "warning"], cwd=REPO_ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"the gateway exited with status {server.returncode} before answering")
            try:
                httpx.get(f"{url}/healthz", timeout=2.0)
                break  # any HTTP answer means uvicorn is serving the app
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway did not answer on {url} within {timeout_s:.0f} s") from None
                time.sleep(0.25)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def bias_body(num_heads: int, length: int) -> dict[str, Any]:
    return {
        "method": "alibi",
        "params": {},
        "num_heads": num_heads,
        "query_length": length,
        "causal": True,
        "dtype": "float32",
        "form": "dense",
    }


def post_bias(client: httpx.Client, body: dict[str, Any], accept: str) -> httpx.Response:
    response = client.post("/v1/bias", json=body, headers={"Accept": accept})
    if response.status_code != 200:
        raise RuntimeError(f"POST /v1/bias ({accept}) answered {response.status_code}: {response.text[:500]}")
    return response


def decode_octet(response: httpx.Response) -> torch.Tensor:
    shape = [int(n) for n in response.headers["X-Tensor-Shape"].replace(",", " ").strip("()[] ").split()]
    dtype = {"float32": torch.float32, "float64": torch.float64}[response.headers["X-Tensor-Dtype"]]
    return torch.frombuffer(bytearray(response.content), dtype=dtype).reshape(shape)


def decode_json(response: httpx.Response) -> torch.Tensor:
    wire = response.json()["tensors"]["bias"]
    special = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
    values = [special[v] if isinstance(v, str) else v for v in wire["data"]]
    return torch.tensor(values, dtype=torch.float64).reshape(wire["shape"])


def bench_gateway(repeats: int) -> list[Row]:
    rows = []
    with live_gateway() as url, httpx.Client(base_url=url, timeout=120.0) as client:
        # (c) a 32 MiB octet-stream body against copying 32 MiB in memory
        big = bias_body(num_heads=8, length=1024)  # 8·1024·1024 float32 = 32 MiB
        response = post_bias(client, big, "application/octet-stream")
        size = len(response.content)
        shape = response.headers.get("X-Tensor-Shape")
        source = bytearray(os.urandom(size))
        measured, baseline = paired_medians(
            lambda: post_bias(client, big, "application/octet-stream").content, lambda: bytes(source), repeats
        )
        rows.append(
            Row(
                f"(c) POST /v1/bias octet {size // MiB} MiB",
                measured,
                f"memory copy {size // MiB} MiB",
                baseline,
                f"shape {shape}",
            )
        )

        # (d) JSON against octet-stream for one tensor small enough for the JSON limit
        small = bias_body(num_heads=8, length=256)  # 8·256·256 = 524288 elements
        as_json = decode_json(post_bias(client, small, "application/json"))
        as_octet = decode_octet(post_bias(client, small, "application/octet-stream"))
        same = bool(torch.equal(as_json, as_octet.to(torch.float64)))
        measured, baseline = paired_medians(
            lambda: post_bias(client, small, "application/json").json(),
            lambda: post_bias(client, small, "application/octet-stream").content,
            repeats,
        )
        rows.append(
            Row(
                "(d) POST /v1/bias json H=8 N=256",
                measured,
                "same as octet-stream",
                baseline,
                f"same values: {same}",
            )
        )
    return rows


# ------------------------------------------------------------------------------------------------ main
def print_table(rows: list[Row]) -> None:
    header = f"{'benchmark':<38} {'median':>10} {'baseline':<24} {'median':>10} {'ratio':>8}  note"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row.name:<38} {row.measured_s * 1e3:>8.1f}ms {row.baseline_name:<24} "
            f"{row.baseline_s * 1e3:>8.1f}ms {row.ratio:>7.2f}x  {row.note}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per measurement (median is reported)")
    parser.add_argument("--no-server", action="store_true", help="skip (c) and (d), which start the gateway")
    args = parser.parse_args()

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.repeats} repeats, median shown")
    rows = [bench_alibi(args.repeats), bench_rope(args.repeats)]
    if not args.no_server:
        rows += bench_gateway(args.repeats)
    print_table(rows)


if __name__ == "__main__":
    main()
