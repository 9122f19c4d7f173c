"""Input tensors declared by a request (their dtype and shape read without decoding), turned into torch tensors
when the work runs, and the token layout (a grid, a graph or explicit positions) checked against the method before
anything is allocated. A tensor of a safetensors body arrives already decoded (``TensorData.from_body``): every
input is read the same way, whatever carried it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel

from posenc.compute.common import Loc
from posenc.errors import InvalidInput
from posenc.pe import (
    MethodParams,
    MethodSpec,
)
from posenc.pe.appliers import Applier, grid_positions
from posenc.pe.types import Graph
from posenc.schemas.compute import (
    GraphIn,
)
from posenc.schemas.tensors import RandomTensor, TensorData, TensorIn, tensor_fields
from posenc.tensors import positions_tensor, to_torch, torch_dtype


# ---------------------------------------------------------------------------------------------- tensors in
def declared(value: TensorIn) -> tuple[str, list[int]]:
    """(dtype, shape) a tensor field says it has, read without decoding it."""
    if isinstance(value, RandomTensor):
        return value.random.dtype, list(value.random.shape)
    return value.dtype, list(value.shape)


def float_input(value: TensorIn, loc: Loc, rank: int, layout: str) -> tuple[str, list[int]]:
    dtype, shape = declared(value)
    if len(shape) != rank:
        raise InvalidInput((*loc, "shape"), f"must be {rank}-D {layout}, got shape {shape}")
    if not torch_dtype(dtype).is_floating_point:
        raise InvalidInput((*loc, "dtype"), f"must be a floating-point tensor, got {dtype}")
    return dtype, shape


def elements(values: Sequence[Any]) -> int:
    total = 0
    for value in values:
        if isinstance(value, TensorData | RandomTensor):
            total += value.num_elements
        elif isinstance(value, list):
            total += sum(len(row) if isinstance(row, list) else 1 for row in value)
    return total


def input_elements(request: BaseModel, params: MethodParams, fields: Sequence[str]) -> int:
    return elements([getattr(request, name) for name in fields]) + elements(tensor_fields(params))


def decode(value: TensorIn, name: str) -> torch.Tensor:
    """A float input tensor (non-finite values refused at ``name``.data)."""
    return to_torch(value, (name,))


def decode_mask(value: TensorIn | list[list[bool]]) -> torch.Tensor:
    if isinstance(value, list):
        if len({len(row) for row in value}) > 1:
            raise InvalidInput(("key_padding_mask",), "rows must all have length Nk")
        tensor = torch.tensor(value, dtype=torch.bool)
    else:
        tensor = to_torch(value, ("key_padding_mask",))
    return tensor if tensor.dtype == torch.bool else tensor != 0


def mask_shape(value: TensorIn | list[list[bool]]) -> list[int]:
    if isinstance(value, list):
        return [len(value), len(value[0]) if value else 0]
    return declared(value)[1]


# ------------------------------------------------------------------------------- grids, graphs, positions
def graph_work(graph: GraphIn | None, spec: MethodSpec) -> int:
    """The work ``spec`` does on the request's graph before any tensor (its registered ``graph_work`` of the
    nodes and edges: shortest paths, degrees or an eigenproblem); 0 without a graph or for a method that does
    not read it."""
    if graph is None or spec.graph_work is None:
        return 0
    return spec.graph_work(graph.num_nodes, len(graph.edges))


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
    build: Callable[[], torch.Tensor] | None = None


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
            lambda: grid_positions(tuple(grid), prefix_tokens),
        )
    if graph is not None:
        applier.check_axes(0, ("graph",))
        if prefix_tokens + graph.num_nodes != tokens:
            raise InvalidInput(
                ("graph", "num_nodes"),
                f"prefix_tokens + num_nodes = {prefix_tokens + graph.num_nodes}, but there are {tokens} tokens",
            )

        def node_positions() -> torch.Tensor:
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
        return TokenLayout("given", lambda: positions_tensor(positions, ("positions",)))
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
