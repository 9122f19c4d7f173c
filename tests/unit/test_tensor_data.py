"""Inline tensor ``data``: held as a compact array once validated, dumped back to the same JSON list, handed to
torch without a copy, and parsed from a JSON body in a small multiple of the body's size."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.schemas.jobs import ComputeJobSpec
from posenc.schemas.tensors import TensorData
from posenc.tensors import to_torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "tensor",
    [
        {"dtype": "float32", "shape": [2, 3], "data": [0.5, -1.25, "nan", "inf", "-inf", 3.0]},
        {"dtype": "float64", "shape": [4], "data": [0.1, -1 / 3, 5e-324, 1.7976931348623157e308]},
        {"dtype": "int64", "shape": [3], "data": [-(2**63), 0, 2**63 - 1]},
        {"dtype": "int32", "shape": [3], "data": [-(2**31), 7, 2**31 - 1]},
        {"dtype": "bool", "shape": [2, 2], "data": [True, False, False, True]},
        {"dtype": "float16", "shape": [2], "data": [0.5, "-inf"]},
        {"dtype": "float32", "shape": [0, 4], "data": []},
    ],
    ids=lambda tensor: tensor["dtype"] + str(tensor["shape"]),
)
def test_data_dumps_back_to_the_list_it_was_given(tensor: dict[str, Any]) -> None:
    """What a compute job stores (``model_dump(mode="json")``) is the request's own list, and validates again."""
    validated = TensorData.model_validate(tensor)
    assert not isinstance(validated.data, list)  # held compactly, not as a Python object per value
    dumped = validated.model_dump(mode="json", exclude_none=True)
    assert dumped == tensor
    assert json.loads(validated.model_dump_json(exclude_none=True)) == tensor
    assert TensorData.model_validate(dumped).model_dump(mode="json", exclude_none=True) == tensor


def test_a_compute_job_spec_keeps_its_tensors_through_a_dump() -> None:
    request: dict[str, Any] = {
        "method": "rope",
        "rotate": "query",
        "q": {"dtype": "float32", "shape": [1, 1, 1, 2], "data": [0.25, "nan"]},
        "positions": {"dtype": "int64", "shape": [1], "data": [2**40]},
    }
    spec = ComputeJobSpec.model_validate({"route": "rotary", "request": request})
    stored = spec.model_dump(mode="json")  # as the jobs router stores a spec
    assert stored["request"]["q"] == request["q"] | {"base64": None}
    assert stored["request"]["positions"] == request["positions"] | {"base64": None}
    assert ComputeJobSpec.model_validate(stored).model_dump(mode="json") == stored


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        ("float32", [0.5, -2.0, 3.25]),
        ("float64", [0.1, 0.2, 0.3]),
        ("int64", [1, -2, 3]),
        ("int32", [4, 5, -6]),
        ("bool", [True, False, True]),
    ],
)
def test_to_torch_uses_the_arrays_memory(dtype: str, values: list[Any]) -> None:
    tensor = TensorData.model_validate({"dtype": dtype, "shape": [3], "data": values})
    assert tensor.data is not None
    decoded = to_torch(tensor, ("body", "q"), allow_non_finite=True)
    assert decoded.data_ptr() == tensor.data.buffer_info()[0]
    assert decoded.tolist() == values


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_are_rounded_once_from_the_values_sent(dtype: str) -> None:
    """Held as float64 and rounded by torch, exactly as a float64 tensor of the same values would be."""
    values = [0.1, 1 / 3, 65504.0, 1e-7, 2.0**-24 * 1.5]
    tensor = TensorData.model_validate({"dtype": dtype, "shape": [5], "data": values})
    decoded = to_torch(tensor, ("body", "q"))
    expected = torch.tensor(values, dtype=torch.float64).to(getattr(torch, dtype))
    assert decoded.dtype == expected.dtype
    assert torch.equal(decoded, expected)


# ------------------------------------------------------------------------------------------------ memory
PARSE_PEAK = textwrap.dedent(
    """
    import gc, json, sys
    from pathlib import Path

    import torch

    from posenc.schemas.compute import RotaryRequest
    from service.transport import parse_json_request

    def status(field):
        line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field + ":"))
        return int(line.split()[1]) * 1024

    values, size = sys.argv[1], int(sys.argv[2])
    per_value = 20.5 if values == "float32" else 4  # bytes of JSON per value, with its comma
    count = int(size / 2 / per_value)
    generator = torch.Generator().manual_seed(0)

    def tensor():
        flat = torch.randn(count, generator=generator).tolist() if values == "float32" else [0.5] * count
        return {"dtype": "float32", "shape": [1, 1, count, 1], "data": flat}

    body = json.dumps({"method": "rope", "q": tensor(), "k": tensor()}, separators=(",", ":")).encode()
    gc.collect()
    parse_json_request(b'{"method": "rope", "q": {"shape": [1], "data": [1]}}', RotaryRequest)  # warm up
    before = status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS, so the peak below is the parse's own
    parsed = parse_json_request(body, RotaryRequest)
    print(json.dumps({"body": len(body), "growth": status("VmHWM") - before, "q": len(parsed.q.data)}))
    """
)


@pytest.mark.parametrize(
    ("values", "bound"),
    [
        # float32 values as tolist() writes them (~20 bytes each): the parsed floats are ~1.6x the body
        ("float32", 3.0),
        # every value "0.5" (4 bytes with its comma), the densest floats JSON can hold: a Python float (32 bytes
        # with its list slot) per 4 bytes while parsing is 8x, plus the arrays; model_validate_json took 27x
        ("short", 14.0),
    ],
)
def test_parsing_a_json_body_takes_a_small_multiple_of_its_size(values: str, bound: float) -> None:
    """The peak RSS growth of parse_json_request on an 8 MB body, measured in a fresh interpreter (VmHWM)."""
    result = subprocess.run(
        [sys.executable, "-c", PARSE_PEAK, values, str(8_000_000)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    measured = json.loads(result.stdout)
    assert measured["q"] > 100_000  # the body really was parsed into tensors
    ratio = measured["growth"] / measured["body"]
    assert ratio <= bound, f"parsing took {ratio:.1f}x the body's size"
