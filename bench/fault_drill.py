"""The operator's drill: many small jobs drain while the Celery worker is SIGKILLed every few seconds.

Starts a fresh system in a temporary state directory, on loopback only:

    embedded (default)  ``posenc serve``: private redis-server, supervised worker, gateway
    --split             our own redis-server (append-only), ``posenc serve`` as the gateway only, and
                        ``--workers`` ``posenc worker`` processes that this script restarts 1 s after each exit;
                        ``--redis-restart`` also kills Redis once (SIGKILL) midway and restarts it 10 s later

First a no-fault phase (``--baseline-jobs`` jobs, nothing killed) gives the throughput to compare with. Then
``--jobs`` jobs are submitted and, for ``--duration`` seconds, one worker (its whole process group: the parent
and its pool children) is SIGKILLed every ``--kill-every`` seconds. Then the script waits for every job to end
and prints, from the job records and their event lists in Redis: submitted, succeeded, failed, lost (not ended
``--drain-timeout`` seconds after the last fault; "stranded" if the message sits in kombu's unacked hash, where
only the visibility timeout would bring it back), committed twice (more than one terminal write), the attempts
histogram, the drain time after the last fault, jobs per second with and without faults, and for the jobs
requeued because their worker was lost, "kill to next claim": seconds from the kill that orphaned the job to
its next claim (median and max; the requeue itself comes within the recovery bound of ``workers.recovery``, the
claim after it depends on the job's place in the queue).

The job is a small one: ``train``, ``alibi``, copy task of size 16, 1 layer, dim 32, 2 heads, 60 steps,
batch 8 (one to two seconds of work). Nothing is asserted: the script prints numbers. From the repository root:

    .venv/bin/python bench/fault_drill.py --jobs 300 --kill-every 10 --duration 600
    .venv/bin/python bench/fault_drill.py --split --workers 2 --redis-restart --jobs 200
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import redis

from posenc import runtime

REPO_ROOT = Path(__file__).resolve().parents[1]
TERMINAL = {"succeeded", "failed", "cancelled", "expired"}
TERMINAL_EVENTS = ("succeeded", "failed", "cancelled")
# requeue events written when a job's worker was lost (posenc.jobstore), as opposed to a lost message
WORKER_LOST_REQUEUES = ("requeued (lease expired)", "requeued (worker lost")
JOB = {
    "kind": "train",
    "spec": {
        "methods": [{"method": "alibi"}],
        "data": {"task": "copy", "size": 16},
        "model": {"layers": 1, "dim": 32, "heads": 2},
        "train": {"steps": 60, "batch_size": 8, "warmup_steps": 5, "checkpoint_every": 20},
        "eval": {"sizes": [16, 32], "samples": 64},
        "seeds": [0],
        "device": "cpu",
    },
}


# ------------------------------------------------------------------------------------------------ processes
def _environment(state_dir: Path, redis_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env |= {"POSENC_STATE_DIR": str(state_dir), "PYTHONUNBUFFERED": "1"}
    if redis_url:
        env["POSENC_REDIS_URL"] = redis_url
    return env


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A child in its own session, so one killpg takes it and every process it forked."""
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=out, stderr=out, start_new_session=True)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _kill_tree(pid: int) -> None:
    """SIGKILL a worker and its pool children (the way a node under memory pressure loses it)."""
    for victim in [pid, *_children(pid)]:
        with suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class RedisProcess:
    """Our own redis-server on a fixed port (split mode), so it can be killed and restarted in place."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = runtime.free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [str(runtime.find_redis_server()), "--bind", "127.0.0.1", "--port", str(self.port)]
        command += ["--dir", str(self.directory), "--appendonly", "yes", "--maxmemory-policy", "noeviction"]
        self.process = _spawn(command, dict(os.environ), self.directory / "redis.log")
        if not runtime.wait_until(lambda: _pings(self.url), timeout=20):
            raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


class System:
    """The service under test, and how to find and kill a worker in it."""

    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args, self.root = args, root
        self.port = runtime.free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.redis: RedisProcess | None = None
        self.serve: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes] | None] = []
        self._stop = threading.Event()
        self._restarter: threading.Thread | None = None

    @property
    def redis_url(self) -> str:
        if self.redis is not None:
            return self.redis.url
        return redis_url_of_embedded(self.root / "serve.log")

    def start(self) -> None:
        state = self.root / "state"
        serve = [sys.executable, "-m", "posenc.cli", "serve", "--port", str(self.port)]
        if self.args.split:
            self.redis = RedisProcess(self.root / "redis")
            self.redis.start()
            env = _environment(state, self.redis.url)
            self.serve = _spawn(serve, env, self.root / "gateway.log")
            self.workers = [None] * self.args.workers
            self._restarter = threading.Thread(target=self._keep_workers, args=(env,), daemon=True)
            self._restarter.start()
        else:
            self.serve = _spawn(serve, _environment(state, None), self.root / "serve.log")
        if not runtime.wait_until(self._ready, timeout=120, interval=0.5):
            raise RuntimeError(f"the service did not become ready; see {self.root}")

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def _keep_workers(self, env: dict[str, str]) -> None:
        """Split mode's supervisor: each worker slot gets a new ``posenc worker`` 1 s after its process exits."""
        command = [sys.executable, "-m", "posenc.cli", "worker", "--queues", "cpu", "--concurrency", "1"]
        while not self._stop.is_set():
            for slot, process in enumerate(self.workers):
                if process is None or process.poll() is not None:
                    if process is not None:
                        time.sleep(1.0)
                    self.workers[slot] = _spawn(command, env, self.root / f"worker-{slot}.log")
            self._stop.wait(0.2)

    def worker_pids(self) -> list[int]:
        if self.args.split:
            return [p.pid for p in self.workers if p is not None and p.poll() is None]
        assert self.serve is not None
        return [pid for pid in _children(self.serve.pid) if "posenc.cli worker" in _cmdline(pid)]

    def stop(self) -> None:
        self._stop.set()
        for process in [*self.workers, self.serve]:
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
        if self.redis is not None and self.redis.process is not None and self.redis.process.poll() is None:
            self.redis.process.terminate()
            self.redis.process.wait(30)


def redis_url_of_embedded(log: Path) -> str:
    """The embedded redis-server's URL, as ``posenc serve`` prints it at start-up."""
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("posenc: redis-server on "):
            return line.split()[3]
    raise RuntimeError(f"posenc serve has not printed its Redis URL; see {log}")


@contextmanager
def running(args: argparse.Namespace) -> Iterator[System]:
    with tempfile.TemporaryDirectory(prefix="posenc-drill-") as root, ExitStack() as stack:
        system = System(args, Path(root))
        stack.callback(system.stop)
        system.start()
        yield system


# -------------------------------------------------------------------------------------------------- the drill
def submit(client: httpx.Client, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        for _attempt in range(120):  # a 503 while Redis restarts: retry as a client would
            response = client.post("/v1/jobs", json=JOB)
            if response.status_code == 202:
                ids.append(response.json()["id"])
                break
            time.sleep(float(response.headers.get("Retry-After", "1")))
        else:
            raise RuntimeError(f"could not submit: {response.status_code} {response.text[:300]}")
    return ids


def statuses(client: httpx.Client, ids: list[str]) -> dict[str, dict[str, Any]]:
    found = {}
    for job_id in ids:
        try:
            response = client.get(f"/v1/jobs/{job_id}")
        except httpx.HTTPError:
            continue
        if response.status_code == 200:
            found[job_id] = response.json()
    return found


def wait_for_end(client: httpx.Client, ids: list[str], timeout_s: float) -> tuple[dict[str, dict[str, Any]], float]:
    started = time.monotonic()
    jobs: dict[str, dict[str, Any]] = {}
    while time.monotonic() - started < timeout_s:
        jobs = statuses(client, ids)
        if len(jobs) == len(ids) and all(job["status"] in TERMINAL for job in jobs.values()):
            break
        time.sleep(2.0)
    return jobs, time.monotonic() - started


def commits(redis_url: str, job_id: str) -> int:
    """Terminal writes in the job's event list: exactly one is the promise."""
    events = redis.Redis.from_url(redis_url, decode_responses=True).lrange(f"posenc:job:{job_id}:events", 0, -1)
    return sum(1 for event in events if str(event).split(" ", 1)[0].split("|", 1)[0] in TERMINAL_EVENTS)


def kill_to_next_claim(redis_url: str, ids: list[str], killed_at: list[float]) -> list[tuple[float, float]]:
    """For each requeue of a job whose worker was lost: (seconds from the kill before it to the requeue, seconds
    from that kill to the job's next claim), from the job's events ('...|ISO time')."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    found = []
    for job_id in ids:
        events: list[tuple[str, float]] = []
        for line in client.lrange(f"posenc:job:{job_id}:events", 0, -1):
            text, _, stamp = str(line).rpartition("|")
            events.append((text, datetime.fromisoformat(stamp).timestamp()))
        for n, (text, requeued) in enumerate(events):
            kills = [kill for kill in killed_at if kill <= requeued]
            if not text.startswith(WORKER_LOST_REQUEUES) or not kills:
                continue
            claims = [when for later, when in events[n + 1 :] if later.startswith("running attempt")]
            if claims:
                found.append((requeued - kills[-1], claims[0] - kills[-1]))
    return found


def in_unacked(redis_url: str) -> set[str]:
    """Job ids whose message sits in kombu's ``unacked`` hash: taken by a consumer, never acknowledged. A job
    that has not ended and is only there is stranded until the broker's visibility timeout."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    return {json.loads(raw)[0]["headers"]["id"] for raw in client.hvals("unacked")}


def no_fault_throughput(system: System, client: httpx.Client, count: int) -> float:
    started = time.monotonic()
    ids = submit(client, count)
    jobs, _ = wait_for_end(client, ids, timeout_s=1800)
    done = sum(1 for job in jobs.values() if job["status"] == "succeeded")
    return done / (time.monotonic() - started)


def fault_phase(system: System, client: httpx.Client, args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    ids = submit(client, args.jobs)
    kills, redis_restarted = 0, False
    killed_at: list[float] = []  # wall clock (the job events' clock) of each kill
    deadline = time.monotonic() + args.duration
    while time.monotonic() < deadline:
        time.sleep(args.kill_every)
        pids = system.worker_pids()
        if pids:
            _kill_tree(pids[kills % len(pids)])
            killed_at.append(time.time())
            kills += 1
        if args.redis_restart and not redis_restarted and time.monotonic() > deadline - args.duration / 2:
            assert system.redis is not None
            system.redis.kill()
            time.sleep(10)
            system.redis.start()
            redis_restarted = True
    last_fault = time.monotonic()
    jobs, drain_s = wait_for_end(client, ids, timeout_s=args.drain_timeout)
    elapsed = time.monotonic() - started
    ended = {job_id: job for job_id, job in jobs.items() if job["status"] in TERMINAL}
    return {
        "ids": ids,
        "jobs": jobs,
        "kills": kills,
        "killed_at": killed_at,
        "redis_restarted": redis_restarted,
        "drain_s": drain_s,
        "elapsed_s": elapsed,
        "ended": ended,
        "last_fault": last_fault,
    }


def report(system: System, args: argparse.Namespace, baseline: float, outcome: dict[str, Any]) -> None:
    jobs, ids = outcome["jobs"], outcome["ids"]
    by_status = collections.Counter(job["status"] for job in jobs.values())
    lost = [job_id for job_id in ids if job_id not in outcome["ended"]]
    stranded = in_unacked(system.redis_url).intersection(lost)
    twice = [job_id for job_id in ids if commits(system.redis_url, job_id) > 1]
    attempts = collections.Counter(job.get("attempts", 0) for job in jobs.values())
    mode = f"split, {args.workers} worker(s)" if args.split else "embedded (posenc serve)"
    print(f"\nfault drill: {mode}; a worker SIGKILLed every {args.kill_every:g} s for {args.duration:g} s")
    print(
        f"  kills                  {outcome['kills']}"
        + ("; Redis killed and restarted once" * outcome["redis_restarted"])
    )
    print(f"  submitted              {len(ids)}")
    print(f"  succeeded              {by_status['succeeded']}")
    print(f"  failed                 {by_status['failed']}")
    print(f"  not ended at the end   {len(lost)}" + (f"  e.g. {lost[:3]}" if lost else ""))
    print(f"  of which stranded      {len(stranded)} (message in kombu's unacked hash: back only after the timeout)")
    print(f"  committed twice        {len(twice)}")
    print(f"  attempts histogram     {dict(sorted(attempts.items()))}")
    print(f"  drain after last fault {outcome['drain_s']:.1f} s")
    delays = kill_to_next_claim(system.redis_url, ids, outcome["killed_at"])
    if delays:
        requeue, claim = [d[0] for d in delays], [d[1] for d in delays]
        print(
            f"  kill to next claim     median {statistics.median(claim):.1f} s, max {max(claim):.1f} s over "
            f"{len(delays)} requeues (kill to requeue: median {statistics.median(requeue):.1f} s, "
            f"max {max(requeue):.1f} s)"
        )
    else:
        print("  kill to next claim     no job was requeued after a kill")
    faulty = by_status["succeeded"] / outcome["elapsed_s"]
    print(f"  jobs per second        {faulty:.3f} with faults, {baseline:.3f} without ({faulty / baseline:.2f}x)")
    failures = [job.get("error") for job in jobs.values() if job["status"] == "failed"]
    for error in collections.Counter(failures).most_common(3):
        print(f"  failure: {error[1]} x {str(error[0])[:200]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--kill-every", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--baseline-jobs", type=int, default=30)
    parser.add_argument("--drain-timeout", type=float, default=1800.0)
    parser.add_argument("--split", action="store_true")
    parser.add_argument("--workers", type=int, default=1, help="split mode: posenc worker processes")
    parser.add_argument("--redis-restart", action="store_true", help="split mode: kill and restart Redis once")
    args = parser.parse_args()
    if args.redis_restart and not args.split:
        parser.error("--redis-restart needs --split (the embedded Redis belongs to posenc serve)")
    with running(args) as system, httpx.Client(base_url=system.base_url, timeout=30) as client:
        baseline = no_fault_throughput(system, client, args.baseline_jobs)
        print(f"no-fault throughput: {baseline:.3f} jobs/s over {args.baseline_jobs} jobs", flush=True)
        outcome = fault_phase(system, client, args)
        report(system, args, baseline, outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
