"""The compute requests, prepared and run: thin glue to ``posenc.pe`` and ``posenc.attention``.

Each ``prepare_*`` resolves the method, validates its params and the declared tensor shapes, and works out
every output's shape and dtype WITHOUT allocating or decoding anything; it returns a :class:`Prepared`
whose ``run`` does the work. The gateway's routes check their budgets and take a compute slot in between;
a ``compute`` job (:func:`run_compute_job`, on a worker) runs the same request without the gateway's output
budget and writes every tensor to the artifact ``tensors.safetensors``.

Errors: an unknown method raises ``UnknownMethodError`` (404), a bad value ``InvalidInput`` and bad params
``FieldErrors`` (422). Everything here and in the math names fields relative to the request; :func:`prepare`
adds ``("body",)``, and a job ``("body", "spec", "request")``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import pydantic_core
import safetensors.torch
import torch
from pydantic import BaseModel, ValidationError

from posenc.attention import attention_maps, attention_statistics, compute_dtype_for
from posenc.errors import BudgetExceeded, FieldErrors, InvalidInput, located
from posenc.model_configs import LayerRope, resolve_config
from posenc.pe import (
    AbsoluteContext,
    BiasContext,
    MethodParams,
    MethodSpec,
    bias_dense,
    bias_toeplitz,
    encoding,
    get_method,
)
from posenc.pe.appliers import Applier, Layer, bias_applier, build_applier, grid_positions, rotary_applier
from posenc.pe.kinds import require_kind
from posenc.pe.types import Graph
from posenc.schemas.compute import (
    MAX_ROTARY_POSITION,
    AttentionRequest,
    BiasRequest,
    EncodingRequest,
    GraphIn,
    RotaryRequest,
    default_query_offset,
)
from posenc.schemas.jobs import ComputeJobSpec, ComputeRequest, ComputeRoute
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import ITEMSIZE, RandomTensor, TensorData, TensorIn, tensor_fields
from posenc.tensors import dtype_name, positions_tensor, to_torch, torch_dtype

ROTARY_TENSOR_FIELDS = frozenset({"q", "k", "positions"})
ATTENTION_TENSOR_FIELDS = frozenset({"q", "k", "v", "x", "key_padding_mask", "positions", "params.", "state."})
ARTIFACT_NAME = "tensors.safetensors"
RESULT_NAME = "result.json"
JOB_REQUEST_LOC = ("body", "spec", "request")
# How to get past the gateway's output budget; {route} and {request} are filled in by jobs_hint().
JOBS_HINT = (
    'or submit it as a job: POST /v1/jobs {{"kind": "compute", "spec": {{"route": "{route}", '
    '"request": {request}}}}} and download ' + ARTIFACT_NAME + " from its artifacts"
)
Loc = tuple[str | int, ...]


def jobs_hint(route: ComputeRoute) -> str:
    """The 413 hint naming the compute job for ``route`` (a job takes JSON, never a safetensors body)."""
    request = "<this body>" if route in ("bias", "encodings") else "<this body as JSON>"
    return JOBS_HINT.format(route=route, request=request)


# ------------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class OutputSpec:
    """A tensor a request will produce, known before anything is computed."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * ITEMSIZE[self.dtype]


@dataclass
class TensorResult:
    tensors: dict[str, torch.Tensor]  # in response order; the first is the default single tensor
    meta: dict[str, Any] = field(default_factory=dict)


class BinaryTensors(Protocol):
    """Input tensors that came in a binary (safetensors) request body, by request field name."""

    def __contains__(self, name: object, /) -> bool: ...

    def get(self, name: str, /) -> torch.Tensor: ...


@dataclass
class Prepared:
    route: ComputeRoute
    outputs: list[OutputSpec]
    workspace_bytes: int  # intermediate tensors beyond the outputs (scores, copies in compute dtype)
    input_elements: int
    shrink_hint: str  # how to make the request itself smaller
    run: Callable[[], TensorResult]

    @property
    def total_bytes(self) -> int:
        return sum(output.nbytes for output in self.outputs) + self.workspace_bytes

    @property
    def output_elements(self) -> int:
        return sum(output.elements for output in self.outputs)

    @property
    def jobs_hint(self) -> str:
        return jobs_hint(self.route)

    @property
    def budget_hint(self) -> str:
        """How to get under the gateway's output budget."""
        return f"{self.shrink_hint}, {self.jobs_hint}"


def prepare(route: ComputeRoute, request: ComputeRequest, binary: BinaryTensors | None = None) -> Prepared:
    """The ``prepare_*`` of ``route``; ``request`` must be that route's request model. Errors of the request,
    and of the math it runs, name their field under ``body``."""
    with located(("body",)):
        prepared = _prepare(route, request, binary)
    run = prepared.run

    def run_located() -> TensorResult:
        with located(("body",)):
            return run()

    return dataclasses.replace(prepared, run=run_located)


def _prepare(route: ComputeRoute, request: ComputeRequest, binary: BinaryTensors | None) -> Prepared:
    if route == "bias" and isinstance(request, BiasRequest):
        return prepare_bias(request)
    if route == "rotary" and isinstance(request, RotaryRequest):
        return prepare_rotary(request, binary)
    if route == "encodings" and isinstance(request, EncodingRequest):
        return prepare_encoding(request)
    if route == "attention" and isinstance(request, AttentionRequest):
        return prepare_attention(request, binary)
    raise TypeError(f"route {route!r} does not take a {type(request).__name__}")


# ------------------------------------------------------------------------------------------ method + params
def resolve_method(name: str, *kinds: Kind) -> MethodSpec:
    """The registered spec (unknown names raise UnknownMethodError, a 404); other kinds than the route serves
    are a 422."""
    spec = get_method(name)
    try:
        require_kind(spec, *kinds)
    except InvalidInput as exc:
        raise InvalidInput(exc.loc, f"{exc.msg}: POST /v1/attention applies every method") from None
    return spec


def with_binary_params(params: MethodParams, binary: BinaryTensors | None) -> MethodParams:
    """The params with every tensor parameter that came in a safetensors body (``params.<name>``) decoded;
    the method reads a torch tensor as it is."""
    if binary is None:
        return params
    supplied = {name: binary.get(f"params.{name}") for name in type(params).model_fields if f"params.{name}" in binary}
    return params.model_copy(update=supplied) if supplied else params


def parse_params(spec: MethodSpec, raw: dict[str, Any]) -> MethodParams:
    """Validate ``params`` against the method's model; errors point at ``body.params.<field>``."""
    try:
        return spec.parse_params(raw)
    except ValidationError as exc:
        known = ", ".join(spec.params_model.model_fields) or "none"
        errors = []
        for error in exc.errors(include_url=False, include_input=False):
            if error["type"] == "extra_forbidden":
                error = {**error, "msg": f"unknown parameter for {spec.name} (known: {known})"}
            errors.append(error)
        raise FieldErrors({**error, "loc": ("params", *error["loc"])} for error in errors) from None


def summarise(value: Any) -> Any:
    """JSON-able params for meta: tensors are described (dtype, shape or the random spec), never echoed."""
    if isinstance(value, RandomTensor):
        return {"random": value.random.model_dump(mode="json")}
    if isinstance(value, TensorData):
        return {"dtype": value.dtype, "shape": list(value.shape)}
    if isinstance(value, BaseModel):
        return {name: summarise(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, list | tuple):
        return [summarise(item) for item in value]
    if isinstance(value, dict):
        return {str(key): summarise(item) for key, item in value.items()}
    return pydantic_core.to_jsonable_python(value)


def method_meta(spec: MethodSpec, params: MethodParams, dtype: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "method": spec.name,
        "kind": spec.kind.value,
        "params": summarise(params),
        "conventions": dict(spec.conventions),
        "dtype": dtype,
    }
    if spec.learned:
        if tensor_fields(params):
            meta["parameters"] = "supplied"
        else:
            meta["parameters"] = "seeded"
            meta["seed"] = getattr(params, "seed", None)
    return meta


# ---------------------------------------------------------------------------------------------- tensors in
def declared(value: TensorIn) -> tuple[str, list[int]]:
    """(dtype, shape) a tensor field says it has, read without decoding it."""
    if isinstance(value, RandomTensor):
        return value.random.dtype, list(value.random.shape)
    return value.dtype, list(value.shape)


def _float_input(value: TensorIn, loc: Loc, rank: int, layout: str) -> tuple[str, list[int]]:
    dtype, shape = declared(value)
    if len(shape) != rank:
        raise InvalidInput((*loc, "shape"), f"must be {rank}-D {layout}, got shape {shape}")
    if not torch_dtype(dtype).is_floating_point:
        raise InvalidInput((*loc, "dtype"), f"must be a floating-point tensor, got {dtype}")
    return dtype, shape


def _elements(values: Sequence[Any]) -> int:
    total = 0
    for value in values:
        if isinstance(value, TensorData | RandomTensor):
            total += value.num_elements
        elif isinstance(value, list):
            total += sum(len(row) if isinstance(row, list) else 1 for row in value)
    return total


def _input_elements(request: BaseModel, params: MethodParams, fields: Sequence[str]) -> int:
    return _elements([getattr(request, name) for name in fields]) + _elements(tensor_fields(params))


def _decode(value: TensorIn, name: str, binary: BinaryTensors | None) -> torch.Tensor:
    """A float input tensor from the safetensors body if it carried one, else from the JSON field."""
    loc: Loc = (name,)
    if binary is not None and name in binary:
        tensor = binary.get(name)
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise InvalidInput((*loc, "data"), f"{bad} non-finite values (NaN or infinity) are not allowed here")
        return tensor
    return to_torch(value, loc)


def _decode_positions(value: TensorIn | list[int] | list[list[int]], binary: BinaryTensors | None) -> torch.Tensor:
    loc: Loc = ("positions",)
    if binary is not None and "positions" in binary:
        tensor = binary.get("positions")
        if tensor.is_floating_point():
            if not bool((tensor == tensor.round()).all()):
                raise InvalidInput(loc, "positions must be integers")
            tensor = tensor.round()
        return tensor.to(torch.int64)
    return positions_tensor(value, loc)


def _decode_mask(value: TensorIn | list[list[bool]], binary: BinaryTensors | None) -> torch.Tensor:
    if binary is not None and "key_padding_mask" in binary:
        tensor = binary.get("key_padding_mask")
    elif isinstance(value, list):
        if len({len(row) for row in value}) > 1:
            raise InvalidInput(("key_padding_mask",), "rows must all have length Nk")
        tensor = torch.tensor(value, dtype=torch.bool)
    else:
        tensor = to_torch(value, ("key_padding_mask",))
    return tensor if tensor.dtype == torch.bool else tensor != 0


def _mask_shape(value: TensorIn | list[list[bool]]) -> list[int]:
    if isinstance(value, list):
        return [len(value), len(value[0]) if value else 0]
    return declared(value)[1]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ------------------------------------------------------------------------------- grids, graphs, positions
def graph_from_request(graph: GraphIn | None) -> Graph | None:
    """The request's graph with every node id checked against num_nodes: InvalidInput at ("graph", ...)."""
    if graph is None:
        return None
    edges = torch.tensor(graph.edges, dtype=torch.int64).reshape(-1, 2)  # (E, 2)
    outside = ((edges < 0) | (edges >= graph.num_nodes)).any(dim=1)  # (E,)
    if bool(outside.any()):
        index = int(outside.nonzero()[0, 0])
        raise InvalidInput(
            ("graph", "edges", index),
            f"edge {edges[index].tolist()} names a node outside 0 … {graph.num_nodes - 1} "
            f"(num_nodes is {graph.num_nodes})",
        )
    features = None
    if graph.edge_features is not None:
        if len(graph.edge_features) != len(graph.edges):
            raise InvalidInput(
                ("graph", "edge_features"),
                f"needs one entry per edge: {len(graph.edges)} edges, {len(graph.edge_features)} entries",
            )
        features = torch.tensor(graph.edge_features, dtype=torch.int64)
    return Graph(num_nodes=graph.num_nodes, edges=edges, edge_features=features, directed=graph.directed)


@dataclass(frozen=True)
class TokenLayout:
    """Where the tokens of a grid, a graph or explicit positions sit: ``build`` gives their positions (N,) or
    (N, A), prefix tokens negative (posenc.pe.types); None = the default arange."""

    description: str
    build: Callable[[BinaryTensors | None], torch.Tensor] | None = None


def token_layout(
    applier: Applier,
    tokens: int,
    *,
    grid: Sequence[int] | None = None,
    prefix_tokens: int = 0,
    positions: TensorIn | list[int] | list[list[int]] | None = None,
    graph: GraphIn | None = None,
    tokens_loc: Loc = ("k", "shape"),
) -> TokenLayout:
    """Check the request's layout against the method and the token count, before anything is allocated."""
    if prefix_tokens > tokens:
        raise InvalidInput(("prefix_tokens",), f"{prefix_tokens} prefix tokens, but the sequence has only {tokens}")
    if grid is not None:
        applier.check_axes(len(grid), ("grid",))
        grid_tokens = math.prod(grid)
        if prefix_tokens + grid_tokens != tokens:
            raise InvalidInput(
                ("grid",),
                f"prefix_tokens + the grid's {' x '.join(map(str, grid))} = {prefix_tokens + grid_tokens} "
                f"tokens, but there are {tokens} (the {tokens_loc[0]} tensor's N)",
            )
        return TokenLayout(
            f"grid {list(grid)} with {prefix_tokens} prefix tokens, C order",
            lambda _: grid_positions(tuple(grid), prefix_tokens),
        )
    if graph is not None:
        applier.check_axes(0, ("graph",))
        if prefix_tokens + graph.num_nodes != tokens:
            raise InvalidInput(
                ("graph", "num_nodes"),
                f"prefix_tokens + num_nodes = {prefix_tokens + graph.num_nodes}, but there are {tokens} tokens",
            )

        def node_positions(_: BinaryTensors | None) -> torch.Tensor:
            prefix = -torch.arange(1, prefix_tokens + 1, dtype=torch.int64)  # (P,)
            return torch.cat((prefix, torch.arange(graph.num_nodes, dtype=torch.int64)))  # (P + num_nodes,)

        return TokenLayout(f"graph nodes with {prefix_tokens} prefix tokens", node_positions)
    if prefix_tokens:
        raise InvalidInput(("prefix_tokens",), "prefix tokens come before a grid or a graph: give one")
    if positions is not None:
        shape = _positions_shape(positions)
        axes = shape[1] if len(shape) == 2 else 1
        if len(shape) not in (1, 2) or shape[0] != tokens:
            raise InvalidInput(("positions",), f"must be (N,) or (N, A) with N = {tokens}, got {shape}")
        applier.check_axes(axes, ("positions",))
        return TokenLayout("given", lambda binary: _decode_positions(positions, binary))
    # no layout: positions arange(N); a multi-axis method reads them as token indices where it can (alibi_2d)
    return TokenLayout("arange")


def _positions_shape(value: TensorIn | list[int] | list[list[int]]) -> list[int]:
    if not isinstance(value, list):
        return declared(value)[1]
    if value and isinstance(value[0], list):
        widths = {len(row) for row in value if isinstance(row, list)}
        if len(widths) != 1 or not all(isinstance(row, list) for row in value):
            raise InvalidInput(("positions",), "every row of (N, A) positions must have the same A coordinates")
        return [len(value), widths.pop()]
    if any(isinstance(row, list) for row in value):
        raise InvalidInput(("positions",), "mixes numbers and rows: give (N,) or (N, A)")
    return [len(value)]


# ---------------------------------------------------------------------------------------------------- bias
def prepare_bias(request: BiasRequest) -> Prepared:
    spec = resolve_method(request.method, Kind.BIAS)
    params = parse_params(spec, request.params)
    if request.query_length is None:
        return _prepare_bias_layout(request, spec, params)
    heads, q_len, k_len = request.num_heads, request.query_length, request.resolved_key_length
    query_offset = request.resolved_query_offset
    causal = request.resolved_causal
    toeplitz = request.form == "toeplitz"
    if toeplitz and not spec.toeplitz:
        raise InvalidInput(
            ("form",),
            f"{spec.name!r} does not depend on i - j alone, so it has no Toeplitz form; use 'dense'",
        )
    shape = (heads, q_len + k_len - 1) if toeplitz else (heads, q_len, k_len)
    compute_dtype = torch.float64 if request.dtype == "float64" else torch.float32
    table_bytes = heads * (q_len + k_len - 1) * ITEMSIZE[request.dtype]
    shrink_hint = (
        f"ask for form='toeplitz' (its (H, Nq + Nk - 1) table is {table_bytes} bytes), make the request smaller"
        if spec.toeplitz and not toeplitz
        else "make the request smaller"
    )

    def run() -> TensorResult:
        ctx = BiasContext(
            num_heads=heads,
            query_length=q_len,
            key_length=k_len,
            causal=causal,
            dtype=compute_dtype,
            query_offset=query_offset,
        )
        bias = bias_toeplitz(spec, params, ctx) if toeplitz else bias_dense(spec, params, ctx)
        meta = method_meta(spec, params, request.dtype) | {
            "form": request.form,
            "causal": causal,
            "num_heads": heads,
            "query_length": q_len,
            "key_length": k_len,
            "query_offset": query_offset,
        }
        if toeplitz:
            meta["index"] = "B[h, i, j] = bias[h, i - j + key_length - 1]"
        return TensorResult({"bias": bias.to(torch_dtype(request.dtype))}, meta)

    return Prepared(
        route="bias",
        outputs=[OutputSpec("bias", shape, request.dtype)],
        workspace_bytes=math.prod(shape) * ITEMSIZE[_dtype_name(compute_dtype)],
        input_elements=_elements(tensor_fields(params)),
        shrink_hint=shrink_hint,
        run=run,
    )


def _prepare_bias_layout(request: BiasRequest, spec: MethodSpec, params: MethodParams) -> Prepared:
    """``POST /v1/bias`` over a grid or a graph: self-attention of its tokens (prefix tokens first)."""
    if request.form == "toeplitz":
        raise InvalidInput(("form",), "a grid's or a graph's bias has no Toeplitz form in the token index; use 'dense'")
    heads, tokens, causal = request.num_heads, request.resolved_query_length, request.resolved_causal
    compute_dtype = torch.float64 if request.dtype == "float64" else torch.float32
    graph = graph_from_request(request.graph)
    layer = Layer(num_heads=heads, head_dim=1, causal=causal, dtype=compute_dtype, graph=graph)
    applier = bias_applier(spec, params, layer)
    applier.check(has_x=False, has_v=False)
    layout = token_layout(applier, tokens, grid=request.grid, prefix_tokens=request.prefix_tokens, graph=request.graph)
    shape = (heads, tokens, tokens)

    def run() -> TensorResult:
        assert layout.build is not None
        pos = layout.build(None)
        bias = applier.bias(pos, pos)  # (H, N, N)
        if causal:
            order = torch.arange(tokens)
            bias = bias.masked_fill(order[None, :] > order[:, None], float("-inf"))  # token order
        meta = method_meta(spec, params, request.dtype) | {
            "form": "dense",
            "causal": causal,
            "num_heads": heads,
            "query_length": tokens,
            "key_length": tokens,
            "tokens": layout.description,
        }
        return TensorResult({"bias": bias.to(torch_dtype(request.dtype))}, meta)

    return Prepared(
        route="bias",
        outputs=[OutputSpec("bias", shape, request.dtype)],
        # the method's (H, N, N) and the placed copy with the prefix entries
        workspace_bytes=2 * math.prod(shape) * ITEMSIZE[_dtype_name(compute_dtype)],
        input_elements=_elements(tensor_fields(params)),
        shrink_hint="make the grid or the graph smaller",
        run=run,
    )


# -------------------------------------------------------------------------------------------------- rotary
@dataclass(frozen=True)
class RotarySetup:
    """What rotates: the method and params, the rotated slice [start, start + rotary_dim) of each head, the
    pairing, and (for a config's layer) that layer's resolved setup."""

    spec: MethodSpec
    params: MethodParams
    start: int
    rotary_dim: int
    pairing: Literal["half", "interleaved"]
    config_layer: LayerRope | None = None


def _rotary_setup(request: RotaryRequest, head_dim: int) -> RotarySetup:
    if request.config is None:
        assert request.method is not None
        spec = resolve_method(request.method, Kind.ROTARY)
        params = parse_params(spec, request.params)
        return RotarySetup(spec, params, 0, _rotary_dim(request.rotary_dim, head_dim), request.pairing)
    assert request.layer is not None
    with located(("config",)):
        resolved = resolve_config(request.config)
    if request.layer >= len(resolved.layers):
        raise InvalidInput(
            ("layer",), f"the config has {len(resolved.layers)} layers, so at most {len(resolved.layers) - 1}"
        )
    layer = resolved.layers[request.layer]
    if layer.method is None:
        raise InvalidInput(
            ("layer",),
            f"layer {layer.layer} ({layer.layer_type}) is a NoPE layer: it has no rotation"
            + (" (its query temperature: POST /v1/rope/temperature)" if layer.query_temperature else ""),
        )
    if head_dim != layer.head_dim:
        raise InvalidInput(
            ("q", "shape"),
            f"D = {head_dim}, but the config's heads have head_dim = {layer.head_dim} (layer {layer.layer})",
        )
    spec = resolve_method(layer.method, Kind.ROTARY)
    with located(("config",)):
        params = parse_params(spec, layer.params)
    pairing: Literal["half", "interleaved"] = "interleaved" if layer.pairing == "interleaved" else "half"
    return RotarySetup(spec, params, layer.rotary_slice[0], layer.rotary_dim, pairing, layer)


def prepare_rotary(request: RotaryRequest, binary: BinaryTensors | None = None) -> Prepared:
    q_dtype, q_shape = _float_input(request.q, ("q",), 4, "(B, H, N, D)")
    seq_len, head_dim = q_shape[2], q_shape[3]
    setup = _rotary_setup(request, head_dim)
    spec, params, rotary_dim, start = setup.spec, setup.params, setup.rotary_dim, setup.start
    out_dtype = request.dtype or q_dtype
    compute_dtype = compute_dtype_for(torch_dtype(q_dtype))
    layer = Layer(
        num_heads=q_shape[1],
        head_dim=head_dim - start,  # a slice that starts later (MLA) is rotated as a head of its own
        causal=False,
        pairing=setup.pairing,
        rotary_dim=rotary_dim,
        dtype=compute_dtype,
    )
    applier = rotary_applier(spec, params, layer)
    layout = token_layout(
        applier,
        seq_len,
        grid=request.grid,
        prefix_tokens=request.prefix_tokens,
        positions=request.positions,
        tokens_loc=("q", "shape"),
    )

    rotate_k = request.rotate == "both"
    k_shape: list[int] | None = None
    k_dtype = out_dtype
    if request.k is None:
        if rotate_k:
            raise InvalidInput(("k",), "k is required unless rotate='query'")
    elif rotate_k:
        k_dtype, k_shape = _float_input(request.k, ("k",), 4, "(B, H, N, D)")
        if (k_shape[2], k_shape[3]) != (seq_len, head_dim):
            raise InvalidInput(
                ("k", "shape"),
                f"k {k_shape} must have the N and D of q {q_shape}: both are rotated by the same positions",
            )
        k_dtype = out_dtype
    else:
        k_dtype, k_shape = declared(request.k)  # passed through unchanged

    if layout.build is None and request.offset + seq_len - 1 > MAX_ROTARY_POSITION:
        raise InvalidInput(
            ("offset",),
            f"offset + N - 1 = {request.offset + seq_len - 1} is over 2^26 = {MAX_ROTARY_POSITION}, the largest "
            "position whose rotary angles are exact to float32 rounding",
        )

    table_dtype = _dtype_name(compute_dtype)
    outputs = [OutputSpec("q", tuple(q_shape), out_dtype)]
    if k_shape is not None:
        outputs.append(OutputSpec("k", tuple(k_shape), k_dtype))
    if request.return_tables:
        outputs += [OutputSpec(name, (seq_len, rotary_dim // 2), table_dtype) for name in ("cos", "sin")]
    rotated_elements = math.prod(q_shape) + (math.prod(k_shape) if k_shape is not None and rotate_k else 0)
    rotated_elements += applier.rotation_elements(seq_len)  # block rotations' matrices, if any

    def run() -> TensorResult:
        q = _decode(request.q, "q", binary)
        if layout.build is None:
            positions = torch.arange(seq_len, dtype=torch.int64) + request.offset
        else:
            positions = layout.build(binary)
        context = max(int(positions.max()) if positions.numel() else 0, 0) + 1  # what dynamic scalings see

        def rotate(t: torch.Tensor, keys: bool) -> torch.Tensor:
            # Rotated in the compute dtype and cast once at the end, so a bfloat16 output is rounded only once;
            # xPos scales queries by ζ^(n/λ) and keys by its inverse. Features before the slice pass through.
            rotated = applier.rotate_side(t[..., start:], positions, context, keys=keys)
            if start:
                rotated = torch.cat((t[..., :start].to(rotated.dtype), rotated), dim=-1)  # (B, H, N, D)
            return rotated.to(torch_dtype(out_dtype))

        tensors = {"q": rotate(q, keys=False)}
        if request.k is not None:
            k = _decode(request.k, "k", binary)
            tensors["k"] = rotate(k, keys=True) if rotate_k else k
        if request.return_tables:
            cos, sin, _, _ = applier.tables(positions, context)  # (N, rotary_dim/2) each, from float64 angles
            tensors |= {"cos": cos, "sin": sin}
        meta = method_meta(spec, params, out_dtype) | {
            "pairing": setup.pairing,
            "rotate": request.rotate,
            "rotary_dim": rotary_dim,
            "rotary_slice": [start, start + rotary_dim],
            "positions": layout.description if layout.build is not None else f"arange(N) + {request.offset}",
            "attention_scale": applier.attention_scale(context),
            "tables_dtype": table_dtype,
        }
        if setup.config_layer is not None:
            meta["config_layer"] = setup.config_layer.to_json()
        return TensorResult(tensors, meta)

    return Prepared(
        route="rotary",
        outputs=outputs,
        # rotated copies in the table dtype, plus the float64 angles, cos and sin the tables are rounded from
        workspace_bytes=rotated_elements * ITEMSIZE[table_dtype] + 3 * seq_len * (rotary_dim // 2) * 8,
        input_elements=_input_elements(request, params, ("q", "k", "positions")),
        shrink_hint="make the request smaller",
        run=run,
    )


def _rotary_dim(requested: int | None, head_dim: int) -> int:
    if requested is None:
        if head_dim % 2:
            raise InvalidInput(
                ("q", "shape"),
                f"rotary methods rotate pairs of features, so the head dim D must be even; got D={head_dim} "
                "(or set an even rotary_dim < D to rotate only the first features)",
            )
        return head_dim
    if requested % 2:
        raise InvalidInput(("rotary_dim",), f"must be even (features are rotated in pairs), got {requested}")
    if requested > head_dim:
        raise InvalidInput(("rotary_dim",), f"{requested} is larger than the head dim D={head_dim}")
    return requested


# ----------------------------------------------------------------------------------------------- encodings
def prepare_encoding(request: EncodingRequest) -> Prepared:
    spec = resolve_method(request.method, Kind.ABSOLUTE)
    params = parse_params(spec, request.params)
    graph = graph_from_request(request.graph)
    if graph is not None:
        grid: tuple[int, ...] = (graph.num_nodes,)
    else:
        grid = (request.length,) if request.length is not None else tuple(request.grid or ())
    shape = (*grid, request.dim)
    compute_dtype = torch.float64 if request.dtype == "float64" else torch.float32
    layer = Layer(num_heads=1, head_dim=request.dim, causal=False, dtype=compute_dtype, graph=graph)
    applier = build_applier(spec, params, layer)
    applier.check(has_x=False, has_v=False)
    prefix = request.prefix_tokens
    outputs = [OutputSpec("encoding", shape, request.dtype)]
    if prefix:
        outputs.append(OutputSpec("prefix", (prefix, request.dim), request.dtype))

    def run() -> TensorResult:
        ctx = AbsoluteContext(grid=grid, dim=request.dim, dtype=compute_dtype, graph=graph)
        tensors = {"encoding": encoding(spec, params, ctx).to(torch_dtype(request.dtype))}
        if prefix:
            # the prefix tokens' rows: what embedding zeros at their positions −1 … −P adds
            prefix_pos = grid_positions(grid, prefix)[:prefix]  # (P, A)
            zeros = torch.zeros(prefix, request.dim, dtype=compute_dtype)  # (P, D)
            tensors["prefix"] = applier.embed(zeros, prefix_pos).to(torch_dtype(request.dtype))
        meta = method_meta(spec, params, request.dtype) | {"grid": list(grid), "dim": request.dim}
        return TensorResult(tensors, meta)

    return Prepared(
        route="encodings",
        outputs=outputs,
        workspace_bytes=math.prod(shape) * ITEMSIZE[_dtype_name(compute_dtype)],
        input_elements=_elements(tensor_fields(params)),
        shrink_hint="make the request smaller",
        run=run,
    )


# ----------------------------------------------------------------------------------------------- attention
def prepare_attention(request: AttentionRequest, binary: BinaryTensors | None = None) -> Prepared:
    spec = get_method(request.method)
    params = parse_params(spec, request.params)
    q_dtype, q_shape = _float_input(request.q, ("q",), 4, "(B, H, Nq, D)")
    _, k_shape = _float_input(request.k, ("k",), 4, "(B, H, Nk, D)")
    batch, heads, q_len, head_dim = q_shape
    k_len = k_shape[2]
    if (k_shape[0], k_shape[1], k_shape[3]) != (batch, heads, head_dim):
        raise InvalidInput(("k", "shape"), f"k {k_shape} must share B, H and D with q {q_shape}")
    v_dim = 0
    if request.v is not None:
        _, v_shape = _float_input(request.v, ("v",), 4, "(B, H, Nk, Dv)")
        if v_shape[:3] != [batch, heads, k_len]:
            raise InvalidInput(("v", "shape"), f"v {v_shape} must be (B, H, Nk, Dv) with B, H, Nk = {k_shape[:3]}")
        v_dim = v_shape[3]
    model_dim = None
    if request.x is not None:
        _, x_shape = _float_input(request.x, ("x",), 3, "(B, Nk, D_model)")
        if x_shape[:2] != [batch, k_len]:
            raise InvalidInput(("x", "shape"), f"x {x_shape} must be (B, Nk, D_model) with B, Nk = {[batch, k_len]}")
        model_dim = x_shape[2]
    if request.key_padding_mask is not None and _mask_shape(request.key_padding_mask) != [batch, k_len]:
        raise InvalidInput(
            ("key_padding_mask",),
            f"must be (B, Nk) = {[batch, k_len]}, got {_mask_shape(request.key_padding_mask)}",
        )
    out_dtype = request.dtype or q_dtype
    compute_dtype = compute_dtype_for(torch_dtype(q_dtype))
    stats_dtype = _dtype_name(compute_dtype)
    causal = request.resolved_causal
    graph = graph_from_request(request.graph)
    layer = Layer(
        num_heads=heads,
        head_dim=head_dim,
        causal=causal,
        model_dim=model_dim,
        pairing=request.pairing,
        dtype=compute_dtype,
        graph=graph,
    )
    applier = build_applier(spec, params, layer)
    applier.check(has_x=request.x is not None, has_v=request.v is not None)  # before anything is allocated
    query_offset = default_query_offset(request.query_offset, q_len, k_len)
    layout = token_layout(
        applier,
        k_len,
        grid=request.grid,
        prefix_tokens=request.prefix_tokens,
        positions=request.positions,
        graph=request.graph,
    )
    if layout.build is not None and query_offset + q_len > k_len:
        raise InvalidInput(
            ("query_offset",),
            f"with a grid, positions or a graph the queries are keys {query_offset} … {query_offset + q_len - 1}: "
            f"query_offset + Nq must be at most Nk = {k_len}",
        )
    width = max(q_len + query_offset, k_len)  # distances |i + offset − j| run from 0 to width − 1
    state_fields = applier.state_fields
    if request.state is not None:
        if sorted(request.state) != sorted(state_fields):
            wanted = f"the tensors {list(state_fields)}" if state_fields else "no state"
            raise InvalidInput(("state",), f"{spec.name!r} takes {wanted}, got {sorted(request.state)}")
        for name, value in request.state.items():
            _float_input(value, ("state", name), 4, "(B, H, Nk, D)")
            if declared(value)[1] != [batch, heads, k_len, head_dim]:
                raise InvalidInput(
                    ("state", name, "shape"),
                    f"must be (B, H, Nk, D) = {[batch, heads, k_len, head_dim]}, got {declared(value)[1]}",
                )

    outputs = [OutputSpec("weights", (batch, heads, q_len, k_len), out_dtype)]
    outputs += [OutputSpec(f"state.{name}", (batch, heads, q_len, head_dim), stats_dtype) for name in state_fields]
    if request.v is not None:
        outputs.append(OutputSpec("output", (batch, heads, q_len, v_dim), out_dtype))
        if applier.keeps_leftover:
            outputs.append(OutputSpec("leftover", (batch, heads, q_len), stats_dtype))
    if request.stats:
        outputs += [
            OutputSpec("entropy", (heads,), stats_dtype),
            OutputSpec("mean_distance", (heads,), stats_dtype),
            OutputSpec("mass_by_distance", (heads, width), stats_dtype),
        ]
    itemsize = ITEMSIZE[stats_dtype]
    workspace_elements = 2 * batch * heads * q_len * k_len  # scores and weights in the compute dtype
    workspace_elements += batch * heads * (q_len + k_len) * head_dim  # q and k in the compute dtype
    workspace_elements += batch * heads * (k_len + q_len) * v_dim  # v and the output in the compute dtype
    workspace_elements += applier.extra_workspace_elements(batch, q_len, k_len)
    workspace_elements += 2 * len(state_fields) * batch * heads * k_len * head_dim  # the states in and out
    if request.stats:
        workspace_elements += batch * heads * q_len * width  # per-row mass by distance

    def run() -> TensorResult:
        q = _decode(request.q, "q", binary)
        k = _decode(request.k, "k", binary)
        v = None if request.v is None else _decode(request.v, "v", binary)
        x = None if request.x is None else _decode(request.x, "x", binary)
        mask = None if request.key_padding_mask is None else _decode_mask(request.key_padding_mask, binary)
        state = (
            None
            if request.state is None
            else {name: _decode(value, f"state.{name}", binary) for name, value in request.state.items()}
        )
        maps = attention_maps(
            q,
            k,
            v=v,
            x=x,
            spec=spec,
            params=with_binary_params(params, binary),
            causal=causal,
            key_padding_mask=mask,
            scale=request.scale,
            pairing=request.pairing,
            query_offset=query_offset,
            state=state,
            positions=None if layout.build is None else layout.build(binary),
            graph=graph,
        )
        tensors = {"weights": maps.weights.to(torch_dtype(out_dtype))}
        for name, tensor in (maps.state or {}).items():
            tensors[f"state.{name}"] = tensor
        if maps.output is not None:
            tensors["output"] = maps.output.to(torch_dtype(out_dtype))
            if applier.keeps_leftover:
                assert maps.leftover is not None
                tensors["leftover"] = maps.leftover
        if request.stats:
            stats = attention_statistics(maps.weights, maps.fully_masked, query_offset=query_offset)
            tensors |= {
                "entropy": stats.entropy,
                "mean_distance": stats.mean_distance,
                "mass_by_distance": stats.mass_by_distance,
            }
        meta = method_meta(spec, params, out_dtype) | {
            "causal": causal,
            "query_offset": query_offset,
            "tokens": layout.description,
            "scale": request.scale if request.scale is not None else 1.0 / math.sqrt(head_dim),
            "pairing": request.pairing,
            "fully_masked_rows": int(maps.fully_masked.sum()),
            "stats_dtype": stats_dtype,
            "stats": "per head, averaged over batch and over queries that attend to at least one key; "
            "entropy in nats; distance |(i + query_offset) - j| between query and key indices (token order)",
        }
        return TensorResult(tensors, meta)

    return Prepared(
        route="attention",
        outputs=outputs,
        workspace_bytes=workspace_elements * itemsize,
        input_elements=_input_elements(request, params, ("q", "k", "v", "x", "key_padding_mask", "positions")),
        shrink_hint="make the request smaller (fewer heads, shorter sequences)",
        run=run,
    )


# ---------------------------------------------------------------------------------------------------- jobs
@contextmanager
def _job_locs() -> Iterator[None]:
    """Errors of the request name it where a job carries it: ("spec", "request", ...)."""
    try:
        yield
    except InvalidInput as exc:
        raise exc.relocated(("body",), JOB_REQUEST_LOC) from None
    except FieldErrors as exc:
        raise exc.relocated(("body",), JOB_REQUEST_LOC) from None


def prepare_job(spec: ComputeJobSpec) -> Prepared:
    """The prepare step of a compute job: the gateway runs it at submission, the worker again before the work."""
    with _job_locs():
        prepared = prepare(spec.route, spec.request)
    run = prepared.run

    def run_with_job_locs() -> TensorResult:
        with _job_locs():
            return run()

    return dataclasses.replace(prepared, run=run_with_job_locs)


def check_job_budget(prepared: Prepared, limit: int) -> None:
    """A compute job's own budget (``max_job_output_bytes``): outputs plus workspace; BudgetExceeded is a 413."""
    if prepared.total_bytes > limit:
        raise BudgetExceeded(
            "the memory this compute job needs (outputs and workspace)",
            prepared.total_bytes,
            limit,
            f"{prepared.shrink_hint} (the limit of a compute job is the setting max_job_output_bytes)",
        )


def safetensors_metadata(meta: Mapping[str, Any]) -> dict[str, str]:
    """A result's meta as safetensors metadata: one JSON string per key (responses and artifacts alike)."""
    return {key: json.dumps(value, default=str) for key, value in meta.items()}


def run_compute_job(spec: ComputeJobSpec, *, job_dir: Path, max_bytes: int | None = None) -> dict[str, Any]:
    """Run a compute job: every tensor with the meta to ``job_dir/tensors.safetensors``; returns the JSON-able
    result ``{"route", "tensors": {name: {"dtype", "shape"}}, "meta", "artifact"}``.

    Idempotent: ``result.json`` is written last, and a rerun that finds it returns it without computing again.
    ``max_bytes`` is the job budget (``max_job_output_bytes``), checked again here as the gateway did.
    """
    result_file = job_dir / RESULT_NAME
    if result_file.is_file() and (job_dir / ARTIFACT_NAME).is_file():
        recorded: dict[str, Any] = json.loads(result_file.read_text())
        return recorded
    prepared = prepare_job(spec)
    if max_bytes is not None:
        check_job_budget(prepared, max_bytes)
    computed = prepared.run()
    tensors = {name: tensor.detach().to("cpu").contiguous() for name, tensor in computed.tensors.items()}
    _write_atomic(
        job_dir / ARTIFACT_NAME,
        lambda path: safetensors.torch.save_file(tensors, str(path), metadata=safetensors_metadata(computed.meta)),
    )
    result = {
        "route": spec.route,
        "tensors": {name: {"dtype": dtype_name(t.dtype), "shape": list(t.shape)} for name, t in tensors.items()},
        "meta": _jsonable(computed.meta),
        "artifact": ARTIFACT_NAME,
    }
    _write_atomic(
        result_file, lambda path: path.write_text(json.dumps(result, indent=1, allow_nan=False), encoding="utf-8")
    )
    return result


def _write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Write to a hidden temporary name beside ``path`` (never listed as an artifact), then rename into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _jsonable(value: Any) -> Any:
    """Meta for a JSON job result: non-finite floats spelled "nan", "inf", "-inf" like tensors on the wire."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return pydantic_core.to_jsonable_python(value, fallback=str)
