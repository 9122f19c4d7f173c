"""Every compute resource through Client and AsyncClient against a live gateway, checked against formulas."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
import torch
from posenc_client import BFloat16BitsWarning, Client, bfloat16_bits_to_float32

pytestmark = pytest.mark.integration
Call = Callable[..., Any]


def alibi_reference(heads: int, length: int) -> torch.Tensor:
    """ALiBi for a power-of-two head count: slopes 2^(-8h/H), bias -m (i - j), -inf above the diagonal."""
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)])
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    bias = -slopes[:, None, None] * (i - j).to(torch.float32)
    return bias.masked_fill(j > i, -math.inf)


def rope_reference(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE with half pairing: features (k, k + D/2) rotated by position * base^(-2k/D)."""
    dim = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    x1, x2 = x[..., : dim // 2], x[..., dim // 2 :]
    rotated = torch.cat([-x2, x1], -1)
    return (x.to(torch.float64) * cos + rotated.to(torch.float64) * sin).to(x.dtype)


# ------------------------------------------------------------------------------------------------ methods
def test_methods_list_and_get(call: Call) -> None:
    bias_methods = call(lambda c: c.methods.list(kind="bias"))
    assert {m.kind for m in bias_methods} == {"bias"}
    assert "alibi" in {m.name for m in bias_methods}
    everything = call(lambda c: c.methods.list())
    assert {"rope", "rope_yarn", "sinusoidal", "alibi"} <= {m.name for m in everything}

    yarn = call(lambda c: c.methods.get("rope_yarn"))
    assert yarn.kind == "rotary"
    assert "factor" in yarn.params_schema["properties"]


def test_tasks_list(call: Call) -> None:
    listed = call(lambda c: c.tasks.list())
    by_task = {info.task: info for info in listed.tasks}
    assert (by_task["copy_single"].unit, by_task["copy_single"].train_field) == ("items", "data.size")
    assert (by_task["probes"].unit, by_task["probes"].eval_field) == ("tokens", "eval.lengths")
    assert {suite.name for suite in listed.suites} == {"quick", "standard", "paper", "leaderboard"}


# --------------------------------------------------------------------------------------------------- bias
def test_bias_matches_the_alibi_formula(call: Call) -> None:
    result = call(lambda c: c.bias.compute("alibi", num_heads=4, query_length=6))
    assert isinstance(result.bias, torch.Tensor)
    assert result.media_type == "application/octet-stream"
    torch.testing.assert_close(result.bias, alibi_reference(4, 6))
    assert result.meta["method"] == "alibi"
    assert result.meta["num_heads"] == 4


@pytest.mark.parametrize("return_format", ["numpy", "list"])
def test_bias_return_formats_agree(call: Call, return_format: str) -> None:
    result = call(lambda c: c.bias.compute("alibi", num_heads=2, query_length=5, return_format=return_format))
    values = np.asarray(result.bias, dtype=np.float32)
    if return_format == "numpy":
        assert isinstance(result.bias, np.ndarray)
        assert result.bias.flags.writeable
    else:
        assert isinstance(result.bias, list)
    np.testing.assert_array_equal(values, alibi_reference(2, 5).numpy())


@pytest.mark.parametrize("accept", ["application/json", "application/vnd.safetensors", "application/octet-stream"])
def test_bias_every_media_type_decodes_the_same(call: Call, accept: str) -> None:
    result = call(lambda c: c.bias.compute("alibi", num_heads=4, query_length=5, causal=False, accept=accept))
    assert result.media_type == accept
    assert result.meta["causal"] is False
    expected = alibi_reference(4, 5)
    expected = torch.where(torch.isinf(expected), expected.transpose(1, 2), expected)  # symmetric form
    torch.testing.assert_close(result.bias, expected)


def test_bias_toeplitz_form_expands_to_the_dense_bias(call: Call) -> None:
    dense = call(lambda c: c.bias.compute("alibi", num_heads=2, query_length=4, key_length=6, causal=False))
    table = call(
        lambda c: c.bias.compute("alibi", num_heads=2, query_length=4, key_length=6, causal=False, form="toeplitz")
    )
    assert table.bias.shape == (2, 4 + 6 - 1)
    i = torch.arange(4)[:, None]
    j = torch.arange(6)[None, :]
    torch.testing.assert_close(table.bias[:, i - j + 6 - 1], dense.bias)


def test_bfloat16_bias_as_torch_and_as_numpy_bits(call: Call) -> None:
    as_torch = call(lambda c: c.bias.compute("alibi", num_heads=2, query_length=3, dtype="bfloat16"))
    assert as_torch.bias.dtype == torch.bfloat16
    with pytest.warns(BFloat16BitsWarning, match="uint16 bit patterns"):
        as_bits = call(
            lambda c: c.bias.compute("alibi", num_heads=2, query_length=3, dtype="bfloat16", return_format="numpy")
        )
    assert as_bits.bias.dtype == np.uint16
    widened = bfloat16_bits_to_float32(as_bits.bias)
    np.testing.assert_array_equal(widened, as_torch.bias.float().numpy())
    as_list = call(
        lambda c: c.bias.compute("alibi", num_heads=2, query_length=3, dtype="bfloat16", return_format="list")
    )
    np.testing.assert_array_equal(np.asarray(as_list.bias, dtype=np.float32), widened)


def test_bias_save_writes_npy_and_safetensors(compute_gateway: Any, tmp_path: Path) -> None:
    with Client(base_url=compute_gateway.url) as client:
        npy = client.bias.save("alibi", tmp_path / "alibi.npy", num_heads=4, query_length=6)
        st = client.bias.save("alibi", tmp_path / "alibi.safetensors", num_heads=4, query_length=6)
    np.testing.assert_array_equal(np.load(npy), alibi_reference(4, 6).numpy())
    loaded = safetensors.numpy.load_file(st)
    np.testing.assert_array_equal(loaded["bias"], alibi_reference(4, 6).numpy())
    assert not list(tmp_path.glob("*.part"))


# ------------------------------------------------------------------------------------------------- rotary
@pytest.mark.parametrize("upload", ["json", "safetensors"])
def test_rotary_rope_matches_the_reference(call: Call, upload: str) -> None:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 7, 8, generator=generator)
    k = torch.randn(1, 2, 7, 8, generator=generator)
    result = call(lambda c: c.rotary.apply(q, k, method="rope", offset=3, upload=upload, return_tables=True))
    positions = torch.arange(7) + 3
    torch.testing.assert_close(result.q, rope_reference(q, positions), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(result.k, rope_reference(k, positions), rtol=1e-5, atol=1e-6)
    assert result.cos.shape == (7, 4)
    assert result.meta["positions"] == "arange(N) + 3"


def test_rotary_inputs_as_numpy_lists_and_random_specs(call: Call) -> None:
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, 1, 4, 4, generator=generator)
    from_torch = call(lambda c: c.rotary.apply(q, rotate="query", method="rope"))
    from_numpy = call(lambda c: c.rotary.apply(q.numpy(), rotate="query", method="rope"))
    from_list = call(lambda c: c.rotary.apply(q.tolist(), rotate="query", method="rope"))
    assert from_torch.k is None
    torch.testing.assert_close(from_numpy.q, from_torch.q)
    torch.testing.assert_close(from_list.q, from_torch.q)

    spec = {"random": {"shape": [1, 2, 5, 8], "seed": 7}}
    generated = call(lambda c: c.rotary.apply(spec, spec, positions=[0, 2, 4, 6, 8]))
    torch.testing.assert_close(generated.q, generated.k)
    assert generated.q.shape == (1, 2, 5, 8)


def test_rotary_large_inputs_travel_as_safetensors_and_yarn_scales(call: Call) -> None:
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(1, 4, 256, 32, generator=generator)  # 32768 elements: above the inline limit
    params = {"factor": 4.0, "original_max_position_embeddings": 64}
    auto = call(lambda c: c.rotary.apply(q, q, method="rope_yarn", params=params))
    inline = call(lambda c: c.rotary.apply(q, q, method="rope_yarn", params=params, upload="json"))
    torch.testing.assert_close(auto.q, inline.q)
    assert auto.meta["attention_scale"] == pytest.approx(0.1 * math.log(4.0) + 1.0)


# ---------------------------------------------------------------------------------------------- encodings
def test_sinusoidal_encoding_matches_the_formula(call: Call) -> None:
    result = call(lambda c: c.encodings.compute("sinusoidal", length=10, dim=8))
    position = torch.arange(10, dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    expected = torch.zeros(10, 8, dtype=torch.float64)
    expected[:, 0::2] = torch.sin(position * inv)
    expected[:, 1::2] = torch.cos(position * inv)
    torch.testing.assert_close(result.encoding, expected.float(), rtol=1e-5, atol=1e-6)

    grid = call(lambda c: c.encodings.compute("sinusoidal_2d", grid=[3, 4], dim=8, return_format="numpy"))
    assert grid.encoding.shape == (3, 4, 8)


def test_encodings_need_length_or_grid() -> None:
    with Client(base_url="http://127.0.0.1:9") as client, pytest.raises(ValueError, match="exactly one"):
        client.encodings.compute("sinusoidal", dim=8)


# ---------------------------------------------------------------------------------------------- attention
@pytest.mark.parametrize("upload", ["json", "safetensors"])
def test_attention_weights_mask_and_stats(call: Call, upload: str) -> None:
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, 2, 5, 8, generator=generator)
    k = torch.randn(2, 2, 5, 8, generator=generator)
    mask = [[False, False, False, False, True], [False] * 5]
    result = call(lambda c: c.attention.compute(q, k, method="alibi", key_padding_mask=mask, upload=upload))
    weights = result.weights
    assert weights.shape == (2, 2, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 5))
    assert torch.all(weights[0, :, :, 4] == 0)  # the padding key gets nothing
    assert torch.all(torch.triu(weights, diagonal=1) == 0)  # causal
    assert result.entropy.shape == (2,)
    assert result.mean_distance.shape == (2,)
    assert result.mass_by_distance.shape == (2, 5)

    plain = call(lambda c: c.attention.compute(q, k, method="rope", stats=False, causal=False))
    assert set(plain.tensors) == {"weights"}
    assert plain.entropy is None


@pytest.mark.parametrize("upload", ["json", "safetensors"])
def test_attention_output_is_the_weights_times_v(call: Call, upload: str) -> None:
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(2, 2, 5, 8, generator=generator)
    k = torch.randn(2, 2, 5, 8, generator=generator)
    v = torch.randn(2, 2, 5, 3, generator=generator)
    x = torch.randn(2, 5, 16, generator=generator)  # alibi does not read the layer input, but accepts it
    result = call(lambda c: c.attention.compute(q, k, method="alibi", v=v, x=x, upload=upload))
    assert result.output.shape == (2, 2, 5, 3)
    torch.testing.assert_close(result.output, result.weights @ v)
    assert result.leftover is None  # softmax kinds give every row's mass to the keys
    without_x = call(lambda c: c.attention.compute(q, k, method="alibi", v=v.numpy(), upload=upload))
    torch.testing.assert_close(without_x.weights, result.weights, rtol=0, atol=0)
    torch.testing.assert_close(without_x.output, result.output, rtol=0, atol=0)

    no_v = call(lambda c: c.attention.compute(q, k, method="alibi", stats=False, upload=upload))
    assert no_v.output is None
    assert no_v.leftover is None


def test_methods_that_replace_the_softmax_report_the_leftover(call: Call) -> None:
    replacing = call(lambda c: c.methods.list(kind="attention"))
    assert {m.name for m in replacing} >= {"stick_breaking", "da_transformer"}
    generator = torch.Generator().manual_seed(6)
    q, k = torch.randn(2, 1, 2, 5, 8, generator=generator)
    v = torch.randn(1, 2, 5, 3, generator=generator)
    x = torch.randn(1, 5, 16, generator=generator)
    for method in replacing:
        result = call(lambda c, name=method.name: c.attention.compute(q, k, method=name, v=v, x=x))
        assert result.leftover.shape == (1, 2, 5), method.name
        torch.testing.assert_close(result.weights.sum(-1) + result.leftover, torch.ones(1, 2, 5))
        assert result.output.shape == (1, 2, 5, 3), method.name  # how the leftover enters it is the method's


def test_a_tensor_param_goes_inline_or_as_a_params_tensor(call: Call) -> None:
    """T5's learned bucket table (num_buckets, H) as a numpy array: the same weights in both upload modes,
    and not the seeded default table's."""
    generator = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 6, 8, generator=generator)
    k = torch.randn(1, 2, 6, 8, generator=generator)
    v = torch.randn(1, 2, 6, 4, generator=generator)
    table = np.random.default_rng(7).normal(size=(32, 2)).astype(np.float32)
    params = {"table": table, "num_buckets": 32}

    def t5(upload: str, **extra: Any) -> Any:
        return call(lambda c: c.attention.compute(q, k, method="t5", v=v, upload=upload, **extra))

    inline = t5("json", params=params)
    uploaded = t5("safetensors", params=params)
    torch.testing.assert_close(uploaded.weights, inline.weights, rtol=0, atol=0)
    torch.testing.assert_close(uploaded.output, inline.output, rtol=0, atol=0)
    assert inline.meta["parameters"] == uploaded.meta["parameters"] == "supplied"
    seeded = t5("safetensors")
    assert not torch.equal(seeded.weights, inline.weights)
    torch.testing.assert_close(inline.output, inline.weights @ v)
    as_torch = t5("safetensors", params={"table": torch.from_numpy(table)})
    torch.testing.assert_close(as_torch.weights, inline.weights, rtol=0, atol=0)


def test_how_tensor_params_travel_in_the_request() -> None:
    from posenc_client._safetensors import read_safetensors
    from posenc_client.resources.attention import _attention_request

    table = np.arange(64, dtype=np.float32).reshape(32, 2)
    common: dict[str, Any] = {
        "method": "t5",
        "v": None,
        "x": [[[0.0] * 4] * 3],
        "params": {"table": table, "seed": np.int64(3)},
        "causal": True,
        "query_offset": None,
        "key_padding_mask": None,
        "stats": True,
        "scale": None,
        "pairing": "half",
        "dtype": None,
        "accept": None,
    }
    q = {"random": {"shape": [1, 2, 3, 8]}}
    as_json = _attention_request(q, q, upload="json", **common).json_body
    assert as_json["params"]["seed"] == 3
    assert as_json["params"]["table"]["shape"] == [32, 2]
    assert as_json["params"]["table"]["dtype"] == "float32"
    assert as_json["x"]["shape"] == [1, 3, 4]

    pieces = _attention_request(q, q, upload="safetensors", **common).content
    assert isinstance(pieces, tuple)  # the header, then each tensor's own bytes
    tensors, metadata = read_safetensors(b"".join(pieces))
    assert set(tensors) == {"x", "params.table"}
    assert tensors["params.table"].shape == (32, 2)
    request = json.loads(metadata["request"])
    assert request["params"] == {"seed": 3}
    assert request["q"] == q


# ------------------------------------------------------------------------------------------------- plots
def test_per_head_heatmaps_of_a_bias_and_an_attention_map(compute_gateway: Any, tmp_path: Path) -> None:
    from posenc_client.plot import plot_heads

    with Client(base_url=compute_gateway.url) as client:
        bias = client.bias.compute("alibi", num_heads=6, query_length=8)
        spec = {"random": {"shape": [2, 3, 8, 8]}}
        attention = client.attention.compute(spec, spec, method="rope")
    figure = plot_heads(bias, columns=4, title="ALiBi")
    heatmaps = [axis for axis in figure.axes if axis.get_images()]
    assert len(heatmaps) == 6
    assert heatmaps[0].get_images()[0].get_array().mask[0, 1]  # -inf above the diagonal is left blank
    figure.savefig(tmp_path / "bias.png")
    assert (tmp_path / "bias.png").read_bytes()[:4] == b"\x89PNG"
    assert len([axis for axis in plot_heads(attention, batch_index=1).axes if axis.get_images()]) == 3
    with pytest.raises(ValueError, match="expected"):
        plot_heads(np.zeros(5))


def test_a_binary_answer_is_read_into_one_buffer_and_its_tensors_are_views_of_it(compute_gateway: Any) -> None:
    """Zero-copy reading: the transport fills one bytearray of Content-Length bytes, and the safetensors and
    octet-stream decoders view it instead of copying each tensor."""
    from posenc_client._results import decode_raw_tensors
    from posenc_client._transport import HTTPRequest, SyncTransport

    transport = SyncTransport(base_url=compute_gateway.url, timeout_s=60, connect_timeout_s=10, headers={})
    body = {"method": "alibi", "num_heads": 4, "query_length": 64, "causal": False}
    try:
        for accept in ("application/vnd.safetensors", "application/octet-stream"):
            request = HTTPRequest(method="POST", path="/v1/bias", headers={"Accept": accept}, json_body=body)
            response = transport.send(request)
            assert response.status == 200
            assert isinstance(response.content, bytearray)
            assert len(response.content) == int(response.headers["content-length"])
            tensors, _ = decode_raw_tensors(response)
            data = tensors["bias"].data
            assert isinstance(data, memoryview | bytearray)
            assert (data.obj if isinstance(data, memoryview) else data) is response.content  # a view, not a copy
            assert len(data) == 4 * 64 * 64 * 4
    finally:
        transport.close()


def test_a_sent_tensor_goes_out_as_a_view_of_its_own_memory(compute_gateway: Any) -> None:
    """Zero-copy sending: a torch tensor's or numpy array's bytes are a view of its memory, the safetensors body
    is the header plus those views, and the transport sends them in slices with the length declared; the
    server reads the same numbers back (sync and async clients)."""
    import asyncio

    from posenc_client import AsyncClient
    from posenc_client._tensors import encode_input
    from posenc_client._uploads import TensorArg, build_body

    q = torch.randn(1, 2, 300, 64, generator=torch.Generator().manual_seed(5))  # (B, H, N, d): above inline size
    k = q.numpy().copy()
    for value in (q, k):
        raw = encode_input(value, default_dtype="float32")
        assert isinstance(raw.data, memoryview)
        assert np.shares_memory(np.frombuffer(raw.data, dtype=np.float32), q.numpy() if value is q else k)
    body = build_body({"method": "rope"}, {"q": TensorArg(q, "float32")}, upload="safetensors", binary_allowed=True)
    assert body.content is not None
    assert any(isinstance(piece, memoryview) and piece.obj is not None for piece in body.content[1:])
    expected = rope_reference(q.double(), torch.arange(300)).float()
    with Client(base_url=compute_gateway.url) as client:
        rotated = client.rotary.apply(q, k, method="rope", upload="safetensors")
    torch.testing.assert_close(rotated.q, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rotated.k, expected, rtol=1e-5, atol=1e-5)

    async def fetch() -> Any:
        async with AsyncClient(base_url=compute_gateway.url) as client:
            return await client.rotary.apply(q, k, method="rope", upload="safetensors")

    torch.testing.assert_close(asyncio.run(fetch()).q, expected, rtol=1e-5, atol=1e-5)
