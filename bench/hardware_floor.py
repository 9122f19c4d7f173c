"""How far posenc is from what the machine allows: each figure a ratio to a baseline measured in the same run.

Rows (medians of alternated runs; nothing is asserted, a reader judges the table):

    rotary    the shared rotary apply on q and k (1, 32, 4096, 128) float32, through a layer's applier (tables
              cached as a training layer caches them): RoPE in each pairing, partial rotation, xPos scaling,
              each eager and with the compiled one-pass kernel (its compile time noted), and the in-place
              (out=) variant
              vs  cloning q and k (one read and one write of each: the bandwidth floor)
    bias      the dense (8, 4096, 4096) float32 bias of every Toeplitz bias method (ALiBi, T5, KERPLE, ...)
              vs  cloning a tensor of the same bytes
    transport a 32 MiB octet-stream bias fetched through the SDK, Client().bias.compute, sync and async,
              compute included, from the real gateway (uvicorn) on loopback; the same bias read by
              http.client (the server's own cost); a 32 MiB q sent by the SDK, rotated and read back
              vs  moving the same bytes through a raw loopback socket
    small     p50 / p99 of a small JSON request (POST /v1/bias, H=2, N=16) from 32 concurrent keep-alive
              clients in a separate load process: closed loop (each client sends again when answered), and
              paced (each client 20 requests/s)
              vs  the same for GET /healthz (the server's floor for any request)
    training  tokens/s of the training model's step, and of the job trainer, at 2 layers, d=128, 4 heads,
              T=128, B=32 for learned_absolute, alibi and rope (bench/train_throughput.py)
              vs  a minimal GPT written the way nanoGPT's model.py is, same parameter count

Usage, from the repository root (ideally on a quiet machine; torch uses ``--threads`` threads):

    .venv/bin/python bench/hardware_floor.py [--repeats 7] [--threads 2] [--only rotary bias ...] [--no-server]
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
from posenc.pe import compiled
from posenc.pe.appliers import Layer, build_applier
from posenc.pe.kinds import apply_rotary
from posenc.schemas.methods import Kind

MiB = 1 << 20
COMPILE_GRACE_S = 20.0  # a cold torch.compile of the rotary kernel on this 2-core machine: about 14 s


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

    setups = (("rope", "half", 128), ("rope", "interleaved", 128), ("rope", "half", 64), ("xpos", "half", 128))
    for method, pairing, rotary_dim in setups:
        spec = pe.get_method(method)
        layer = Layer(num_heads=32, head_dim=128, causal=True, pairing=pairing, rotary_dim=rotary_dim)  # type: ignore[arg-type]
        applier = build_applier(spec, spec.parse_params({}), layer, cache={})

        def rotate(applier: Any = applier) -> object:
            return applier.rotate_cached(q, k)

        # the compiled kernel's cost, paid once per kind (a few seconds from Inductor's disk cache, more cold)
        began = time.perf_counter()
        ready = compiled.wait_until_ready(pairing)  # type: ignore[arg-type]
        compile_note = f"compiled in {time.perf_counter() - began:.1f} s" if ready else "compiling failed"
        if rotary_dim < 128:
            compile_note = "partial rotation stays eager"
        for kernel in ("eager", "compiled"):
            compiled.configure(enabled=kernel == "compiled")
            measured, baseline = paired(rotate, clone_both, repeats)
            name = f"rotary q,k {method} {pairing} d_rot={rotary_dim} {kernel}"
            rows.append(Row(name, measured, "clone q and k", baseline, compile_note if kernel == "compiled" else ""))
        compiled.configure(enabled=True)

    # the out= variant: a caller that owns q and k rotates them in place, with no output allocated
    rope = pe.get_method("rope")
    rope_layer: Any = build_applier(rope, rope.parse_params({}), Layer(num_heads=32, head_dim=128, causal=True))
    cos, sin, _, _ = rope_layer.tables(torch.arange(4096), 4096)  # (N, d/2) each
    owned_q, owned_k = q.clone(), k.clone()

    def rotate_in_place() -> object:
        return (
            apply_rotary(owned_q, cos, sin, pairing="half", out=owned_q),
            apply_rotary(owned_k, cos, sin, pairing="half", out=owned_k),
        )

    measured, baseline = paired(rotate_in_place, clone_both, repeats)
    rows.append(Row("rotary q,k rope half, in place (out=)", measured, "clone q and k", baseline))
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

        # the other direction too: a 32 MiB q sent as safetensors (views of the tensor's memory), rotated, and
        # its 32 MiB answer read back; the floor moves the same 64 MiB through the raw socket
        q = torch.randn(1, 8, 1024, 1024, generator=torch.Generator().manual_seed(1))  # (B, H, N, d) 32 MiB
        with Client(base_url=url) as client:
            # the gateway compiles its rotary kernel in the background on its first large rotation (eager until
            # then, and the compile takes a core): start it, and give it the time a cold compile takes here
            client.rotary.apply(q, method="rope", rotate="query", upload="safetensors")
            time.sleep(COMPILE_GRACE_S)

            def upload() -> object:
                return client.rotary.apply(q, method="rope", rotate="query", upload="safetensors").q

            def raw_both_ways() -> object:
                return raw_socket_seconds(size) + raw_socket_seconds(size)

            measured, baseline = paired(upload, raw_both_ways, repeats)
            rows.append(Row("SDK send 32 MiB q, rotate, read", measured, "raw loopback 2 x 32 MiB", baseline))
    return rows


LOAD_SCRIPT = r"""
import asyncio, json, sys, time
host, port, path, body, per_client, clients, interval = sys.argv[1:8]
port, per_client, clients, interval = int(port), int(per_client), int(clients), float(interval)
head = f"{'POST' if body else 'GET'} {path} HTTP/1.1\r\nHost: {host}\r\n"
if body:
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
request = (head + "\r\n" + body).encode()
latencies = []
async def client(index):
    reader, writer = await asyncio.open_connection(host, port)
    loop = asyncio.get_running_loop()
    next_at = loop.time() + interval * index / clients  # paced clients start spread over one interval
    for _ in range(per_client):
        if interval:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            next_at += interval
        start = time.perf_counter()
        writer.write(request)
        headers = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in headers.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
        latencies.append(time.perf_counter() - start)
    writer.close()
async def main():
    await asyncio.gather(*(client(index) for index in range(clients)))
began = time.perf_counter()
asyncio.run(main())
elapsed = time.perf_counter() - began
latencies.sort()
print(json.dumps({"p50": latencies[len(latencies) // 2], "p99": latencies[int(len(latencies) * 0.99)],
                  "per_s": len(latencies) / elapsed}))
"""
CLIENTS = 32


def concurrent_latency(url: str, path: str, body: str, per_client: int, interval_s: float = 0.0) -> dict[str, float]:
    """p50, p99 and requests/s of 32 keep-alive clients in a separate process (asyncio over raw sockets, so the
    load itself costs little CPU). ``interval_s`` 0: each client sends its next request when the last answer
    arrives (closed loop: the server's throughput sets the latency, p50 about 32 / throughput); else each
    sends one request every ``interval_s`` (an offered load the server can keep up with)."""
    import subprocess

    host, port = url.removeprefix("http://").split(":")
    arguments = [host, port, path, body, str(per_client), str(CLIENTS), str(interval_s)]
    command = [sys.executable, "-c", LOAD_SCRIPT, *arguments]
    result: dict[str, float] = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    return result


def bench_small_requests(per_client: int) -> list[Row]:
    small = json.dumps({"method": "alibi", "num_heads": 2, "query_length": 16})
    with live_gateway() as url:
        concurrent_latency(url, "/healthz", "", 5)  # warm-up: connections, imports
        concurrent_latency(url, "/v1/bias", small, 5)
        floor = concurrent_latency(url, "/healthz", "", per_client)
        measured = concurrent_latency(url, "/v1/bias", small, per_client)
        paced = concurrent_latency(url, "/v1/bias", small, per_client // 2, interval_s=0.05)
        paced_floor = concurrent_latency(url, "/healthz", "", per_client // 2, interval_s=0.05)
    closed = f"{measured['per_s']:.0f} req/s (healthz {floor['per_s']:.0f})"
    offered = f"{paced['per_s']:.0f} req/s offered"
    return [
        Row("small JSON bias, 32 clients: p50", measured["p50"], "GET /healthz p50", floor["p50"], closed),
        Row("small JSON bias, 32 clients: p99", measured["p99"], "GET /healthz p99", floor["p99"], closed),
        Row("small bias, 32 x 20/s paced: p50", paced["p50"], "healthz paced p50", paced_floor["p50"], offered),
        Row("small bias, 32 x 20/s paced: p99", paced["p99"], "healthz paced p99", paced_floor["p99"], offered),
    ]


def print_table(rows: list[Row]) -> None:
    header = f"{'measured':<46} {'median':>9}  {'baseline':<24} {'median':>9}  {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row.name:<46} {row.measured_s * 1e3:>7.1f}ms  {row.baseline:<24} {row.baseline_s * 1e3:>7.1f}ms"
            f"  {row.ratio:>6.2f}x  {row.note}"
        )


def bench_training() -> list[Row]:
    """bench/train_throughput.py's rows: the training model's step and the job trainer against a minimal GPT
    written the way nanoGPT's model.py is. Times are per 1,000 tokens, so the ratio is the time ratio: at or
    below 1.00x is at least as fast as the minimal GPT."""
    from train_throughput import training_rows

    rows = []
    for name, measured_per_s, baseline, baseline_per_s in training_rows():
        note = f"{measured_per_s:,.0f} vs {baseline_per_s:,.0f} tokens/s"
        rows.append(Row(name, 1e3 / measured_per_s, baseline, 1e3 / baseline_per_s, note))
    return rows


GROUPS = ("rotary", "bias", "transport", "small", "training")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="+", choices=GROUPS, default=list(GROUPS), help="row groups to run")
    parser.add_argument("--no-server", action="store_true", help="skip the gateway rows (transport, small)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    groups = [group for group in args.only if not (args.no_server and group in ("transport", "small"))]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.repeats} repeats, medians")
    benches: dict[str, Callable[[], list[Row]]] = {
        "rotary": lambda: bench_rotary(args.repeats),
        "bias": lambda: bench_bias(args.repeats),
        "transport": lambda: bench_transport(args.repeats),
        "small": lambda: bench_small_requests(per_client=100),
        "training": bench_training,
    }
    rows = [row for group in groups for row in benches[group]()]
    print_table(rows)


if __name__ == "__main__":
    main()
