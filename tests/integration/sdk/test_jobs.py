"""Jobs end to end: a real Celery worker trains tiny models; the SDK creates, waits, cancels, downloads."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from posenc_client import (
    AsyncClient,
    Client,
    Job,
    JobCancelledError,
    JobFailedError,
    JobWaitTimeoutError,
    NotFoundError,
    RetryEvent,
    ValidationError,
)
from posenc_client.plot import plot_metric_vs_size

pytestmark = pytest.mark.integration


def benchmark_spec(corpus: Path, *, steps: int = 40) -> dict[str, Any]:
    """Two methods, dim 32, a few dozen steps: seconds on one core."""
    return {
        "methods": [{"method": "rope"}, {"method": "alibi"}],
        "data": {"corpus": str(corpus)},
        "model": {"layers": 1, "dim": 32, "heads": 2},
        "train": {"length": 16, "steps": steps, "batch_size": 8, "warmup_steps": 2, "checkpoint_every": 20},
        "eval": {"lengths": [16, 32], "max_tokens": 256},
        "seeds": [0],
        "device": "cpu",
    }


def long_train_spec(corpus: Path) -> dict[str, Any]:
    """A job that runs for minutes (it is cancelled long before), well within the duration a job may be estimated."""
    spec = benchmark_spec(corpus, steps=5_000)
    spec["methods"] = [{"method": "rope"}]
    return spec


def test_benchmark_job_sync(job_stack: str, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[Job] = []
    with Client(base_url=job_stack) as client:
        # enough steps that a 50 ms poll sees the job running: a warm worker starts it in about 0.1 s
        spec = benchmark_spec(corpus, steps=400)
        job = client.jobs.create("benchmark", spec, idempotency_key="bench-1")
        assert job.status == "queued"
        assert client.jobs.create("benchmark", spec, idempotency_key="bench-1").id == job.id

        finished = client.jobs.wait(job.id, timeout=300, poll_interval=0.05, on_progress=seen.append, progress_bar=True)
        assert finished.status == "succeeded"
        assert finished.progress is not None
        assert finished.progress.step == finished.progress.total

        table = (finished.result or {})["table"]
        assert {(row["method"], row["size"]) for row in table} >= {("rope", 16), ("alibi", 32)}
        names = {artifact.name for artifact in finished.artifacts or []}
        assert {"plot.png", "table.csv"} <= names
        png = client.jobs.download_artifact(job.id, "plot.png", tmp_path)
        assert png == tmp_path / "plot.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        assert job.id in {listed.id for listed in client.jobs.list(kind="benchmark")}
        assert job.id in {listed.id for listed in client.jobs.list(status="succeeded")}
        assert job.id not in {listed.id for listed in client.jobs.list(status="failed")}
        assert client.jobs.get(job.id).result == finished.result
        events = [event.event for event in client.jobs.events(job.id)]
        assert events[0].startswith("queued"), events
        assert any(event.startswith("succeeded") for event in events), events
        assert finished.result is not None
        assert finished.result["findings"], finished.result  # the generated summary of what the table shows

        with pytest.raises(NotFoundError):
            client.jobs.download_artifact(job.id, "no-such-artifact.bin", tmp_path / "x.bin")
        assert not (tmp_path / "x.bin").exists()
        with pytest.raises(ValidationError) as caught:
            client.jobs.create("train", benchmark_spec(corpus))  # a train job takes exactly one method
        assert caught.value.status == 422

    statuses = [job.status for job in seen]
    assert statuses[-1] == "succeeded"
    assert "running" in statuses  # on_progress saw the run, not only the end
    steps = [job.progress.step for job in seen if job.progress is not None]
    assert steps == sorted(steps)  # progress only moves forward
    assert "step" in capsys.readouterr().err  # the tqdm bar (unit "step") went to stderr

    figure = plot_metric_vs_size(finished.result or {})
    figure.savefig(tmp_path / "metric.png")
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    assert labels == ["alibi", "rope", "trained up to 16"]  # one line per method, and the training size
    assert figure.axes[0].get_xlabel() == "evaluation size (tokens)"


def test_jobs_async_failed_cancelled_and_timeout(job_stack: str, corpus: Path) -> None:
    async def scenario() -> None:
        async with AsyncClient(base_url=job_stack) as client:
            with pytest.raises(NotFoundError):
                await client.jobs.get("no-such-job")

            broken = benchmark_spec(corpus)
            # Accepted at submission (a file in the data dir), fails on the worker: too short for one window.
            too_short = corpus.parent / "too-short.txt"
            too_short.write_text("abc", encoding="utf-8")
            broken["data"] = {"corpus": str(too_short)}
            failing = await client.jobs.create("benchmark", broken)
            with pytest.raises(JobFailedError) as failed:
                await client.jobs.wait(failing.id, timeout=120, poll_interval=0.2, progress_bar=False)
            assert failed.value.job.status == "failed"
            assert failed.value.error
            assert failing.id in str(failed.value)

            long_job = await client.jobs.create("train", long_train_spec(corpus))
            with pytest.raises(JobWaitTimeoutError) as timed_out:
                await client.jobs.wait(long_job.id, timeout=0.5, poll_interval=0.1, progress_bar=False)
            assert timed_out.value.job.status in ("queued", "running")

            while (await client.jobs.get(long_job.id)).status != "running":
                await asyncio.sleep(0.1)
            await client.jobs.cancel(long_job.id)
            with pytest.raises(JobCancelledError) as cancelled:
                await client.jobs.wait(long_job.id, timeout=60, poll_interval=0.2, progress_bar=False)
            assert cancelled.value.job.status == "cancelled"

            quick = await client.jobs.create_and_wait(
                "benchmark",
                benchmark_spec(corpus, steps=10),
                timeout=300,
                poll_interval=0.2,
                progress_bar=False,
            )
            assert quick.status == "succeeded"
            assert quick.id in {job.id for job in await client.jobs.list(kind="benchmark")}

    asyncio.run(scenario())


# ---------------------------------------------------------------------- one Idempotency-Key across retries
class LosingProxy(http.server.ThreadingHTTPServer):
    """Forwards to the gateway and records each request; the first POST /v1/jobs reaches the gateway (which
    creates the job) but its answer is dropped, the way a reset connection loses a response."""

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = upstream
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.first_answer: dict[str, Any] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: LosingProxy

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {key: value for key, value in self.headers.items() if key.lower() not in ("host", "connection")}
        self.server.seen.append((self.command, self.path, headers))
        answer = httpx.request(self.command, self.server.upstream + self.path, headers=headers, content=body)
        if self.command == "POST" and self.path == "/v1/jobs" and self.server.first_answer is None:
            self.server.first_answer = answer.json()
            self.close_connection = True  # no response at all
            return
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = _forward
    do_POST = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def losing_proxy(job_stack: str) -> Iterator[LosingProxy]:
    proxy = LosingProxy(job_stack)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    yield proxy
    proxy.shutdown()
    proxy.server_close()


def test_job_creation_retry_reuses_its_idempotency_key(losing_proxy: LosingProxy, job_stack: str, corpus: Path) -> None:
    events: list[RetryEvent] = []
    with Client(base_url=losing_proxy.url, on_retry=events.append) as client:
        job = client.jobs.create("benchmark", benchmark_spec(corpus, steps=5))
    posts = [headers for method, path, headers in losing_proxy.seen if (method, path) == ("POST", "/v1/jobs")]
    assert len(posts) == 2
    assert len(events) == 1
    assert events[0].status is None  # the lost answer was a connection error
    keys = {headers["Idempotency-Key"] for headers in posts}
    assert len(keys) == 1
    assert posts[1]["X-Posenc-Retry-Count"] == "1"
    assert losing_proxy.first_answer is not None
    assert job.id == losing_proxy.first_answer["id"]  # the retry got the job the lost attempt created
    with Client(base_url=job_stack) as client:
        assert [listed.id for listed in client.jobs.list()] == [job.id]  # and nothing was queued twice
