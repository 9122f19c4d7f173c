"""``train.compile`` through the job API, with real workers on the CPU: a compiled run trains as the eager one
does, Inductor's cache in the state directory is shared by two workers (the second one's first compiled job loads
every graph and compiles none), and a compile that cannot work (no C++ compiler) falls back to eager, says so,
and trains exactly the eager run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from posenc.job_estimates import COMPILE_S

pytestmark = pytest.mark.integration

STEPS = 12


def spec(compile: str) -> dict[str, Any]:
    return {
        "methods": [{"method": "rope"}],
        "data": {"task": "copy", "size": 4},
        "model": {"layers": 1, "dim": 32, "heads": 2},
        "train": {"steps": STEPS, "batch_size": 8, "warmup_steps": 2, "compile": compile},
        "eval": {"samples": 8},
        "device": "cpu",
    }


def train(client: Any, jobs: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The job's one run, with the job's estimate beside its record."""
    created = client.post("/v1/jobs", json={"kind": "train", "spec": body})
    assert created.status_code == 202, created.text
    done: dict[str, Any] = jobs.wait(client, created.json()["id"], jobs.is_terminal, timeout=400)
    assert done["status"] == "succeeded", done
    [run] = done["result"]["runs"]
    return {**run, "estimate_s": done["estimate_s"]}


def losses(run: dict[str, Any]) -> list[float]:
    return [loss for _, loss in run["loss_curve"]]


def test_compiled_runs_share_the_state_dirs_cache_and_a_failed_compile_falls_back(
    start_gateway: Any, start_worker: Any, jobs: Any, job_env: dict[str, str], tmp_path: Path
) -> None:
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):  # as on a fresh machine: the workers choose
        job_env.pop(name, None)
    gateway = start_gateway()
    first = start_worker()
    with gateway.client() as client:
        eager = train(client, jobs, spec("auto"))  # auto is eager on the CPU
        assert eager["compile"] == {
            "requested": "auto",
            "compiled": False,
            "error": None,
            "first_step_s": None,
            "cache_hits": 0,
            "cache_misses": 0,
        }
        cold = train(client, jobs, spec("on"))
        assert cold["compile"]["compiled"] is True, cold["compile"]
        assert eager["estimate_s"] < COMPILE_S <= cold["estimate_s"]  # the estimate counts the compile
        assert (cold["compile"]["cache_misses"] > 0, cold["compile"]["cache_hits"]) == (True, 0), cold["compile"]
        cache = tmp_path / "state" / "compile-cache" / "inductor"
        assert any(cache.rglob("*")), "nothing written to the state directory's Inductor cache"
        # the same training, compiled: Inductor fuses (one rounding fewer here and there), nothing else differs
        assert losses(cold) == pytest.approx(losses(eager), rel=1e-4)
        assert len(losses(cold)) == STEPS

        first.kill_all()
        second = start_worker()  # another worker process of the same machine: its first compiled job reads the cache
        warm = train(client, jobs, spec("on"))
        assert warm["compile"]["compiled"] is True
        assert (warm["compile"]["cache_hits"] > 0, warm["compile"]["cache_misses"]) == (True, 0), warm["compile"]
        assert losses(warm) == losses(cold)
        print("first compiled step: cold", cold["compile"]["first_step_s"], "s, from the cache",
              warm["compile"]["first_step_s"], "s")  # fmt: skip

        # a worker that cannot compile (CXX names no compiler) and has a cache of its own, empty
        second.kill_all()
        start_worker({"CXX": str(tmp_path / "no-such-compiler"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "empty")})
        fell_back = train(client, jobs, spec("on"))
        report = fell_back["compile"]
        assert report["compiled"] is False, report
        assert "C++ compiler" in report["error"], report
        assert losses(fell_back) == losses(eager)  # the eager run, bit for bit
