"""How well a run used its device: model FLOPs per token and the model FLOPs utilisation (MFU), the FLOPs a
run's tokens/s imply over the device's peak at the run's precision.

FLOPs per training token (PaLM's appendix B, as nanoGPT's ``estimate_mfu``): ``6 N + 12 L d T``, N the
parameters outside the position encoding (each is one multiply-add forward and two backward per token), L the
layers, d the width and T the tokens each example's attention reads (the score and value products, forward and
backward; a causal mask's skipped half is counted, as nanoGPT does). The position encoding's own work (a bias,
a rotation) is not counted: MFU is about the model's matmuls.

Peaks: a GPU's from ``GPU_PEAKS`` (vendor dense figures, no sparsity; the name ``torch.cuda.get_device_name``
gives is matched by substring), ``bf16`` with bf16 tensor cores and ``fp32`` without TF32; a GPU not in the table
has no MFU (None), never a guessed one. The CPU's is measured (:func:`cpu_peak`): the best of a few bursts of
square matmuls at the run's thread count and dtype, once per machine, kept in a small file beside the system's
temporary files. Measured beside other work it is lower than the machine's, so an MFU on a busy CPU reads high.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

# Dense peak TFLOP/s per precision (bf16: bf16 tensor cores, fp32: plain float32, no TF32), from the vendors'
# datasheets; matched against the device name in this order (the more specific names first).
GPU_PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"bf16": 989.0, "fp32": 67.0}),
    ("H100 PCIe", {"bf16": 756.0, "fp32": 51.0}),
    ("H100", {"bf16": 989.0, "fp32": 67.0}),
    ("A100", {"bf16": 312.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.0, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "fp32": 31.2}),
    ("RTX 4090", {"bf16": 165.2, "fp32": 82.6}),
)
CPU_MATMUL = 512  # the square matmul a CPU's peak is measured with
CPU_BURST_S = 0.05  # seconds per burst; the best of CPU_BURSTS counts
CPU_BURSTS = 3


def _is_position_encoding(name: str) -> bool:
    return "pe" in name.split(".")


def flops_per_token(model: nn.Module, layers: int, dim: int, context: float) -> float:
    """Training FLOPs per token: ``6 N + 12 L d T`` (module docstring), T = ``context``."""
    weights = sum(p.numel() for name, p in model.named_parameters() if not _is_position_encoding(name))
    return 6.0 * weights + 12.0 * layers * dim * context


def gpu_peak(name: str, precision: str) -> float | None:
    """FLOP/s of a GPU named ``name`` at ``precision``; None when the table does not know it."""
    for pattern, peaks in GPU_PEAKS:
        if pattern in name:
            return peaks[precision] * 1e12
    return None


def _cache_file(threads: int, dtype: torch.dtype) -> Path:
    machine = hashlib.sha256(f"{platform.node()} {platform.processor()} {platform.machine()}".encode()).hexdigest()
    return Path(tempfile.gettempdir()) / f"posenc-cpu-peak-{machine[:12]}-{threads}-{str(dtype).split('.')[-1]}.json"


def measure_cpu_peak(dtype: torch.dtype, threads: int) -> float:
    """FLOP/s of square matmuls on this CPU at ``threads`` threads: the best of ``CPU_BURSTS`` bursts."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(CPU_MATMUL, CPU_MATMUL, generator=torch.Generator().manual_seed(0)).to(dtype)
        b = torch.randn(CPU_MATMUL, CPU_MATMUL, generator=torch.Generator().manual_seed(1)).to(dtype)
        a @ b  # the first call sets up the kernel
        best = 0.0
        for _ in range(CPU_BURSTS):
            count, began = 0, time.perf_counter()
            while time.perf_counter() - began < CPU_BURST_S:
                a @ b
                count += 1
            best = max(best, 2.0 * CPU_MATMUL**3 * count / (time.perf_counter() - began))
        return best
    finally:
        torch.set_num_threads(previous)


def cpu_peak(precision: str, threads: int) -> float:
    """The CPU's measured FLOP/s at ``precision`` and ``threads``, measured once per machine and kept."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    path = _cache_file(threads, dtype)
    with contextlib.suppress(OSError, ValueError, KeyError):
        return float(json.loads(path.read_text())["flops"])
    flops = measure_cpu_peak(dtype, threads)
    with contextlib.suppress(OSError):
        path.write_text(json.dumps({"flops": flops, "threads": threads, "dtype": str(dtype)}))
    return flops


def device_peak(device: torch.device, precision: str) -> float | None:
    """The FLOP/s an MFU is read against: the GPU's from the table, the CPU's measured."""
    if device.type == "cuda":
        return gpu_peak(torch.cuda.get_device_name(device), precision)
    if device.type == "cpu":
        return cpu_peak(precision, torch.get_num_threads())
    return None


def mfu(flops: float, tokens_per_s: float | None, peak: float | None) -> float | None:
    """Model FLOPs utilisation: ``flops`` per token times tokens/s over ``peak``; None without either."""
    if tokens_per_s is None or peak is None or peak <= 0:
        return None
    return flops * tokens_per_s / peak
