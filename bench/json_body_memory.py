"""Peak memory of the live gateway while it refuses or serves a JSON tensor body, as a ratio to the body size.

A JSON body of inline tensor ``data`` lists is the one input whose in-memory size is not fixed by its byte
count: a parser that builds a Python object per value grows it about 50x. This script sends ``/v1/rotary``
bodies of 8, 32 and 64 MB (q and k of shape (1, 1, N, 64) as float32 ``data`` lists) to the real gateway and
prints, per body, the status and the gateway's peak RSS growth divided by the body size.

It runs two configurations, each as a table:
    default cap   ``max_json_body_bytes`` as shipped: bodies over it are refused with a 413 before being read
    raised cap    ``POSENC_MAX_JSON_BODY_BYTES`` above 64 MB: every body is parsed, validated and served

Each body gets its own gateway process (``uvicorn service.main:app`` on a free loopback port, no Redis), warmed
up by one small request; the peak is Linux's ``VmHWM`` from ``/proc/<pid>/status``, reset to the current RSS
(``clear_refs``) just before the body is sent, so it measures that request alone. Nothing is asserted: the
script prints numbers and a reader judges them. Usage, from the repository root:

    .venv/bin/python bench/json_body_memory.py [--sizes 8 32 64] [--chunked] [--values float32|short]

``--values short`` sends every value as ``0.5`` (4 bytes a value with its comma), the costliest JSON per byte
(a Python float per 4 bytes while parsing); the default is float32 values as ``tensor.tolist()`` writes them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000
MiB = 1024 * 1024
HEAD_DIM = 64
RAISED_CAP = 80 * MiB  # above the largest body, below max_body_bytes (128 MiB)
SEND_PIECE = 256 * 1024


@dataclass(frozen=True)
class Gateway:
    host: str
    port: int
    pid: int


@dataclass(frozen=True)
class Row:
    body_bytes: int
    status: int
    growth_bytes: int
    seconds: float
    peak_was_reset: bool

    @property
    def ratio(self) -> float:
        return self.growth_bytes / self.body_bytes


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def live_gateway(settings: dict[str, str], timeout_s: float = 90.0) -> Iterator[Gateway]:
    """A fresh gateway process per measurement, so that no earlier body's heap is counted or reused."""
    port = free_loopback_port()
    with tempfile.TemporaryDirectory(prefix="posenc-bench-") as state_dir:
        env = {
            **os.environ,
            "POSENC_STATE_DIR": state_dir,
            **settings,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        command = [sys.executable, "-m", "uvicorn", "service.main:app", "--host", "127.0.0.1", "--port", str(port)]
        server = subprocess.Popen([*command, "--log-level", "warning"], cwd=REPO_ROOT, env=env)
        try:
            _wait_until_serving(server, port, timeout_s)
            yield Gateway("127.0.0.1", port, server.pid)
        finally:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_until_serving(server: subprocess.Popen[bytes], port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"the gateway exited with status {server.returncode} before answering")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
            connection.request("GET", "/healthz")
            connection.getresponse().read()
            connection.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway did not answer on port {port} within {timeout_s:.0f} s") from None
            time.sleep(0.25)


def proc_status_bytes(pid: int, field: str) -> int:
    """A ``kB`` line of /proc/<pid>/status (VmRSS, VmHWM) in bytes: no psutil needed."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def reset_peak(pid: int) -> bool:
    """Set VmHWM back to the current RSS (Linux >= 4.0), so that the next peak belongs to the next request."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def rotary_body(target_bytes: int, values: str = "float32") -> bytes:
    """A /v1/rotary JSON body of about ``target_bytes``: q and k (1, 1, N, 64) as float32 ``data`` lists.

    ``float32``: random float32 numbers written as Python writes them (shortest round-trip of the double), as a
    client that calls ``tensor.tolist()`` and ``json.dumps`` would send them. ``short``: every value ``0.5``.
    """
    rng = np.random.default_rng(0)

    def flat(count: int) -> list[float]:
        return rng.standard_normal(count, dtype=np.float32).tolist() if values == "float32" else [0.5] * count

    bytes_per_value = len(json.dumps(flat(4096), separators=(",", ":"))) / 4096
    rows = max(1, int(target_bytes / 2 / bytes_per_value / HEAD_DIM))

    def tensor() -> dict[str, object]:
        return {"dtype": "float32", "shape": [1, 1, rows, HEAD_DIM], "data": flat(rows * HEAD_DIM)}

    body = {"method": "rope", "q": tensor(), "k": tensor()}
    return json.dumps(body, separators=(",", ":")).encode()


def post(gateway: Gateway, body: bytes, *, chunked: bool) -> int:
    """POST ``body`` and return the status; stop sending as soon as the gateway answers (an early 413).

    Sending and reading are multiplexed with select: a gateway that refuses a body without reading it must
    not leave the client blocked on a full send buffer.
    """
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
    head = (
        f"POST /v1/rotary?tensor=q HTTP/1.1\r\nHost: {gateway.host}:{gateway.port}\r\n"
        f"Content-Type: application/json\r\nAccept: application/octet-stream\r\n{framing}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    pieces = _framed(body, chunked=chunked)
    with socket.create_connection((gateway.host, gateway.port)) as sock:
        sock.sendall(head)
        _send_until_answered(sock, pieces)
        sock.setblocking(True)
        response = http.client.HTTPResponse(sock)
        response.begin()
        response.read()
        return response.status


def _framed(body: bytes, *, chunked: bool) -> Iterator[memoryview]:
    view = memoryview(body)
    for offset in range(0, len(body), SEND_PIECE):
        piece = view[offset : offset + SEND_PIECE]
        if chunked:
            yield memoryview(f"{len(piece):x}\r\n".encode() + bytes(piece) + b"\r\n")
        else:
            yield piece
    if chunked:
        yield memoryview(b"0\r\n\r\n")


def _send_until_answered(sock: socket.socket, pieces: Iterator[memoryview]) -> None:
    pending = memoryview(b"")
    sock.setblocking(False)
    while True:
        if not pending:
            pending = next(pieces, memoryview(b""))
            if not pending:
                return
        readable, writable, _ = select.select([sock], [sock], [], 60.0)
        if readable:
            return  # the answer came before the whole body was sent
        if writable:
            try:
                pending = pending[sock.send(pending) :]
            except (BrokenPipeError, ConnectionResetError):
                return


def warm_up(gateway: Gateway) -> None:
    """One small request first: imports, torch's allocator and the threadpool are not the body's cost."""
    status = post(gateway, rotary_body(64 * 1024), chunked=False)
    if status != 200:
        raise RuntimeError(f"the warm-up request answered {status}")


def measure(size_mb: int, settings: dict[str, str], *, chunked: bool, values: str) -> Row:
    body = rotary_body(size_mb * MB, values)
    with live_gateway(settings) as gateway:
        warm_up(gateway)
        time.sleep(0.5)
        before = proc_status_bytes(gateway.pid, "VmRSS")
        peak_was_reset = reset_peak(gateway.pid)
        if not peak_was_reset:
            before = proc_status_bytes(gateway.pid, "VmHWM")  # growth above the earlier peak only
        started = time.perf_counter()
        status = post(gateway, body, chunked=chunked)
        seconds = time.perf_counter() - started
        peak = proc_status_bytes(gateway.pid, "VmHWM")
    return Row(len(body), status, max(0, peak - before), seconds, peak_was_reset)


def print_table(title: str, rows: list[Row]) -> None:
    print(f"\n{title}")
    print(f"{'body':>10}  {'status':>6}  {'peak RSS growth':>15}  {'growth / body':>13}  {'time':>7}")
    for row in rows:
        print(
            f"{row.body_bytes / MB:>7.1f} MB  {row.status:>6}  {row.growth_bytes / MB:>12.1f} MB  "
            f"{row.ratio:>12.2f}x  {row.seconds:>6.2f}s"
        )
    if not all(row.peak_was_reset for row in rows):
        print("(VmHWM could not be reset: growth is measured above the warm-up's peak)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 64], help="body sizes in MB (10^6 bytes)")
    parser.add_argument("--chunked", action="store_true", help="send without Content-Length (counted as it streams)")
    parser.add_argument("--values", choices=["float32", "short"], default="float32", help="how values are written")
    args = parser.parse_args()
    framing = "chunked" if args.chunked else "Content-Length"
    configurations = [
        ("default cap (max_json_body_bytes as shipped)", {}),
        (f"raised cap (POSENC_MAX_JSON_BODY_BYTES={RAISED_CAP})", {"POSENC_MAX_JSON_BODY_BYTES": str(RAISED_CAP)}),
    ]
    for title, settings in configurations:
        rows = [measure(size, settings, chunked=args.chunked, values=args.values) for size in args.sizes]
        print_table(f"{title}; POST /v1/rotary, {framing} bodies of {args.values} values", rows)


if __name__ == "__main__":
    main()
