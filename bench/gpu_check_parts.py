"""The parts of ``bench/gpu_check.py``: each takes a :class:`Check` (device, sizes, deadline) and returns rows.

Every part reuses what the product and the other benches already have: ``posenc.runtime`` starts Redis and the
worker the way ``posenc serve`` does, the gateway is ``uvicorn service.main:app`` as in the integration tests,
the appliers and ``PositionalEncoding`` build a method as the training model does, the minimal GPT and the
step-by-step bracketing come from ``bench/train_throughput.py`` and the alternated medians from
``bench/hardware_floor.py`` (each timed call followed by ``torch.cuda.synchronize`` on CUDA).

A row that measures something has a same-run baseline; ``ratio`` is measured / baseline (times: lower is
better; tokens/s: higher is better). A row whose check fails (outputs disagree, a job did not succeed, losses
differ) has ``ok=False`` and fails its part; a row not reached within the part's time budget has
``skipped=True`` and makes the part ``partial``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benches, as they import each other

from hardware_floor import paired
from train_throughput import (
    METHODS,
    InterleavedHooks,
    MiniGPT,
    Shape,
    Steps,
    bracketed,
    model_step_times,
    random_batches,
    tiny_config,
)

from posenc import pe, runtime
from posenc.pe import compiled
from posenc.pe.appliers import Applier, BiasApplier, Layer, build_applier, future_mask, positions
from posenc.pe.paths import path_choice
from posenc.pe.types import LayerInputs
from posenc.schemas.jobs import JobSpec, TrainSpec
from posenc.schemas.methods import Kind
from posenc.training.model import PositionalEncoding, TinyTransformer, attention_paths_of, count_parameters
from posenc.training.train import (
    ADAM_BETAS,
    GRAD_CLIP,
    LOSS_READ_EVERY,
    Batch,
    lr_factor,
    make_optimizer,
    sequence_loss,
    train,
)
from posenc.training.vit import VisionTransformer, ViTConfig

REPO = Path(__file__).resolve().parents[1]
LOSS_TOLERANCE = 0.05  # |final loss on the device − on the CPU| / on the CPU, same spec and seed
FLEX_OUT_TOLERANCE = 2e-4  # rtol = atol, FlexAttention against the materialised bias (tests/unit/test_gpu.py)
FLEX_GRAD_TOLERANCE = 2e-3


# ------------------------------------------------------------------------------------------------ sizes
@dataclass(frozen=True)
class ViTSizes:
    image: int
    patch: int
    layers: int
    dim: int
    heads: int
    batch: int


@dataclass(frozen=True)
class JobSizes:
    layers: int
    dim: int
    heads: int
    length: int
    steps: int
    batch: int
    samples: int


@dataclass(frozen=True)
class Sizes:
    repeats: int  # timed calls of each side (medians)
    flex: tuple[int, int, int, int]  # (B, H, T, d)
    rotary: tuple[int, int, int, int]  # q and k (B, H, N, d)
    bias: tuple[int, int, int]  # (H, N, N)
    train: Shape
    train_steps: int
    train_warmup: int
    vit: ViTSizes
    job: JobSizes
    nanogpt: tuple[Shape, ...] = ()  # the sizes the job trainer is set against nanoGPT's configuration
    nanogpt_steps: int = 20
    nanogpt_warmup: int = 5


FULL = Sizes(
    repeats=15,
    flex=(4, 8, 1024, 64),
    rotary=(1, 32, 4096, 128),
    bias=(8, 4096, 4096),
    train=Shape(layers=4, dim=256, heads=4, length=256, batch=64),
    train_steps=30,
    train_warmup=5,
    vit=ViTSizes(image=64, patch=8, layers=4, dim=256, heads=4, batch=128),
    job=JobSizes(layers=2, dim=64, heads=2, length=32, steps=60, batch=16, samples=32),
    # 4 layers d=256 T=256, then GPT-2 small (12 layers, d=768, 12 heads, T=1024) at a batch one GPU holds
    nanogpt=(Shape(layers=4, dim=256, heads=4, length=256, batch=64), Shape(12, 768, 12, 1024, 16)),
)
QUICK = Sizes(
    repeats=3,
    flex=(1, 2, 64, 16),
    rotary=(1, 4, 256, 32),
    bias=(4, 256, 256),
    train=Shape(layers=1, dim=32, heads=2, length=32, batch=4),
    train_steps=6,
    train_warmup=2,
    vit=ViTSizes(image=16, patch=4, layers=1, dim=32, heads=2, batch=4),
    job=JobSizes(layers=1, dim=32, heads=2, length=32, steps=20, batch=8, samples=4),
    nanogpt=(Shape(layers=1, dim=32, heads=2, length=32, batch=4),),
    nanogpt_steps=4,
    nanogpt_warmup=2,
)


# ------------------------------------------------------------------------------------------- the results
@dataclass
class Row:
    name: str
    measured: float | None = None
    unit: str = ""
    baseline_name: str = ""
    baseline: float | None = None
    note: str = ""
    ok: bool = True  # False: this row's check failed, and with it the part
    skipped: bool = False  # not measured: the part's time budget was spent

    @property
    def ratio(self) -> float | None:
        if self.measured is None or not self.baseline:
            return None
        return self.measured / self.baseline

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "measured": self.measured,
            "unit": self.unit,
            "baseline_name": self.baseline_name,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "note": self.note,
            "ok": self.ok,
            "skipped": self.skipped,
        }


@dataclass
class Check:
    """What every part gets: the device, the sizes, where files go, and when the part must end."""

    device: torch.device
    quick: bool
    out_dir: Path
    sizes: Sizes
    threads: int | None = None  # torch threads here and in the jobs' worker (None: their defaults)
    deadline: float = math.inf  # time.monotonic() by which the running part should be done
    details: dict[str, Any] = field(default_factory=dict)  # the part's extra JSON (jobs' results, counts)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def synced(self, fn: Callable[[], object]) -> Callable[[], object]:
        """``fn`` and then a wait for the device, so that a wall clock times the work and not its launch."""

        def call() -> object:
            result = fn()
            self.sync()
            return result

        return call

    def over_budget(self, name: str) -> Row | None:
        """A skipped row when the part's budget is spent, else None."""
        if self.left() > 0:
            return None
        return Row(name, note="not run: the part's time budget was spent", skipped=True)


def guarded(check: Check, name: str, make_rows: Callable[[], list[Row]]) -> list[Row]:
    """``make_rows()``, or one failed row naming the exception: one method's failure does not end its part."""
    try:
        return make_rows()
    except Exception as error:
        traceback.print_exc()
        return [Row(name, note=f"raised {type(error).__name__}: {' '.join(str(error).split())[:300]}", ok=False)]
    finally:
        if check.cuda:
            torch.cuda.empty_cache()


def timed_pair(check: Check, measured: Callable[[], object], baseline: Callable[[], object]) -> tuple[float, float]:
    """Median seconds of the two, timed alternately (bench/hardware_floor.py's ``paired``), synchronised."""
    return paired(check.synced(measured), check.synced(baseline), check.sizes.repeats)


def random(*shape: int, generator: torch.Generator, device: torch.device, dtype: torch.dtype = torch.float32) -> Any:
    """Standard normal numbers drawn on the CPU (the same on every device), then moved."""
    return torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)


# ------------------------------------------------------------------------------------------------ tests
def gpu_test_files() -> list[str]:
    """The test files that use the ``gpu`` marker: the only ones collected (no conftest applies the marker, so
    ``pytest -m gpu tests`` selects the same tests; collecting the whole suite to deselect it costs half a minute
    on a small CPU and needs every test-only reference library, which a bare CUDA machine may not have)."""
    found = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "mark.gpu" in text:
            found.append(str(path.relative_to(REPO)))
    return found


def part_tests(check: Check) -> list[Row]:
    """``pytest -m gpu`` in a subprocess over the files that use the marker, counted from its JUnit XML. On
    CUDA every test must pass and none may skip; on the CPU they skip with their reason."""
    junit = check.out_dir / "gpu_tests.xml"
    junit.unlink(missing_ok=True)
    targets = gpu_test_files()
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    env = dict(os.environ)
    if not check.cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""  # --device cpu: nothing in this run touches a GPU, even where one is
    began = time.perf_counter()
    try:
        finished = subprocess.run(
            [*command, *targets],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=max(check.left(), 1.0),
            check=False,
        )
        output, returncode = finished.stdout + finished.stderr, finished.returncode
    except subprocess.TimeoutExpired as expired:
        output = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else part or ""
            for part in (expired.stdout, expired.stderr)
        )
        (check.out_dir / "gpu_tests.log").write_text(output, encoding="utf-8")
        return [Row("pytest -m gpu", note=f"timed out after {expired.timeout:.0f} s (log gpu_tests.log)", ok=False)]
    seconds = time.perf_counter() - began
    (check.out_dir / "gpu_tests.log").write_text(output, encoding="utf-8")
    counts, reasons = junit_counts(junit)
    check.details.update({"returncode": returncode, "counts": counts, "skip_reasons": reasons, "targets": targets})
    failed = counts["failed"] + counts["errors"]
    ok = returncode == 0 and failed == 0 and (counts["passed"] > 0 and counts["skipped"] == 0 if check.cuda else True)
    note = (
        f"{counts['failed']} failed, {counts['errors']} errors, {counts['skipped']} skipped of {counts['tests']}"
        f" in {seconds:.0f} s; exit {returncode}"
    )
    if reasons:
        note += f"; skipped: {reasons[0]}"
    if counts["tests"] == 0:
        ok, note = False, f"no gpu-marked test ran (exit {returncode}; log gpu_tests.log)"
    return [Row("pytest -m gpu", float(counts["passed"]), "passed", note=note, ok=ok)]


def junit_counts(path: Path) -> tuple[dict[str, int], list[str]]:
    """(tests, passed, failed, errors, skipped) from pytest's JUnit XML, and the distinct skip reasons."""
    counts = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    reasons: list[str] = []
    if not path.is_file():
        return counts, reasons
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        counts["tests"] += 1
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "errors", "skipped": "skipped"}[child.tag]
                if child.tag == "skipped":
                    reason = child.get("message", "")
                    if reason not in reasons:
                        reasons.append(reason)
        counts[outcome] += 1
    return counts, reasons


# ------------------------------------------------------------------------------------------------- jobs
def job_spec(check: Check, methods: Sequence[str], device: str) -> dict[str, Any]:
    """A small job on the synthetic copy task (no corpus file): its losses are comparable across devices."""
    job = check.sizes.job
    size = max(1, (job.length - 3) // 2)  # items: a copy instance of n items is 2n + 3 tokens
    return {
        "methods": [{"method": method} for method in methods],
        "data": {"task": "copy", "size": size},
        "model": {"layers": job.layers, "dim": job.dim, "heads": job.heads},
        "train": {
            "steps": job.steps,
            "batch_size": job.batch,
            "warmup_steps": 5,
            "checkpoint_every": job.steps,
        },
        "eval": {"samples": job.samples, "sizes": [size]},
        "seeds": [0],
        "device": device,
    }


def service_env(redis_url: str, root: Path, device: str, threads: int | None) -> dict[str, str]:
    """The gateway's and the worker's environment: this run's Redis and directories, the developer's POSENC_*
    settings left out (tests/integration/conftest.py does the same)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("POSENC_")}
    env.update(
        {
            "POSENC_REDIS_URL": redis_url,
            "POSENC_STATE_DIR": str(root / "state"),
            "POSENC_ARTIFACT_DIR": str(root / "artifacts"),
            "POSENC_DATA_DIR": str(root / "data"),
            "POSENC_DEVICE": device,
            **({"POSENC_TORCH_THREADS": str(threads)} if threads is not None else {}),
            "POSENC_JOB_PROGRESS_INTERVAL_S": "0.2",
            "POSENC_WORKER_HEARTBEAT_INTERVAL_S": "0.5",
            "POSENC_WORKER_SOFT_SHUTDOWN_TIMEOUT_S": "2",
            "POSENC_JOB_POLL_AFTER_S": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def start_gateway(env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``uvicorn service.main:app`` on a free loopback port, a child that dies with this process."""
    port = runtime.free_port()
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "service.main:app", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=runtime.die_with_parent(signal.SIGTERM),
        )
    return process, f"http://127.0.0.1:{port}"


def gateway_healthy(process: subprocess.Popen[bytes], url: str) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"the gateway exited with {process.returncode}")
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    return False


@contextlib.contextmanager
def live_service(check: Check, root: Path) -> Iterator[tuple[httpx.Client, float]]:
    """A private redis-server (``runtime.start_redis``), a worker on the device's queue (``posenc worker``
    supervised as ``posenc serve`` supervises it) and the gateway; yields a client and the start-up seconds,
    and stops all three (their logs are copied to the output folder)."""
    queue, device = ("gpu", "cuda") if check.cuda else ("cpu", "cpu")
    logs = root / "logs"
    logs.mkdir(parents=True)
    began = time.perf_counter()
    redis_server = runtime.start_redis(root / "state")
    worker: runtime.SupervisedProcess | None = None
    gateway: subprocess.Popen[bytes] | None = None
    try:
        env = service_env(redis_server.url, root, device, check.threads)
        worker = runtime.SupervisedProcess(
            runtime.worker_command([queue], concurrency=1),
            env | {"REMAP_SIGTERM": "SIGQUIT"},  # as posenc serve: SIGTERM is Celery's soft shutdown
            logs / "worker.log",
            f"gpu_check worker ({queue})",
            ready=runtime.worker_heartbeat_probe(redis_server.url),
        )
        worker.start()
        gateway, url = start_gateway(env, logs / "gateway.log")
        if not runtime.wait_until(lambda: gateway_healthy(gateway, url), timeout=min(60.0, check.left()), interval=0.2):
            raise RuntimeError("the gateway did not answer /healthz in time (log jobs-gateway.log)")
        started = worker
        if not runtime.wait_until(lambda: started.readies > 0, timeout=min(90.0, check.left()), interval=0.2):
            raise RuntimeError(f"the worker on the {queue} queue did not beat in time (log jobs-worker.log)")
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, time.perf_counter() - began
    finally:
        if gateway is not None:
            runtime.terminate(gateway, grace_s=10)
        if worker is not None:
            worker.stop(grace_s=10)
        redis_server.stop()
        for name in ("worker", "gateway"):
            with contextlib.suppress(OSError):
                shutil.copyfile(logs / f"{name}.log", check.out_dir / f"jobs-{name}.log")


def submit(client: httpx.Client, kind: str, spec: dict[str, Any]) -> str:
    response = client.post("/v1/jobs", json={"kind": kind, "spec": spec})
    if response.status_code != 202:
        raise RuntimeError(f"POST /v1/jobs ({kind}) answered {response.status_code}: {response.text[:500]}")
    job_id: str = response.json()["id"]
    return job_id


def wait_for(client: httpx.Client, job_id: str, check: Check) -> dict[str, Any]:
    """The job's record once it is terminal, or its last record when the part's budget runs out."""
    job: dict[str, Any] = {}
    while True:
        response = client.get(f"/v1/jobs/{job_id}")
        response.raise_for_status()
        job = response.json()
        if job["status"] in ("succeeded", "failed", "cancelled", "expired") or check.left() <= 0:
            return job
        time.sleep(0.2)


def job_seconds(job: dict[str, Any]) -> float | None:
    if not job.get("started_at") or not job.get("finished_at"):
        return None
    started, finished = datetime.fromisoformat(job["started_at"]), datetime.fromisoformat(job["finished_at"])
    return (finished - started).total_seconds()


def cpu_reference(spec: dict[str, Any], root: Path) -> dict[str, Any]:
    """The same train spec and seed run in this process on the CPU (``run_job``, as a worker runs it)."""
    from posenc.training.hooks import NoHooks
    from posenc.training.jobs import run_job

    cpu_spec = JobSpec.model_validate(spec | {"device": "cpu"})
    return run_job("train", cpu_spec, job_dir=root / "cpu-reference", artifact_root=root, hooks=NoHooks(), device="cpu")


def part_jobs(check: Check) -> list[Row]:
    """A train job and a small benchmark through the gateway and a worker on the device's queue; the train
    job's final loss against the same spec run in this process on the CPU."""
    device = check.device.type
    train_spec = job_spec(check, ["rope"], device)
    # the rotary path, the bias path and a learned score term (FlexAttention on CUDA, the term's tables moved
    # with the model: a device mismatch before the fix found by the first CUDA run)
    bench_methods = ["rope", "alibi", "transformer_xl"]
    bench_spec = job_spec(check, bench_methods, device)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="posenc-gpu-check-") as directory:
        root = Path(directory)
        with live_service(check, root) as (client, startup_s):
            rows.append(
                Row(
                    "start redis-server, worker, gateway",
                    startup_s,
                    "s",
                    note=f"worker on the {'gpu' if check.cuda else 'cpu'} queue",
                )
            )
            train_id = submit(client, "train", train_spec)
            bench_id = submit(client, "benchmark", bench_spec)
            began = time.perf_counter()
            reference = cpu_reference(train_spec, root)  # while the worker runs the jobs
            reference_s = time.perf_counter() - began
            train_job = wait_for(client, train_id, check)
            bench_job = wait_for(client, bench_id, check)
    check.details.update({"train_job": train_job, "benchmark_job": bench_job, "cpu_reference": reference})
    rows.append(train_row(train_job, reference, reference_s, device))
    rows.append(benchmark_row(bench_job, bench_methods, device))
    return rows


def job_problem(job: dict[str, Any], device: str) -> str | None:
    """Why a job does not count as run on ``device``, or None."""
    if job["status"] in ("queued", "running"):
        return f"still {job['status']} when the part's time budget ran out"
    if job["status"] != "succeeded":
        return f"{job['status']}: {job.get('error') or 'no error recorded'}"
    recorded = (job.get("result") or {}).get("device")
    if recorded != device:
        return f"succeeded, but its result records device {recorded!r}, not {device!r}"
    return None


def train_row(job: dict[str, Any], reference: dict[str, Any], reference_s: float, device: str) -> Row:
    name = f"train job rope, copy: final loss on {device}"
    problem = job_problem(job, device)
    if problem is not None:
        return Row(name, note=f"job {job['id']} {problem}", ok=False)
    result = job["result"]
    loss, cpu_loss = float(result["final_loss"]), float(reference["final_loss"])
    difference = abs(loss - cpu_loss) / abs(cpu_loss)
    curve = max(
        (abs(a[1] - b[1]) / abs(b[1]) for a, b in zip(result["loss_curve"], reference["loss_curve"], strict=False)),
        default=0.0,
    )
    seconds = job_seconds(job)
    took = f"job {seconds:.1f} s, " if seconds is not None else ""
    note = (
        f"succeeded on {result['device']}; rel diff {difference:.2%} (tolerance {LOSS_TOLERANCE:.0%}), "
        f"largest on the loss curve {curve:.2%}; {took}cpu run {reference_s:.1f} s"
    )
    return Row(name, loss, "loss", "same spec, seed 0, on the cpu", cpu_loss, note, ok=difference <= LOSS_TOLERANCE)


def benchmark_row(job: dict[str, Any], methods: Sequence[str], device: str) -> Row:
    name = f"benchmark job {', '.join(methods)}, copy"
    problem = job_problem(job, device)
    if problem is not None:
        return Row(name, note=f"job {job['id']} {problem}", ok=False)
    table = job["result"].get("table", [])
    found = sorted({row["method"] for row in table})
    seconds = job_seconds(job)
    note = f"succeeded on {job['result']['device']}; {len(table)} table rows for {', '.join(found) or 'no method'}"
    return Row(name, seconds, "s", note=note, ok=found == sorted(methods))


# ------------------------------------------------------------------------------------------------- flex
def flex_methods() -> list[pe.MethodSpec]:
    """The bias and score_mod methods of the decoder (1D positions): those ``fast_attend`` may send through
    FlexAttention. A method without a score_mod form (a value-side term) gets a row saying so."""
    return [spec for spec in pe.list_methods() if spec.kind in (Kind.BIAS, Kind.SCORE_MOD) and spec.axes == 1]


def materialised_sdpa(
    applier: Applier, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, fixed: torch.Tensor | None
) -> torch.Tensor:
    """The materialised-bias path: the method's additive term as a dense tensor, causal −inf included, handed
    to ``scaled_dot_product_attention`` as its mask. A bias method's (H, T, T) bias (built once when it is
    fixed, as the training layer caches it); a score_mod method's logits less scale·q·kᵀ, (B, H, T, T)."""
    if fixed is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=fixed)
    pos = positions(q.shape[-2], q.device)
    future = future_mask(pos, pos)  # (1, 1, T, T)
    if isinstance(applier, BiasApplier):
        bias = applier.bias(pos, pos).to(q.dtype)  # (H, T, T), −inf above the diagonal
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    scale = 1.0 / math.sqrt(q.shape[-1])
    inputs = LayerInputs(q=q, k=k, q_pos=pos, k_pos=pos, mask=future, x=x)
    logits = applier.score_terms(inputs, scale).logits  # (B, H, T, T)
    term = (logits - torch.matmul(q, k.transpose(-1, -2)) * scale).masked_fill(future, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=term.to(q.dtype))


def part_flex(check: Check) -> list[Row]:
    rows: list[Row] = []
    for spec in flex_methods():
        skipped = check.over_budget(f"flex {spec.name}")
        if skipped is not None:
            rows.append(skipped)
            continue
        if check.cuda:
            # Each method's score_mod is compiled anew, as in a training process of its own: one process's dozens
            # of score_mods (and grad modes) would pass Dynamo's recompile limit, and the rest would run eagerly.
            torch._dynamo.reset()
        rows.extend(guarded(check, f"flex {spec.name}", functools.partial(flex_rows, check, spec)))
    return rows


FLEX_PARAMS: dict[str, dict[str, Any]] = {
    "huang": {"max_position": 4096},  # its table's default 512 rows cover |i − j| < 512 only
}


def flex_rows(check: Check, spec: pe.MethodSpec) -> list[Row]:
    """Forward, and forward + backward, of FlexAttention against the materialised-bias SDPA path for one
    method, built as the training model builds it (learned weights from ``learned_init``); outputs (and
    gradients where there is a backward) compared."""
    batch, heads, length, head_dim = check.sizes.flex
    device = check.device
    layer = Layer(num_heads=heads, head_dim=head_dim, causal=True, model_dim=heads * head_dim)
    encoding = PositionalEncoding(spec.name, FLEX_PARAMS.get(spec.name, {}), layer, init_tokens=length).to(device)
    applier = encoding.applier()
    generator = torch.Generator().manual_seed(0)
    q, k, v = (random(batch, heads, length, head_dim, generator=generator, device=device) for _ in range(3))
    x = random(batch, length, heads * head_dim, generator=generator, device=device)
    fixed = None
    if isinstance(applier, BiasApplier) and not spec.learned:
        with torch.no_grad():
            fixed = applier.bias(positions(length, device), positions(length, device))  # (H, T, T)
    leaves = tuple(t.clone().requires_grad_() for t in (q, k, v))
    inputs = list(leaves)  # q, k, v as both sides get them: leaves of autograd, or plain where no backward

    def flex() -> torch.Tensor | None:
        return applier.flex_attend(*inputs, x=x)

    def dense() -> torch.Tensor:
        q, k, v = inputs
        return materialised_sdpa(applier, q, k, v, x, fixed)

    label = f"{spec.name} (B={batch}, H={heads}, T={length}, d={head_dim})"
    baseline_name = "SDPA, bias built once" if fixed is not None else "SDPA, dense term per call"
    began = time.perf_counter()
    backward_note = ""
    try:
        out = flex()
    except NotImplementedError as error:  # no FlexAttention backward on this device (the CPU in torch 2.13)
        backward_note = f"not available on {device.type}: {str(error).split('. ')[0]}"
        inputs = [q, k, v]  # it refuses inputs that require grad, even under no_grad
        with torch.no_grad():
            out = flex()
    check.sync()
    first_s = time.perf_counter() - began
    if out is None:
        return [Row(f"flex fwd {label}", note="no score_mod form (a value-side term): the materialised path only")]
    grad = not backward_note
    with torch.set_grad_enabled(grad):
        reference = dense()
    agree = torch.allclose(out, reference, rtol=FLEX_OUT_TOLERANCE, atol=FLEX_OUT_TOLERANCE)
    compared = f"max abs diff out {float((out - reference).detach().abs().max()):.1e}"
    grad_agree = True
    if grad:
        upstream = torch.randn(out.shape, generator=generator).to(device)
        flex_grads = torch.autograd.grad(out, leaves, upstream)
        dense_grads = torch.autograd.grad(reference, leaves, upstream)
        grad_agree = all(
            torch.allclose(a, b, rtol=FLEX_GRAD_TOLERANCE, atol=FLEX_GRAD_TOLERANCE)
            for a, b in zip(flex_grads, dense_grads, strict=True)
        )
        gap = max(float((a - b).abs().max()) for a, b in zip(flex_grads, dense_grads, strict=True))
        compared += f", grads {gap:.1e}"
    del out, reference
    first = f"first call {first_s:.1f} s" + (" (compile)" if check.cuda else "")
    with torch.set_grad_enabled(grad):
        flex_s, dense_s = timed_pair(check, flex, dense)
    forward_note = f"{compared}; {first}" + ("" if grad else "; no_grad forward")
    rows = [
        Row(f"flex fwd {label}", flex_s * 1e3, "ms", baseline_name, dense_s * 1e3, forward_note, ok=agree),
    ]
    if not grad:
        rows.append(Row(f"flex fwd+bwd {spec.name}", note=backward_note))
        return rows

    def flex_train() -> object:
        result = flex()
        assert result is not None
        return torch.autograd.grad(result, leaves, upstream)

    def dense_train() -> object:
        return torch.autograd.grad(dense(), leaves, upstream)

    skipped = check.over_budget(f"flex fwd+bwd {spec.name}")
    if skipped is not None:
        return [*rows, skipped]
    train_s, dense_train_s = timed_pair(check, flex_train, dense_train)
    rows.append(
        Row(f"flex fwd+bwd {spec.name}", train_s * 1e3, "ms", baseline_name, dense_train_s * 1e3, ok=grad_agree)
    )

    def materialised_train() -> object:
        pos = positions(length, device)
        out = applier.attend(*leaves, q_pos=pos, k_pos=pos, mask=future_mask(pos, pos), x=x).output
        assert out is not None
        return torch.autograd.grad(out, leaves, upstream)

    skipped = check.over_budget(f"path table {spec.name}")
    if skipped is not None:
        return [*rows, skipped]
    materialised_s, dense_again_s = timed_pair(check, materialised_train, dense_train)
    rows.append(
        path_table_row(spec, length, flex_s=train_s / dense_train_s, materialised_s=materialised_s / dense_again_s)
    )
    return rows


def path_table_row(spec: pe.MethodSpec, length: int, *, flex_s: float, materialised_s: float) -> Row:
    """The path table's choice for this method at this length on CUDA against the fastest of the three paths
    timed (fwd+bwd, each relative to the dense-mask path timed beside it): a ratio over 1.1 means the table
    (``posenc.pe.paths``) should change."""
    relative = {"sdpa_mask": 1.0, "flex": flex_s, "materialised": materialised_s}
    chosen, evidence = path_choice(spec.kind, "cuda", length, span=False, additive=not spec.value_term)
    fastest = min(relative, key=relative.__getitem__)
    times = ", ".join(f"{path} {value:.2f}" for path, value in relative.items())
    verdict = "holds" if relative[chosen] <= 1.1 * relative[fastest] else f"CHANGE IT: {fastest} is faster"
    return Row(
        f"path table {spec.name} (T={length})",
        relative[chosen],
        "x",
        f"fastest: {fastest}",
        relative[fastest],
        note=f"table: {chosen} ({verdict}); fwd+bwd relative to sdpa_mask: {times}; the row's evidence: {evidence}",
    )


# ----------------------------------------------------------------------------------------------- rotary
def part_rotary(check: Check) -> list[Row]:
    """The rotary apply on q and k (a training layer's ``rotate_cached``, tables cached) against cloning them,
    float32 and bfloat16 (tables float32, the result cast back). On CUDA also with the compiled kernels off:
    the kernel is the CPU's, so both float32 rows must take the same eager path (the first H100 run found
    CUDA tensors trying the CPU kernel first, 12.9 ms against 0.38 ms)."""
    batch, heads, length, head_dim = check.sizes.rotary
    spec = pe.get_method("rope")
    applier: Any = build_applier(
        spec, spec.parse_params({}), Layer(num_heads=heads, head_dim=head_dim, causal=True), cache={}
    )
    rows: list[Row] = []
    kernel_note = ""
    if not check.quick and not check.cuda:  # the CPU's steady state: its background kernel compile done
        began = time.perf_counter()
        ready = compiled.wait_until_ready("half")
        kernel_note = f"kernel compiled in {time.perf_counter() - began:.1f} s" if ready else "kernel compile failed"
    generator = torch.Generator().manual_seed(0)
    setups: list[tuple[torch.dtype, bool]] = [(torch.float32, True), (torch.bfloat16, True)]
    if check.cuda:
        setups.append((torch.float32, False))
    for dtype, kernels in setups:
        name = f"rotary q,k rope half {str(dtype).removeprefix('torch.')} {tuple(check.sizes.rotary)}"
        name += "" if kernels else " kernels off"
        skipped = check.over_budget(name)
        if skipped is not None:
            rows.append(skipped)
            continue
        q, k = (
            random(batch, heads, length, head_dim, generator=generator, device=check.device, dtype=dtype) for _ in "qk"
        )

        def rotate(q: torch.Tensor = q, k: torch.Tensor = k) -> tuple[torch.Tensor, torch.Tensor]:
            rotated: tuple[torch.Tensor, torch.Tensor] = applier.rotate_cached(q, k)
            return rotated

        def clone(q: torch.Tensor = q, k: torch.Tensor = k) -> tuple[torch.Tensor, torch.Tensor]:
            return q.clone(), k.clone()

        compiled.configure(enabled=kernels)
        try:
            with torch.no_grad():
                rotated, _ = rotate()
                finite = bool(torch.isfinite(rotated).all()) and rotated.dtype == dtype
                measured, baseline = timed_pair(check, rotate, clone)
        finally:
            compiled.configure(enabled=True)
        note = kernel_note if dtype == torch.float32 and kernels else ""
        ok_note = "" if finite else "output not finite or not in the input's dtype"
        rows.append(
            Row(
                name,
                measured * 1e3,
                "ms",
                "clone q and k",
                baseline * 1e3,
                "; ".join(filter(None, (note, ok_note))),
                ok=finite,
            )
        )
    return rows


# ------------------------------------------------------------------------------------------------- bias
def part_bias(check: Check) -> list[Row]:
    """ALiBi's dense causal bias (H, N, N) built on the device against cloning a tensor of the same bytes."""
    heads, length, _ = check.sizes.bias
    spec = pe.get_method("alibi")
    params = spec.parse_params({})
    ctx = pe.BiasContext(
        num_heads=heads, query_length=length, key_length=length, causal=True, dtype=torch.float32, device=check.device
    )
    same_bytes = torch.empty(heads, length, length, device=check.device).normal_()

    def dense() -> object:
        return pe.bias_dense(spec, params, ctx)

    built = pe.bias_dense(spec, params, ctx)
    on_device = built.device.type == check.device.type and tuple(built.shape) == (heads, length, length)
    measured, baseline = timed_pair(check, dense, same_bytes.clone)
    mib = same_bytes.numel() * same_bytes.element_size() / 2**20
    note = "" if on_device else f"built on {built.device} with shape {tuple(built.shape)}"
    name = f"bias dense alibi ({heads},{length},{length})"
    return [Row(name, measured * 1e3, "ms", f"clone {mib:.0f} MiB", baseline * 1e3, note, ok=on_device)]


# -------------------------------------------------------------------------------------------- training
class SyncedSteps(Steps):
    """bench/train_throughput.py's ``Steps``, each step ending with a wait for the device."""

    def __init__(self, check: Check, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.check = check

    def step(self) -> float:
        began = time.perf_counter()
        super().step()
        self.check.sync()
        return time.perf_counter() - began


def minimal_gpt(shape: Shape, method: str, device: torch.device) -> MiniGPT:
    mini = MiniGPT(shape, method).to(device)
    mini.tables = tuple(table.to(device) for table in mini.tables)  # plain attributes: .to() leaves them
    return mini


def part_train(check: Check) -> list[Row]:
    """Training tokens/s of the job model (``TinyTransformer``: its step, and the job trainer) against a
    minimal GPT of the same parameter count, per method, bracketed step by step (bench/train_throughput.py)."""
    shape, steps, warmup = check.sizes.train, check.sizes.train_steps, check.sizes.train_warmup
    cpu_batches = random_batches(shape, warmup + steps)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="posenc-gpu-check-") as directory:
        for method in METHODS:
            skipped = check.over_budget(f"train {method}")
            if skipped is not None:
                rows.append(skipped)
                continue
            rows.extend(
                guarded(
                    check,
                    f"train {method}",
                    functools.partial(train_rows, check, method, cpu_batches, Path(directory)),
                )
            )
    return rows


def train_rows(check: Check, method: str, cpu_batches: list[Batch], root: Path) -> list[Row]:
    shape, warmup, device = check.sizes.train, check.sizes.train_warmup, check.device
    batches = [Batch(b.inputs.to(device), b.targets.to(device)) for b in cpu_batches]
    spec = TrainSpec(length=shape.length, steps=len(batches), batch_size=shape.batch, checkpoint_every=100)
    tokens = shape.batch * shape.length
    size = f"{shape.layers}L d={shape.dim} T={shape.length} B={shape.batch}"
    config = tiny_config(shape, method)
    tiny, mini = TinyTransformer(config).to(device), minimal_gpt(shape, method, device)
    count, baseline_count = count_parameters(tiny), count_parameters(mini)
    if count != baseline_count:
        return [Row(f"train step {method}", note=f"{count} vs {baseline_count} parameters", ok=False)]
    times = model_step_times(
        SyncedSteps(check, tiny, batches, spec, root, job_work=False),
        SyncedSteps(check, mini, batches, spec, root, job_work=False),
    )
    step = bracketed(times, warmup, tokens)
    note = f"{size}; all steps {step.overall:.3f}"
    rows = [
        Row(f"train step TinyTransformer {method}", step.measured, "tok/s", "minimal GPT step", step.baseline, note)
    ]
    skipped = check.over_budget(f"job trainer {method}")
    if skipped is not None:
        return [*rows, skipped]
    baseline = SyncedSteps(check, minimal_gpt(shape, method, device), batches, spec, root, job_work=True)
    hooks = InterleavedHooks(baseline)
    cursor = iter(cpu_batches)  # the trainer moves each batch to the device, as in a job
    with tempfile.TemporaryDirectory(dir=root) as run_dir:
        hooks.mark = time.perf_counter()
        train(config, 0, spec, lambda _: next(cursor), checkpoint_dir=Path(run_dir), hooks=hooks, device=device.type)
    job = bracketed(hooks.times, warmup, tokens)
    note = f"{size}; all steps {job.overall:.3f}"
    rows.append(Row(f"job trainer {method}", job.measured, "tok/s", "minimal GPT train loop", job.baseline, note))
    return rows


# ------------------------------------------------------------------------------------------------- vit
def vit_params(name: str, sizes: ViTSizes) -> dict[str, Any]:
    """The params a 2D method requires at these sizes (everything else keeps the paper's defaults)."""
    grid = sizes.image // sizes.patch
    head_dim = sizes.dim // sizes.heads
    required: dict[str, dict[str, Any]] = {
        "swin": {"window": [grid, grid]},  # BEiT's choice: the window is the patch grid
        "liere": {"block_size": min(64, head_dim)},  # the paper's 64, or the whole head when it is smaller
    }
    return required.get(name, {})


def part_vit(check: Check) -> list[Row]:
    """A ViT training step (forward, loss, backward, AdamW) per 2D method against the same ViT without a
    positional encoding (``nope``), alternated."""
    sizes = check.sizes.vit
    device = check.device
    generator = torch.Generator().manual_seed(0)
    images = random(sizes.batch, 3, sizes.image, sizes.image, generator=generator, device=device)
    labels = torch.randint(0, 10, (sizes.batch,), generator=generator).to(device)
    batch = Batch(images, labels)

    def stepper(name: str) -> Callable[[], object]:
        config = ViTConfig(
            num_classes=10,
            image_size=sizes.image,
            patch_size=sizes.patch,
            layers=sizes.layers,
            dim=sizes.dim,
            heads=sizes.heads,
            method=name,
            params=vit_params(name, sizes),
        )
        model = VisionTransformer(config).to(device)
        optimizer = make_optimizer(model, TrainSpec())

        def step() -> object:
            loss = sequence_loss(model(images), batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            return loss

        return step

    floor = stepper("nope")

    def vit_row(name: str) -> list[Row]:
        measured, baseline = timed_pair(check, stepper(name), floor)
        return [Row(f"ViT step {name}", measured * 1e3, "ms", "ViT step, nope", baseline * 1e3, size)]

    size = f"{sizes.image}px/{sizes.patch}, {sizes.layers}L d={sizes.dim} B={sizes.batch}"
    rows: list[Row] = []
    for spec in pe.list_methods():
        if spec.axes != 2:
            continue
        skipped = check.over_budget(f"ViT step {spec.name}")
        if skipped is not None:
            rows.append(skipped)
            continue
        rows.extend(guarded(check, f"ViT step {spec.name}", functools.partial(vit_row, spec.name)))
    return rows


# --------------------------------------------------------------------------------------------- nanoGPT
NANOGPT_METHODS = ("learned_absolute", "rope", "alibi", "t5", "fire", "xpos")
NANOGPT_GOAL = 0.9


class NanoGPTSteps:
    """nanoGPT's train.py at a size, as the baseline: its GPT (learned absolute positions, ``MiniGPT``) under bf16
    autocast, ``torch.compile``d, fused AdamW with decay on matrices only, the lr set every step, gradients
    clipped at 1.0, the loss read only every ``LOSS_READ_EVERY`` steps (its log interval), flash SDPA (is_causal).
    ``compile``: False on a quick CPU run, where a compile would take most of the check. Cycles through its
    batches, so one compiled baseline serves every method."""

    def __init__(self, check: Check, shape: Shape, batches: Sequence[Batch], spec: TrainSpec, *, compile: bool):
        self.check, self.batches, self.spec = check, batches, spec
        model = minimal_gpt(shape, "learned_absolute", check.device)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        plain = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": spec.weight_decay}, {"params": plain, "weight_decay": 0.0}]
        fused = check.cuda  # fused AdamW, as nanoGPT takes it where the device has it
        self.optimizer = torch.optim.AdamW(groups, lr=spec.lr, betas=ADAM_BETAS, fused=fused)
        self.model: Any = torch.compile(model) if compile else model
        self.name = f"nanoGPT (bf16, {'compiled' if compile else 'eager'}, {'fused ' if fused else ''}AdamW)"
        self.done = 0
        self.pending: list[torch.Tensor] = []

    def step(self) -> float:
        began = time.perf_counter()
        batch = self.batches[self.done % len(self.batches)]
        lr = self.spec.lr * lr_factor(self.done % self.spec.steps, self.spec.warmup_steps, self.spec.steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast(self.check.device.type, dtype=torch.bfloat16):
            logits = self.model(batch.inputs)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), batch.targets.view(-1))  # (B·T, V), (B·T,)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.pending.append(loss.detach())
        self.done += 1
        if self.done % LOSS_READ_EVERY == 0:
            torch.stack(self.pending).tolist()
            self.pending.clear()
        self.check.sync()
        return time.perf_counter() - began


def part_nanogpt(check: Check) -> list[Row]:
    """The job trainer (``train.precision`` and ``train.compile`` left at auto: bf16 and compiled on CUDA) for
    rope, alibi, learned_absolute, t5, fire and xpos against nanoGPT's own configuration at the same size
    (``NanoGPTSteps``), bracketed step by step as the train part does; goal >= 0.9x at every size."""
    rows: list[Row] = []
    quick_cpu = not check.cuda
    for shape in check.sizes.nanogpt:
        size = f"{shape.layers}L d={shape.dim} H={shape.heads} T={shape.length} B={shape.batch}"
        steps, warmup = check.sizes.nanogpt_steps, check.sizes.nanogpt_warmup
        cpu_batches = random_batches(shape, warmup + steps)
        batches = [Batch(b.inputs.to(check.device), b.targets.to(check.device)) for b in cpu_batches]
        precision = "bf16"  # what auto means on CUDA; on the CPU bf16 too, so the CPU run exercises the same code
        compiled = "auto" if check.cuda else "off"
        spec = TrainSpec(
            length=shape.length, steps=len(batches), batch_size=shape.batch, precision=precision, compile=compiled
        )
        baseline: NanoGPTSteps | None = None
        for method in NANOGPT_METHODS:
            name = f"job trainer {method} vs nanoGPT ({size})"
            skipped = check.over_budget(name)
            if skipped is not None:
                rows.append(skipped)
                continue
            if baseline is None:
                baseline = NanoGPTSteps(check, shape, batches, spec, compile=not quick_cpu)
            rows.extend(
                guarded(check, name, functools.partial(nanogpt_row, check, name, method, shape, spec, baseline))
            )
    return rows


def nanogpt_row(
    check: Check, name: str, method: str, shape: Shape, spec: TrainSpec, baseline: NanoGPTSteps
) -> list[Row]:
    hooks = InterleavedHooks(baseline)  # type: ignore[arg-type]
    cursor = iter(random_batches(shape, spec.steps))  # the trainer moves each batch to the device, as in a job
    config = tiny_config(shape, method)
    with tempfile.TemporaryDirectory(prefix="posenc-gpu-check-") as run_dir:
        hooks.mark = time.perf_counter()
        outcome = train(
            config, 0, spec, lambda _: next(cursor), checkpoint_dir=Path(run_dir), hooks=hooks, device=check.device.type
        )
    figure = bracketed(hooks.times, check.sizes.nanogpt_warmup, shape.batch * shape.length)
    report = outcome.compile
    compiled = "eager"
    if report is not None and report.compiled:
        compiled = f"compiled (first step {report.first_step_s or 0.0:.1f} s)"
    if report is not None and report.error:
        compiled = f"eager after a failed compile: {report.error}"
    paths = ",".join(sorted(set(attention_paths_of(outcome.model, check.device.type) or [])))
    goal = "met" if figure.ratio >= NANOGPT_GOAL else "MISSED"
    mfu = "" if outcome.mfu is None else f"; MFU {outcome.mfu:.1%}"
    note = (
        f"goal {NANOGPT_GOAL}x {goal}; {outcome.precision}, {compiled}; attention {paths}; all steps "
        f"{figure.overall:.3f}{mfu}"
    )
    return [Row(name, figure.measured, "tok/s", baseline.name, figure.baseline, note)]


# ---------------------------------------------------------------------------------------- compile cache
COMPILE_PROBE = """
import json, sys, torch
from posenc.schemas.jobs import TrainSpec
from posenc.training.model import ModelConfig
from posenc.training.train import Batch, train
device, layers, dim, heads, length, batch = sys.argv[1], *map(int, sys.argv[2:])
config = ModelConfig(vocab_size=65, layers=layers, dim=dim, heads=heads, method="rope", train_length=length)
def batches(generator):
    ids = torch.randint(0, 65, (batch, length + 1), generator=generator)  # (B, T + 1)
    return Batch(inputs=ids[:, :-1], targets=ids[:, 1:])
outcome = train(config, 0, TrainSpec(length=length, steps=3, batch_size=batch, compile="on"), batches, device=device)
print(json.dumps(outcome.compile.to_json()))
"""


def part_compile(check: Check) -> list[Row]:
    """The compile cache: the same compiled training run (rope, at the train part's size) in two fresh processes
    that share an empty Inductor cache, as two workers of a machine share the state directory's: the second
    one's first compiled step against the first one's."""
    shape = check.sizes.train
    reports = []
    with tempfile.TemporaryDirectory(prefix="posenc-compile-cache-") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(Path(cache) / "inductor"),
               "TRITON_CACHE_DIR": str(Path(cache) / "triton")}  # fmt: skip
        for _ in range(2):
            args = [str(value) for value in (shape.layers, shape.dim, shape.heads, shape.length, shape.batch)]
            finished = subprocess.run(
                [sys.executable, "-c", COMPILE_PROBE, check.device.type, *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=max(30.0, check.left()),
                check=False,
            )
            if finished.returncode != 0:
                tail = " ".join(finished.stderr.split()[-40:])
                return [Row("compile cache", note=f"the probe exited {finished.returncode}: {tail}", ok=False)]
            reports.append(json.loads(finished.stdout.strip().splitlines()[-1]))
    cold, warm = reports
    ok = bool(cold["compiled"] and warm["compiled"] and warm["cache_hits"] > 0 and warm["cache_misses"] == 0)
    size = f"{shape.layers}L d={shape.dim} T={shape.length} B={shape.batch}"
    note = (
        f"{size}; graphs: cold {cold['cache_misses']} compiled, warm {warm['cache_hits']} from the cache and "
        f"{warm['cache_misses']} compiled"
    )
    return [
        Row(
            "compile cache: a second process's first compiled step",
            warm["first_step_s"],
            "s",
            "the first process's",
            cold["first_step_s"],
            note,
            ok=ok,
        )
    ]


# ----------------------------------------------------------------------------------------------- study
def study_spec(check: Check) -> dict[str, Any]:
    """The context-extension study's spec: GPT-2 small (12 layers, d=768, 12 heads) trained at T=1024, or a tiny
    model at T=64 with ``--quick``; the arms at factor 4, evaluated at 1x, 2x and 4x the training length."""
    from posenc.errors import InvalidInput
    from posenc.settings import get_settings
    from posenc.training.data import corpus_path

    length = 64 if check.quick else 1024
    model = {"layers": 1, "dim": 32, "heads": 2} if check.quick else {"layers": 12, "dim": 768, "heads": 12}
    try:
        corpus = "tinyshakespeare" if corpus_path("tinyshakespeare", get_settings().data_dir) else "stdlib"
    except InvalidInput:  # no tinyshakespeare.txt in the data directories
        corpus = "stdlib"
    return {
        "methods": [{"method": "rope_linear"}, {"method": "rope_ntk"}, {"method": "rope_yarn"}],
        "extension": {"factor": 4},
        "data": {"corpus": corpus},
        "model": model,
        "train": {"length": length, "steps": 20 if check.quick else 600, "batch_size": 4 if check.quick else 16},
        "eval": {"lengths": [length, 2 * length, 4 * length], "max_tokens": 2048 if check.quick else 65536},
        "seeds": [0],
        "device": check.device.type,
    }


def part_study(check: Check) -> list[Row]:
    from posenc.settings import get_settings
    from posenc.training.hooks import NoHooks
    from posenc.training.jobs import run_job

    spec = study_spec(check)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="posenc-gpu-check-study-") as root:
        result = run_job(
            "benchmark",
            JobSpec.model_validate(spec),
            job_dir=Path(root) / "study",
            artifact_root=Path(root),
            hooks=NoHooks(),
            device=check.device.type,
            data_dir=get_settings().data_dir,
        )
    seconds = time.perf_counter() - began
    check.details["study"] = {"spec": spec, "result": result}
    model = spec["model"]
    size = f"{model['layers']}L d={model['dim']} T={spec['train']['length']}, {spec['data']['corpus']}"
    base_len = spec["train"]["length"]
    perplexity = {(row["method"], row["size"]): row["value"] for row in result["table"] if row["metric"] == "ppl"}
    rows = []
    for (method, length), value in perplexity.items():
        if method == "base":
            continue
        name = f"study {method} at {length / base_len:g}x ({size})"
        note = f"perplexity; the base model (no rule) beside it; the whole study {seconds:.0f} s"
        rows.append(Row(name, value, "ppl", "base", perplexity.get(("base", length)), note))
    return rows or [Row("study", note=f"no perplexity in the result's table: {result['table'][:2]}", ok=False)]


PARTS: dict[str, Callable[[Check], list[Row]]] = {
    "tests": part_tests,
    "jobs": part_jobs,
    "flex": part_flex,
    "rotary": part_rotary,
    "bias": part_bias,
    "train": part_train,
    "nanogpt": part_nanogpt,
    "compile": part_compile,
    "vit": part_vit,
    "study": part_study,
}
# Seconds each part may take on a GPU; they add up to the 9-minute target less start-up. Measured on an H100
# (2026-11-26, torch 2.11): tests 39 s, jobs 115 s with the benchmark unfinished (each FlexAttention method's
# first job run compiled for about 50 s; bias and content layers now take the dense-mask path there), flex 58 s,
# rotary 2 s, bias 0 s, train 20 s alone, vit 6 s. nanogpt and compile are new: sized from the CPU's timings
# and a compile of 10-50 s per model and size.
BUDGETS_S: dict[str, float] = {
    "tests": 60,
    "jobs": 100,
    "flex": 100,
    "rotary": 15,
    "bias": 10,
    "train": 40,
    "nanogpt": 150,
    "compile": 45,
    "vit": 20,
    "study": 300,  # asked for alone: a GPT-2-small model's compile, 600 steps and three arms' evaluation
}
