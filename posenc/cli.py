"""The posenc command: run the positional-encoding service on this machine.

posenc serve    the whole service. With no POSENC_REDIS_URL it starts a private redis-server (append-only, in
                <state-dir>/redis), a supervised Celery worker and the gateway, and stops all three on Ctrl-C or
                SIGTERM. With POSENC_REDIS_URL set (docker compose) it runs the gateway only.
posenc worker   a Celery worker against POSENC_REDIS_URL (what serve and the containers run).

Settings travel to the children as POSENC_* environment variables, the same way a container gets them. The
help texts are plain text (no markup): they are what a user reads in a terminal.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from posenc import runtime
from posenc.settings import Settings, get_settings

WORKER_APP = "workers.app"  # the Celery app, by name


class _Stop(BaseException):
    """Raised by our SIGINT/SIGTERM handler so that serve unwinds through its cleanup."""


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stop(signum)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posenc",
        description="Run the positional-encoding service on this machine: the gateway with its worker and Redis "
        "(serve), or a worker alone (worker).",
        epilog="Settings are POSENC_* environment variables (POSENC_REDIS_URL, POSENC_STATE_DIR, POSENC_PORT, ...); "
        "the README's settings table lists them all.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="gateway (+ embedded Redis and a worker when no Redis URL is set)",
        description="Start the gateway. With no POSENC_REDIS_URL, also a private redis-server and a supervised "
        "worker; Ctrl-C or SIGTERM stops all of them.",
    )
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1, or POSENC_HOST)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8000, or POSENC_PORT)")
    serve.add_argument("--state-dir", type=Path, default=None, help="Redis data, artifacts and logs")
    serve.add_argument("--workers", type=int, default=1, help="gateway (uvicorn) processes")
    serve.add_argument("--concurrency", type=int, default=None, help="jobs the embedded worker runs at once")
    serve.add_argument("--log-level", default="info", help="gateway log level (default info)")

    worker = commands.add_parser(
        "worker",
        help="a Celery worker that runs jobs (needs POSENC_REDIS_URL)",
        description="Start a Celery worker that takes jobs from the Redis at POSENC_REDIS_URL.",
    )
    worker.add_argument("--queues", default="cpu", help="comma-separated: cpu, gpu")
    worker.add_argument("--concurrency", type=int, default=None, help="jobs at once (default 1)")
    worker.add_argument("--hostname", default=None, help="Celery node name (default posenc-<queues>-<pid>@%%h)")
    worker.add_argument("--loglevel", default="INFO", help="Celery log level (default INFO)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "worker":
        return run_worker(args.queues, args.concurrency, args.hostname, args.loglevel)
    return serve(args)


# ------------------------------------------------------------------------------------------------ worker


def run_worker(queues: str, concurrency: int | None, hostname: str | None, loglevel: str) -> int:
    names = [q.strip() for q in queues.split(",") if q.strip()]
    if not names:
        print("posenc worker: give at least one queue (cpu, gpu)", file=sys.stderr)
        return 2
    if concurrency is not None:
        # Settings are read by the worker's children too (thread count = cores / concurrency).
        os.environ["POSENC_WORKER_CONCURRENCY"] = str(concurrency)
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    get_settings.cache_clear()
    settings = get_settings()
    if not settings.redis_url:
        print("posenc worker: set POSENC_REDIS_URL (redis://host:6379/0)", file=sys.stderr)
        return 2
    # Celery's own command line, with the app named by string: posenc never imports workers (import-linter).
    # Celery refuses a queue that is not declared (task_create_missing_queues=False).
    from celery.bin.celery import celery as celery_command

    celery_command.main(
        args=[
            "--app", WORKER_APP,
            "worker",
            "--queues", ",".join(names),
            "--concurrency", str(settings.worker_concurrency),
            "--pool", "prefork",
            "--max-tasks-per-child", "1",
            "--events",
            "--hostname", hostname or f"posenc-{'-'.join(names)}-{os.getpid()}@%h",
            "--loglevel", loglevel,
            "--without-gossip",  # chatter between workers we do not use; heartbeats still go to Flower
        ],
        prog_name="posenc worker",
    )  # fmt: skip
    return 0


# ------------------------------------------------------------------------------------------------ serve


def serve(args: argparse.Namespace) -> int:
    settings = get_settings()
    state_dir: Path = (args.state_dir or settings.state_dir).expanduser().resolve()
    problem = _serve_problem(args, settings, state_dir)
    if problem is not None:
        print(f"posenc serve: {problem}", file=sys.stderr)
        return 2
    env_updates = {"POSENC_STATE_DIR": str(state_dir)}
    if args.host:
        env_updates["POSENC_HOST"] = args.host
    if args.port is not None:
        env_updates["POSENC_PORT"] = str(args.port)
    os.environ.update(env_updates)
    get_settings.cache_clear()

    redis_server: runtime.EmbeddedRedis | None = None
    worker: runtime.SupervisedProcess | None = None
    status = 0
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if not settings.redis_url:
            redis_server = runtime.start_redis(
                state_dir, avoid=frozenset({get_settings().port})
            )  # the gateway binds it later
            os.environ["POSENC_REDIS_URL"] = redis_server.url
            get_settings.cache_clear()
            print(f"posenc: redis-server on {redis_server.url} (data in {redis_server.directory})", flush=True)
            worker = _start_worker(args, state_dir)
        settings = get_settings()
        _warn_if_open(settings)
        print(f"posenc: gateway on http://{settings.host}:{settings.port} (docs at /docs)", flush=True)
        status = _run_gateway(settings, args.workers, args.log_level)
    except _Stop:
        pass
    finally:
        for sig in previous:  # a second Ctrl-C must not interrupt the clean-up
            signal.signal(sig, signal.SIG_IGN)
        _shut_down(worker, redis_server, get_settings())
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status


def _serve_problem(args: argparse.Namespace, settings: Settings, state_dir: Path) -> str | None:
    """Why serve cannot start with these arguments and settings, in one line, or None.

    The state directory must not be something else; with the embedded Redis (its data and the logs go there) it
    is created and a file is written in it."""
    port: int = settings.port if args.port is None else args.port
    if not 0 < port < 65536:
        return f"{'POSENC_PORT' if args.port is None else '--port'} {port}: not a port (1-65535)"
    where = f"{'--state-dir' if args.state_dir else 'state directory (POSENC_STATE_DIR)'} {state_dir}"
    try:
        if state_dir.exists() and not state_dir.is_dir():
            return f"{where}: not a directory"
        if not settings.redis_url:
            state_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=state_dir):
                pass
    except OSError as error:
        return f"{where}: cannot write there ({error.strerror or error})"
    return None


def _run_gateway(settings: Settings, workers: int, log_level: str) -> int:
    """uvicorn: in this process for one gateway process; for several, its process manager as our child.

    In process, --workers N makes the gateway processes our children with nothing to stop them when we die
    by SIGKILL (they kept the port and answered with a dead Redis). As our child with a parent-death SIGTERM,
    uvicorn's manager stops them, and itself, when we die; our own stop (Ctrl-C, SIGTERM) ends it the same way.
    """
    if workers <= 1:
        import uvicorn

        # uvicorn handles SIGINT/SIGTERM while it runs, then re-raises the signal into our handler: _Stop.
        uvicorn.run("service.main:app", host=settings.host, port=settings.port, log_level=log_level)
        return 0
    manager = subprocess.Popen(
        [
            sys.executable, "-m", "uvicorn", "service.main:app",
            "--host", settings.host,
            "--port", str(settings.port),
            "--workers", str(workers),
            "--log-level", log_level,
        ],
        preexec_fn=runtime.die_with_parent(signal.SIGTERM),
    )  # fmt: skip
    try:
        return manager.wait()
    finally:
        runtime.terminate(manager, grace_s=30)


def _start_worker(args: argparse.Namespace, state_dir: Path) -> runtime.SupervisedProcess:
    queues = ["cpu", "gpu"] if runtime.cuda_present() else ["cpu"]
    concurrency = args.concurrency or get_settings().worker_concurrency
    env = dict(os.environ)
    # SIGTERM becomes Celery's soft shutdown: running jobs get worker_soft_shutdown_timeout_s, then they are
    # requeued (and resume from their checkpoint next time) instead of holding the stop for hours.
    env["REMAP_SIGTERM"] = "SIGQUIT"
    # Ready = its heartbeat is in Redis: a worker killed after that is restarted at once, one that dies
    # before it (a crash loop) is restarted with back-off.
    worker = runtime.SupervisedProcess(
        runtime.worker_command(queues, concurrency),
        env,
        state_dir / "logs" / "worker.log",
        "celery worker",
        ready=runtime.worker_heartbeat_probe(env["POSENC_REDIS_URL"]),
    )
    worker.start()
    print(f"posenc: celery worker on queues {queues} (log {worker.log_path})", flush=True)
    return worker


def _shut_down(
    worker: runtime.SupervisedProcess | None, redis_server: runtime.EmbeddedRedis | None, settings: Settings
) -> None:
    if worker is not None:
        print("posenc: stopping the worker", flush=True)
        worker.stop(grace_s=settings.worker_soft_shutdown_timeout_s + 15)
    if redis_server is not None:
        print("posenc: stopping redis-server (SHUTDOWN SAVE)", flush=True)
        redis_server.stop()


def _warn_if_open(settings: Settings) -> None:
    if settings.host not in ("127.0.0.1", "localhost", "::1") and not (settings.api_keys or settings.admin_api_keys):
        print(
            f"posenc: WARNING: listening on {settings.host} without API keys; set POSENC_API_KEYS",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
