"""The shared rotary apply as one compiled kernel: x read once and the output written once, as a clone does.

The eager apply (``posenc.pe.ops.rotate_pairs``) makes three passes over its output; ``torch.compile``
(Inductor) fuses the whole formula into one loop. Compiling costs 10 to 20 s on a CPU the first time and a few
seconds from Inductor's on-disk cache later, so it never happens on the caller's thread: the first large
float32 rotation of a pairing starts a background thread that compiles it with dynamic shapes (one kernel for
every size), and every call takes the eager path until the kernel is ready, and for good when compiling fails
(no C++ compiler, an unsupported platform) or is switched off (``configure(enabled=False)``; the service reads
``POSENC_COMPILE_KERNELS``). A ready kernel never compiles
again on a caller's thread: a call its guards do not cover (a size of 1 is specialised, an unusual stride) is
refused by ``fail_on_recompile`` and runs eagerly. Partial rotation stays eager too: a kernel that also copies
the passthrough features measured slower than the eager path's rotation plus one copy.

CPU tensors only: the kernel is compiled for the CPU, and on CUDA the eager apply is a few fused elementwise
kernels already; trying the CPU kernel there (its guards fail, the eager path then runs) cost 12.9 ms against
the eager 0.38 ms on (1, 32, 4096, 128) on an H100 (bench/gpu_check.py).

float32 only: the kernel may fuse a multiply into an add (one rounding fewer), which float32 allows (results
agree to float32 rounding) and float64, the reference dtype that must equal the plain formula bit for bit, does
not. Autograd keeps the eager, differentiable path.

Exit: the compile thread is a daemon (nothing waits for a kernel nobody may use), and a daemon thread must not
still run torch when the interpreter finalizes: CPython 3.11 ends such a thread with ``pthread_exit`` as soon as
it takes the GIL back, which from inside a C++ frame of torch (one that released the GIL for an op) aborts the
whole process ("terminate called without an active exception", exit 134). So an ``atexit`` hook, which runs
while threads still run normally, ends every compile first: no compile starts any more, one under way is
cancelled (``_Cancelled`` raised in its thread at its next line of Python: Dynamo and Inductor are mostly
Python, so within a second or so, or when a C++ compiler run in progress ends; sent again every
``CANCEL_REPEAT_S``, since one that lands in a weakref callback is dropped, and kept off stderr), and the hook
waits for the thread to be gone, at most ``EXIT_WAIT_S``. A cancelled compile leaves nothing half-made for a
later process: Inductor writes each cache entry whole (a temporary file renamed). Waiting for the compile to
finish instead would add the rest of it to a short script's exit (10 to 20 s cold, and up to 50 s from the cache
on a loaded 2-core machine).
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Literal

import torch

Pairing = Literal["half", "interleaved"]

# Below this a rotation is a few passes over cached data either way and compiled dispatch buys nothing.
COMPILE_MIN_BYTES = 4 << 20
# How long exit waits for a cancelled compile's thread to end: longer than a C++ compiler run of Inductor's
# (about 8 s on a loaded 2-core machine), the longest stretch in which a cancel cannot land.
EXIT_WAIT_S = 60.0
CANCEL_REPEAT_S = 0.05

logger = logging.getLogger(__name__)
_enabled = True
_lock = threading.Lock()
# Dynamo's stance is one global setting, not a thread's: a call sets ``fail_on_recompile`` and restores the
# previous stance, and a compile needs the default one, so they take turns. A call that finds the turn taken
# (a compile under way, another thread's call) runs eagerly rather than wait.
_dynamo_turn = threading.Lock()
_kernels: dict[Pairing, _Kernel] = {}


def configure(*, enabled: bool) -> None:
    """Switch the compiled kernels on or off for this process (off: always the eager path)."""
    global _enabled
    _enabled = enabled


def rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: Pairing, scale: torch.Tensor | None
) -> torch.Tensor | None:
    """x (..., N, D) with its first d_rot features rotated (and scaled), by the compiled kernel of its kind; None
    when the kernel does not apply or is not ready yet (the caller then takes the eager path)."""
    if not _eligible(x, cos):
        return None
    length, width = x.shape[-2], x.shape[-1]
    slabs = x.reshape(-1, length, width)  # (M, N, D): a view (x is contiguous)
    if slabs.shape[0] < 2 or length < 2:
        return None  # sizes of 1 are specialised by dynamic shapes: leave them to the eager path
    if cos.shape[-1] * 2 < width:
        return None  # partial rotation: the eager path (with a separate passthrough copy) was faster than a fused cat
    if scale is not None:  # xPos: (a·cos − b·sin)·s = a·(cos·s) − b·(sin·s), the scale folded into the tables
        cos, sin = cos * scale, sin * scale
    kernel = _kernel(pairing)
    out = kernel.run(slabs, cos, sin)
    return None if out is None else out.view(x.shape)


def _eligible(x: torch.Tensor, cos: torch.Tensor) -> bool:
    return (
        _enabled
        and not torch.compiler.is_compiling()  # inside a compiled model: Inductor fuses the eager formula itself
        and x.device.type == "cpu"  # the kernel is the CPU's: a CUDA call failed its guards at 35x the eager cost
        and cos.device.type == "cpu"
        and x.dtype == torch.float32
        and cos.dtype == torch.float32
        and cos.dim() == 2
        and x.dim() >= 3
        and x.is_contiguous()
        and x.numel() * x.element_size() >= COMPILE_MIN_BYTES
        and not (torch.is_grad_enabled() and x.requires_grad)
    )


def _kernel(key: Pairing) -> _Kernel:
    with _lock:
        kernel = _kernels.get(key)
        if kernel is None:
            kernel = _kernels[key] = _Kernel(key)
        return kernel


def _end_compiles() -> None:
    """At exit, before the interpreter finalizes: every compile cancelled, and its thread waited for."""
    with _lock:
        kernels = list(_kernels.values())
    if not kernels:
        return
    previous_hook = sys.unraisablehook

    def quiet_cancels(unraisable: sys.UnraisableHookArgs) -> None:
        if not isinstance(unraisable.exc_value, _Cancelled):
            previous_hook(unraisable)

    sys.unraisablehook = quiet_cancels
    for kernel in kernels:
        kernel.cancel()
    deadline = time.monotonic() + EXIT_WAIT_S
    for kernel in kernels:
        while not kernel.join(CANCEL_REPEAT_S):
            if time.monotonic() >= deadline:
                logger.warning("the %s rotary kernel's compile did not stop within %s s", kernel.key, EXIT_WAIT_S)
                break
            kernel.cancel()  # again: a cancel raised where Python drops exceptions (a weakref callback) is lost


atexit.register(_end_compiles)


def wait_until_ready(pairing: Pairing) -> bool:
    """Compile the kernel of this kind now, on this thread if nobody has started it, and wait for it: True when
    it is ready, False when compiling failed or is switched off (tests, warm-ups)."""
    if not _enabled:
        return False
    kernel = _kernel(pairing)
    kernel.start()
    kernel.done.wait()
    return kernel.compiled is not None


# ------------------------------------------------------------------------------------------------ kernels
def _fused_rotation(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str) -> torch.Tensor:
    """The rotation as one expression for Inductor to fuse: x (M, N, d), tables (N, d/2) -> (M, N, d)."""
    half_rot = cos.shape[-1]
    if pairing == "half":
        first, second = x[..., :half_rot], x[..., half_rot:]
        rotated = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)  # (M, N, d)
    else:
        pairs = x.view(*x.shape[:-1], half_rot, 2)  # (M, N, d/2, 2): feature pairs
        even, odd = pairs[..., 0], pairs[..., 1]
        turned = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (M, N, d/2, 2)
        rotated = turned.flatten(-2)  # (M, N, d)
    return rotated


class _Cancelled(BaseException):
    """Raised in a compile thread at exit; not an ``Exception``, so that no fallback of torch's takes it in."""


def _checkpoint() -> None:
    """A Python call: a pending asynchronous exception (a cancel) is raised on entering it, at the latest."""


class _Kernel:
    """One pairing's compiled kernel and its state: not started, compiling (``done`` unset), ready or failed;
    cancelled at exit (failed, for good)."""

    def __init__(self, key: Pairing) -> None:
        self.key = key
        self.compiled: Callable[..., torch.Tensor] | None = None
        self.done = threading.Event()
        self._thread: threading.Thread | None = None
        self._cancelled = False
        self._running = False  # the thread is inside the compile's try, where a cancel may land
        self._state = threading.Lock()

    def start(self) -> None:
        with self._state:
            if self._thread is not None or self.done.is_set():
                return
            if self._cancelled:  # exiting: no new compile
                self.done.set()
                return
            self._thread = threading.Thread(target=self._compile, name=f"posenc-compile-{self.key}", daemon=True)
            self._thread.start()

    def cancel(self) -> None:
        """Stop compiling: a compile not yet begun never begins, one under way gets ``_Cancelled`` raised."""
        with self._state:
            self._cancelled = True
            thread = self._thread
            if self._running and thread is not None and thread.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(_Cancelled))

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the compile thread to end; True when none runs (any more)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(max(timeout, 0.0))
        return not thread.is_alive()

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor | None:
        if not self.done.is_set():
            self.start()
            return None
        if self.compiled is None or not _dynamo_turn.acquire(blocking=False):
            return None
        try:
            with torch.compiler.set_stance("fail_on_recompile"), torch.no_grad():
                return self.compiled(x, cos, sin, self.key)
        except Exception:  # a call outside the kernel's guards: never compile on the caller's thread
            return None
        finally:
            _dynamo_turn.release()

    def _compile(self) -> None:
        try:
            try:
                with self._state:
                    if self._cancelled:
                        return
                    self._running = True
                self.compiled = self._build()
            finally:
                with self._state:
                    self._running = False  # no cancel is sent after this, and one sent before lands here
                _checkpoint()
        except _Cancelled:
            logger.debug("compiling the %s rotary kernel was cancelled at exit", self.key)
        except Exception:
            if self._cancelled:  # at exit: imports that register exit hooks fail once threading has shut down
                logger.debug("compiling the %s rotary kernel stopped at exit", self.key, exc_info=True)
            else:
                logger.warning(
                    "compiling the %s rotary kernel failed; the eager path serves it", self.key, exc_info=True
                )
        finally:
            self.done.set()

    def _build(self) -> Callable[..., torch.Tensor]:
        """The kernel compiled for this pairing, and checked against the eager formula on an example."""
        pairing = self.key
        import torch._inductor.config as inductor_config

        # no pool of compile subprocesses forked from a server's process
        inductor_config.compile_threads = 1
        compiled = torch.compile(_fused_rotation, dynamic=True, fullgraph=True)
        # sizes like a real head's: Inductor picks its loop order and vector width from the example's sizes
        # (a tiny example gave a kernel 1.6x slower on (32, 4096, 128)); none of them 0 or 1
        length, half_rot = 256, 64
        example = torch.randn(4, length, 2 * half_rot)  # (M, N, D)
        cos, sin = torch.rand(length, half_rot), torch.rand(length, half_rot)  # (N, d_rot/2) each, distinct
        with _dynamo_turn, torch.no_grad():
            produced = compiled(example, cos, sin, pairing)
        expected = _fused_rotation(example, cos, sin, pairing)
        torch.testing.assert_close(produced, expected)
        return compiled
