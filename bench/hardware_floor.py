"""How far posenc is from what the machine allows: each figure a ratio to a baseline measured in the same run.

Rows (medians of alternated runs; nothing is asserted, a reader judges the table):

    rotary    the shared rotary apply on q and k (1, 32, 4096, 128) float32, through a layer's applier (tables
              cached as a training layer caches them), each pairing, full and partial rotation
              vs  cloning q and k (one read and one write of each: the bandwidth floor)
    bias      the dense (8, 4096, 4096) float32 bias of every Toeplitz bias method (ALiBi, T5, KERPLE, ...)
              vs  cloning a tensor of the same bytes
    sdk       a 32 MiB octet-stream bias fetched through the SDK, Client().bias.compute, sync and async,
              compute included, from the real gateway (uvicorn) on loopback
              vs  moving 32 MiB through a raw loopback socket
    lean      the same bias read by http.client (the server's own cost)   vs  the raw socket
    small     p50 / p99 of a small JSON request (POST /v1/bias, H=2, N=16) from 32 concurrent clients in a
              separate load process   vs  the same for GET /healthz (the server's floor for any request)

Usage, from the repository root (ideally on a quiet machine; torch uses ``--threads`` threads):

    .venv/bin/python bench/hardware_floor.py [--repeats 7] [--threads 2] [--no-server]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compute_bench import live_gateway

from posenc import pe
from posenc.pe.appliers import Layer, build_applier
from posenc.schemas.methods import Kind

MiB = 1 << 20


@dataclass(frozen=True)
class Row:
    name: str
    measured_s: float
    baseline: str
    baseline_s: float
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.measured_s / self.baseline_s


def paired(measured: Callable[[], object], baseline: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall times, the two timed alternately so both see the same background load; one warm-up each."""
    measured()
    baseline()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, bucket in ((measured, times[0]), (baseline, times[1])):
            start = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


# ----------------------------------------------------------------------------------------------- rotary
def bench_rotary(repeats: int) -> list[Row]:
    rows = []
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 32, 4096, 128, generator=generator)  # (B, H, N, d)
    k = torch.randn(1, 32, 4096, 128, generator=generator)

    def clone_both() -> object:
        return q.clone(), k.clone()

    for pairing, rotary_dim in (("half", 128), ("interleaved", 128), ("half", 64)):
        spec = pe.get_method("rope")
        layer = Layer(num_heads=32, head_dim=128, causal=True, pairing=pairing, rotary_dim=rotary_dim)  # type: ignore[arg-type]
        applier = build_applier(spec, spec.parse_params({}), layer, cache={})

        def rotate(applier: Any = applier) -> object:
            return applier.rotate_cached(q, k)

        measured, baseline = paired(rotate, clone_both, repeats)
        rows.append(Row(f"rotary q,k {pairing} d_rot={rotary_dim}", measured, "clone q and k", baseline))
    return rows


# ------------------------------------------------------------------------------------------------- bias
def bench_bias(repeats: int) -> list[Row]:
    rows = []
    same_bytes = torch.randn(8, 4096, 4096)
    for spec in (spec for spec in pe.list_methods(Kind.BIAS) if spec.toeplitz):
        name = spec.name
        params = spec.parse_params({})
        ctx = pe.BiasContext(num_heads=8, query_length=4096, key_length=4096, causal=True, dtype=torch.float32)
        if spec.learned and spec.learned_init is not None:
            params = params.model_copy(update=spec.learned_init(params, ctx))

        def dense(spec: Any = spec, params: Any = params, ctx: Any = ctx) -> object:
            return pe.bias_dense(spec, params, ctx)

        measured, baseline = paired(dense, same_bytes.clone, repeats)
        rows.append(Row(f"bias dense {name} (8,4096,4096)", measured, "clone 512 MiB", baseline))
    return rows


# ---------------------------------------------------------------------------------------- transport
def raw_socket_seconds(size: int) -> float:
    """Move ``size`` bytes through a loopback TCP socket (sender thread, receiver into one buffer)."""
    payload = bytes(size)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def send() -> None:
        connection, _ = server.accept()
        with connection:
            connection.sendall(payload)

    sender = threading.Thread(target=send)
    sender.start()
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as client:
        buffer = bytearray(size)
        view, received = memoryview(buffer), 0
        while received < size:
            received += client.recv_into(view[received:])
    elapsed = time.perf_counter() - start
    sender.join()
    server.close()
    return elapsed


def bench_transport(repeats: int) -> list[Row]:
    from posenc_client import AsyncClient, Client

    rows = []
    size = 8 * 1024 * 1024 * 4  # (8, 1024, 1024) float32
    body = json.dumps({"method": "alibi", "num_heads": 8, "query_length": 1024, "causal": False}).encode()
    with live_gateway() as url:
        host, port = url.removeprefix("http://").split(":")

        def lean() -> object:
            connection = http.client.HTTPConnection(host, int(port))
            connection.request(
                "POST",
                "/v1/bias",
                body=body,
                headers={"Content-Type": "application/json", "Accept": "application/octet-stream"},
            )
            data = connection.getresponse().read()
            connection.close()
            assert len(data) == size
            return data

        def raw() -> object:
            return raw_socket_seconds(size)

        measured, baseline = paired(lean, raw, repeats)
        rows.append(Row("lean http.client 32 MiB bias", measured, "raw loopback 32 MiB", baseline))
        with Client(base_url=url) as client:

            def sdk() -> object:
                return client.bias.compute("alibi", num_heads=8, query_length=1024, causal=False).bias

            measured, baseline = paired(sdk, raw, repeats)
            rows.append(Row("SDK Client 32 MiB bias", measured, "raw loopback 32 MiB", baseline))

        async def async_fetch(client: Any) -> object:
            result = await client.bias.compute("alibi", num_heads=8, query_length=1024, causal=False)
            return result.bias

        async def async_rows() -> tuple[float, float]:
            async with AsyncClient(base_url=url) as client:
                loop_times: tuple[list[float], list[float]] = ([], [])
                await async_fetch(client)
                for _ in range(repeats):
                    start = time.perf_counter()
                    await async_fetch(client)
                    loop_times[0].append(time.perf_counter() - start)
                    start = time.perf_counter()
                    await asyncio.to_thread(raw_socket_seconds, size)
                    loop_times[1].append(time.perf_counter() - start)
                return statistics.median(loop_times[0]), statistics.median(loop_times[1])

        measured, baseline = asyncio.run(async_rows())
        rows.append(Row("SDK AsyncClient 32 MiB bias", measured, "raw loopback 32 MiB", baseline))
    return rows


LOAD_SCRIPT = """
import json, statistics, sys, threading, time, http.client
host, port, path, body, per_client = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
latencies, lock = [], threading.Lock()
def client():
    connection = http.client.HTTPConnection(host, port)
    mine = []
    for _ in range(per_client):
        start = time.perf_counter()
        if body:
            connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        else:
            connection.request("GET", path)
        connection.getresponse().read()
        mine.append(time.perf_counter() - start)
    with lock:
        latencies.extend(mine)
threads = [threading.Thread(target=client) for _ in range(32)]
for thread in threads: thread.start()
for thread in threads: thread.join()
latencies.sort()
print(json.dumps({"p50": latencies[len(latencies) // 2], "p99": latencies[int(len(latencies) * 0.99)]}))
"""


def concurrent_latency(url: str, path: str, body: str, per_client: int) -> dict[str, float]:
    """p50 and p99 of 32 concurrent keep-alive clients in a separate process (its own interpreter and GIL)."""
    import subprocess

    host, port = url.removeprefix("http://").split(":")
    command = [sys.executable, "-c", LOAD_SCRIPT, host, port, path, body, str(per_client)]
    result: dict[str, float] = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    return result


def bench_small_requests(per_client: int) -> list[Row]:
    small = json.dumps({"method": "alibi", "num_heads": 2, "query_length": 16})
    with live_gateway() as url:
        concurrent_latency(url, "/healthz", "", 5)  # warm-up: connections, imports
        floor = concurrent_latency(url, "/healthz", "", per_client)
        measured = concurrent_latency(url, "/v1/bias", small, per_client)
    return [
        Row("small JSON bias, 32 clients: p50", measured["p50"], "GET /healthz p50", floor["p50"]),
        Row("small JSON bias, 32 clients: p99", measured["p99"], "GET /healthz p99", floor["p99"]),
    ]


def print_table(rows: list[Row]) -> None:
    header = f"{'measured':<38} {'median':>9}  {'baseline':<22} {'median':>9}  {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row.name:<38} {row.measured_s * 1e3:>7.1f}ms  {row.baseline:<22} {row.baseline_s * 1e3:>7.1f}ms"
            f"  {row.ratio:>6.2f}x  {row.note}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-server", action="store_true", help="skip the gateway rows")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.repeats} repeats, medians")
    rows = bench_rotary(args.repeats) + bench_bias(args.repeats)
    if not args.no_server:
        rows += bench_transport(args.repeats) + bench_small_requests(per_client=50)
    print_table(rows)


if __name__ == "__main__":
    main()
