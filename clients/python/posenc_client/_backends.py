"""Optional array libraries: found without importing them, imported only when a tensor needs them."""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache
from types import ModuleType
from typing import Any, Literal

ReturnFormat = Literal["auto", "torch", "numpy", "list"]
ConcreteFormat = Literal["torch", "numpy", "list"]


@cache
def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def require(name: str, *, purpose: str) -> ModuleType:
    """Import an optional dependency, or say which extra installs it."""
    if not has_module(name):
        raise ImportError(f"{purpose} needs {name}: pip install 'posenc-client[{name}]'")
    return importlib.import_module(name)


def resolve_format(requested: ReturnFormat) -> ConcreteFormat:
    """'auto' is torch when installed, else numpy when installed, else nested lists."""
    if requested == "auto":
        if has_module("torch"):
            return "torch"
        return "numpy" if has_module("numpy") else "list"
    if requested in ("torch", "numpy"):
        require(requested, purpose=f"return_format={requested!r}")
    return requested


def is_torch_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def is_numpy_array(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and hasattr(value, "shape")
