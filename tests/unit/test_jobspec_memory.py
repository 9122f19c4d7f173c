"""The gateway checks a job spec without building the tensors the job itself would build."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHECK = textwrap.dedent(
    """
    import resource
    from posenc.jobspec import validate_spec
    from posenc.schemas.jobs import JobSpec

    spec = JobSpec.model_validate({
        "methods": [{"method": "sinusoidal"}],
        "data": {"corpus": "stdlib"},
        "model": {"layers": 1, "dim": 8192, "heads": 8},
        "train": {"length": 64, "steps": 1, "batch_size": 1},
        "eval": {"lengths": [1048576], "max_tokens": 1},
    })
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    validate_spec("train", spec)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
    """
)


def test_an_absolute_method_at_a_long_evaluation_length_is_checked_without_its_table() -> None:
    """(2^20, 8192) float32 is 32 GiB: the check must not allocate it (it runs on torch's meta device)."""
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    grown_mib = int(result.stdout.strip().splitlines()[-1])
    assert grown_mib < 512, f"validating the spec grew the process by {grown_mib} MiB"
