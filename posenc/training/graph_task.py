"""A small graph task and a graph transformer in which the positional encoding is the only variable.

Data (``graph_batch``). Each example is a random graph of ``num_nodes`` nodes drawn from a ``torch.Generator``:
a uniformly random labelled tree (``family='tree'``: a random Prüfer sequence) or a sparse Erdős–Rényi graph
made connected (``family='er'``: G(n, p) with p = ER_MEAN_DEGREE / (n − 1), then one edge between a random node
of each component and one of the next, components ordered by their smallest node id). Node ids are random
labels, so they carry no structure. Task ``graph_distance``: two distinct nodes are marked (node types
``NODE_SOURCE``, ``NODE_TARGET``; the others ``NODE_PLAIN``) and the label is their shortest-path distance d in
hops clipped to ``max_distance`` classes: label = min(d, max_distance) − 1, so class c is d = c + 1 and the last
class is d >= max_distance. Distances come from a breadth-first search over adjacency lists (plain Python).

Balance: a label is drawn first, uniformly over the classes the size allows (class c needs c + 1 <= n − 1), then
graphs are drawn until one has a pair at that distance (at most MAX_GRAPH_DRAWS; after that the class is drawn
uniformly over those the last graph has), and the ordered (source, target) pair is drawn uniformly among the
graph's pairs of that class. So the labels are uniform over the feasible classes up to the rare fallback, and a
model that ignores the structure (``nope``) is at chance, 1/max_distance.

Model (``GraphTransformer``). Node-type embedding -> [virtual graph token (Graphormer), position −1] + nodes ->
L x pre-LN ``Block`` (``posenc.training.model``, bidirectional) -> LN -> readout -> linear head. Readouts:
``marked`` (default), the mean of the source and target nodes (the pair readout of link prediction);
``graph_token``, the virtual token (Graphormer's graph-level readout); ``mean``, the mean over the nodes.
Measured at 12 nodes, 5 classes, L = 2, d = 32, 8 heads, lr 1e-2, batch 32: with ``marked`` Graphormer is at
100 % after 600 steps; with ``graph_token`` its loss stays at ln 5 for about 900 steps (the token must first
find the source by content before the source's distance-biased attention pays off: a second-order plateau)
and reaches the same accuracy by 1500. So the token is kept by default (its prefix bias is exercised) but the
marked nodes are read.

The model takes one tensor, so the shared trainer and batch code serve it unchanged: ``GraphBatch.packed``
is (B, N, 1 + N) int64, the node types in column 0 and the adjacency matrix after it. The weights, the PE
instances (``attach_positional_encodings``: shared, or one per layer) and their learned parameters are those of
the other models. Every example has its own graph, so each forward builds one applier per example on
``Layer(..., graph=graphs[b])`` (``ExampleAppliers``, which a block takes where it takes an applier).
Positions are the node ids, the graph token −1 (``posenc.pe.types``): the applier gives it a zero encoding /
zero bias unless the method registers its own (Graphormer's virtual distance t). 1D methods run too, on the
node ids as positions: a baseline that encodes an arbitrary labelling.

Jobs (``posenc.training.jobs``) train at ``data.num_nodes`` and evaluate accuracy at ``eval.num_nodes``
(size extrapolation: train at 12 nodes, test at 8/12/16/24) with ``posenc.training.evaluate.evaluate_graphs``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, get_args

import torch
from torch import nn

from posenc.errors import InvalidInput
from posenc.pe.appliers import Applier, Layer
from posenc.pe.types import Graph
from posenc.schemas.jobs import MAX_GRAPH_NODES, GraphFamily
from posenc.tasks.graphs import DEFAULT_MAX_DISTANCE, GRAPH_TASKS
from posenc.training.model import Block, PositionalEncoding, attach_positional_encodings, init_weights

Readout = Literal["graph_token", "mean", "marked"]
GRAPH_FAMILIES: tuple[str, ...] = get_args(GraphFamily)

NODE_PLAIN, NODE_SOURCE, NODE_TARGET = 0, 1, 2
NUM_NODE_TYPES = 3
ER_MEAN_DEGREE = 2.5  # family 'er': expected degree of G(n, p) before the components are joined
MAX_GRAPH_DRAWS = 64  # graphs drawn per example while looking for a pair at the wanted distance
MAX_NODES = MAX_GRAPH_NODES  # distances are all-pairs BFS in Python: O(n·(n + E)) per graph


# ------------------------------------------------------------------------------------------------------ data
@dataclass(frozen=True)
class GraphBatch:
    """B examples of N nodes each: one graph per example, node types (B, N) int64 (NODE_PLAIN / NODE_SOURCE /
    NODE_TARGET), labels (B,) int64 (class c = distance c + 1, the last class distance >= max_distance)."""

    graphs: tuple[Graph, ...]
    node_types: torch.Tensor
    labels: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.node_types.shape[0])

    def packed(self) -> torch.Tensor:
        """The model's input, one tensor: (B, N, 1 + N) int64, node types in column 0, then the adjacency
        matrix (1 where an edge joins the nodes, symmetric, zero diagonal)."""
        batch, nodes = self.node_types.shape
        adjacency = torch.zeros((batch, nodes, nodes), dtype=torch.int64)  # (B, N, N)
        for b, graph in enumerate(self.graphs):
            u, v = graph.edges.unbind(-1)  # (E,) each
            adjacency[b, u, v] = 1
            adjacency[b, v, u] = 1
        return torch.cat((self.node_types[..., None], adjacency), dim=-1)  # (B, N, 1 + N)

    @property
    def num_nodes(self) -> int:
        return int(self.node_types.shape[1])


def _randint(high: int, generator: torch.Generator) -> int:
    """A uniform integer in 0 … high − 1 from ``generator``."""
    return int(torch.randint(high, (1,), generator=generator))


def random_tree(num_nodes: int, generator: torch.Generator) -> list[tuple[int, int]]:
    """The n − 1 edges of a uniformly random labelled tree on ``num_nodes`` nodes: a random Prüfer sequence
    (n − 2 uniform node ids), decoded with a min-heap of the current leaves."""
    if num_nodes < 2:
        return []
    sequence = torch.randint(num_nodes, (num_nodes - 2,), generator=generator).tolist()
    degree = [1] * num_nodes
    for node in sequence:
        degree[node] += 1
    leaves = [node for node in range(num_nodes) if degree[node] == 1]
    heapq.heapify(leaves)
    edges = []
    for node in sequence:
        leaf = heapq.heappop(leaves)
        edges.append((leaf, node))
        degree[node] -= 1
        if degree[node] == 1:
            heapq.heappush(leaves, node)
    edges.append((heapq.heappop(leaves), heapq.heappop(leaves)))
    return edges


def random_connected_graph(
    num_nodes: int, generator: torch.Generator, mean_degree: float = ER_MEAN_DEGREE
) -> list[tuple[int, int]]:
    """The edges (u < v) of G(n, p), p = min(1, mean_degree / (n − 1)), made connected: the components, in the
    order of their smallest node id, are chained by one edge between a uniform node of each and of the next."""
    if num_nodes < 2:
        return []
    p = min(1.0, mean_degree / (num_nodes - 1))
    draws = torch.rand((num_nodes, num_nodes), generator=generator).tolist()  # (n, n): only u < v is read
    edges = [(u, v) for u in range(num_nodes) for v in range(u + 1, num_nodes) if draws[u][v] < p]
    adjacency = adjacency_lists(num_nodes, edges)
    seen = [False] * num_nodes
    components: list[list[int]] = []
    for start in range(num_nodes):
        if not seen[start]:
            component = [node for node, hops in enumerate(bfs_distances(adjacency, start)) if hops >= 0]
            for node in component:
                seen[node] = True
            components.append(component)
    for here, there in itertools.pairwise(components):
        u, v = here[_randint(len(here), generator)], there[_randint(len(there), generator)]
        edges.append((min(u, v), max(u, v)))
    return edges


def adjacency_lists(num_nodes: int, edges: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Undirected neighbour lists: v in adjacency[u] and u in adjacency[v] for each edge (u, v)."""
    adjacency: list[list[int]] = [[] for _ in range(num_nodes)]
    for u, v in edges:
        adjacency[u].append(v)
        adjacency[v].append(u)
    return adjacency


def bfs_distances(adjacency: Sequence[Sequence[int]], source: int) -> list[int]:
    """Hops from ``source`` to every node by breadth-first search; −1 for nodes it cannot reach."""
    distances = [-1] * len(adjacency)
    distances[source] = 0
    frontier = [source]
    while frontier:
        following = []
        for node in frontier:
            for neighbour in adjacency[node]:
                if distances[neighbour] < 0:
                    distances[neighbour] = distances[node] + 1
                    following.append(neighbour)
        frontier = following
    return distances


def distance_label(distance: int, max_distance: int) -> int:
    """The class of a shortest-path distance d >= 1: min(d, max_distance) − 1."""
    return min(distance, max_distance) - 1


def distance_classes(max_distance: int) -> tuple[str, ...]:
    """The class names: 'd=1', ..., 'd=<max_distance - 1>', 'd>=<max_distance>'."""
    return (*(f"d={d}" for d in range(1, max_distance)), f"d>={max_distance}")


def feasible_classes(num_nodes: int, max_distance: int) -> int:
    """How many classes a graph of ``num_nodes`` nodes can have a pair in: class c needs d = c + 1 <= n − 1 (the
    last class d >= max_distance needs max_distance <= n − 1)."""
    return min(max_distance, num_nodes - 1)


def _pairs_by_class(
    num_nodes: int, edges: Sequence[tuple[int, int]], max_distance: int
) -> dict[int, list[tuple[int, int]]]:
    """The ordered pairs (s, t), s != t, of a connected graph grouped by the class of their distance."""
    adjacency = adjacency_lists(num_nodes, edges)
    pairs: dict[int, list[tuple[int, int]]] = {}
    for source in range(num_nodes):
        for target, hops in enumerate(bfs_distances(adjacency, source)):
            if hops > 0:
                pairs.setdefault(distance_label(hops, max_distance), []).append((source, target))
    return pairs


def _draw_edges(family: str, num_nodes: int, generator: torch.Generator) -> list[tuple[int, int]]:
    return random_tree(num_nodes, generator) if family == "tree" else random_connected_graph(num_nodes, generator)


def check_task(task: str, num_nodes: int, family: str, max_distance: int) -> None:
    """Refuse a task, size, family or class count the generator cannot serve: InvalidInput at ("task",),
    ("num_nodes",), ("family",) or ("max_distance",)."""
    if task not in GRAPH_TASKS:
        raise InvalidInput(("task",), f"unknown graph task {task!r}; known: {list(GRAPH_TASKS)}")
    if family not in GRAPH_FAMILIES:
        raise InvalidInput(("family",), f"unknown graph family {family!r}; known: {list(GRAPH_FAMILIES)}")
    if not 3 <= num_nodes <= MAX_NODES:
        raise InvalidInput(
            ("num_nodes",), f"must be between 3 (two classes of distance) and {MAX_NODES}, got {num_nodes}"
        )
    if max_distance < 2:
        raise InvalidInput(("max_distance",), f"must be at least 2 (two classes), got {max_distance}")


def graph_batch(
    task: str,
    batch_size: int,
    num_nodes: int,
    generator: torch.Generator,
    *,
    family: str = "tree",
    max_distance: int = DEFAULT_MAX_DISTANCE,
) -> GraphBatch:
    """``batch_size`` fresh examples of ``task`` on graphs of ``num_nodes`` nodes, all drawn from ``generator``
    (the same generator state gives the same batch). Labels are balanced as the module docstring says."""
    check_task(task, num_nodes, family, max_distance)
    if batch_size < 1:
        raise InvalidInput(("batch_size",), f"must be at least 1, got {batch_size}")
    classes = feasible_classes(num_nodes, max_distance)
    graphs = []
    node_types = torch.full((batch_size, num_nodes), NODE_PLAIN, dtype=torch.int64)  # (B, N)
    labels = torch.empty(batch_size, dtype=torch.int64)  # (B,)
    for example in range(batch_size):
        wanted = _randint(classes, generator)
        for _ in range(MAX_GRAPH_DRAWS):
            edges = _draw_edges(family, num_nodes, generator)
            pairs = _pairs_by_class(num_nodes, edges, max_distance)
            if wanted in pairs:
                break
        else:  # no graph had the wanted class: a class the last graph has, uniformly
            present = sorted(pairs)
            wanted = present[_randint(len(present), generator)]
        source, target = pairs[wanted][_randint(len(pairs[wanted]), generator)]
        node_types[example, source] = NODE_SOURCE
        node_types[example, target] = NODE_TARGET
        labels[example] = wanted
        graphs.append(Graph(num_nodes=num_nodes, edges=torch.tensor(edges, dtype=torch.int64).reshape(-1, 2)))
    return GraphBatch(graphs=tuple(graphs), node_types=node_types, labels=labels)


# ---------------------------------------------------------------------------------------------------- model
@dataclass(frozen=True)
class GraphModelConfig:
    """Everything needed to rebuild a graph transformer and the task it was trained on (saved as JSON)."""

    layers: int
    dim: int
    heads: int
    method: str
    params: dict[str, Any] = field(default_factory=dict)  # the method's raw (JSON) params
    ffn_mult: int = 4
    virtual_token: bool = True  # Graphormer's graph token at position −1
    readout: Readout = "marked"  # the mean of the marked nodes (default), the graph token, the mean over nodes
    train_nodes: int = 12  # the graph size learned methods are initialised for
    task: str = "graph_distance"
    family: str = "tree"
    max_distance: int = DEFAULT_MAX_DISTANCE

    def __post_init__(self) -> None:
        if self.readout == "graph_token" and not self.virtual_token:
            raise ValueError("readout='graph_token' needs virtual_token=True")

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def num_classes(self) -> int:
        return self.max_distance

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GraphModelConfig:
        return cls(**data)


def node_positions(num_nodes: int, virtual_token: bool, device: torch.device | None = None) -> torch.Tensor:
    """Positions of the tokens: the graph token −1 (when present), then node ids 0 … N − 1: (P + N,) int64."""
    nodes = torch.arange(num_nodes, dtype=torch.int64, device=device)  # (N,)
    if not virtual_token:
        return nodes
    return torch.cat((torch.full((1,), -1, dtype=torch.int64, device=device), nodes))  # (1 + N,)


class ExampleAppliers:
    """One applier per example of a batch (each example has its own graph), used where a block takes one
    applier: every hook runs example by example on its slice of the batch and the results are concatenated.
    States are lists with one entry per example."""

    def __init__(self, appliers: Sequence[Applier]) -> None:
        self.appliers = list(appliers)

    def embed(self, t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return torch.cat([pe.embed(t[b : b + 1], pos) for b, pe in enumerate(self.appliers)])  # (B, T, D)

    def initial_state(self, length: int, device: torch.device) -> list[Any]:
        return [pe.initial_state(1, length, device) for pe in self.appliers]

    def layer_attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        x: torch.Tensor | None = None,
        state: Any = None,
        pos: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[Any]]:
        """q, k, v (B, H, T, d) -> (B, H, T, d), example b through its own applier."""
        states = state if state is not None else [None] * len(self.appliers)
        outputs, next_states = [], []
        for b, (pe, own) in enumerate(zip(self.appliers, states, strict=True)):
            one = slice(b, b + 1)
            attended, after = pe.layer_attend(
                q[one], k[one], v[one], x=None if x is None else x[one], state=own, pos=pos
            )  # (1, H, T, d)
            outputs.append(attended)
            next_states.append(after)
        return torch.cat(outputs), next_states  # (B, H, T, d)

    def update_state(self, x: torch.Tensor, state: Any) -> list[Any]:
        states = state if state is not None else [None] * len(self.appliers)
        return [
            pe.update_state(x[b : b + 1], own) for b, (pe, own) in enumerate(zip(self.appliers, states, strict=True))
        ]


def example_appliers(pe: PositionalEncoding, graphs: Sequence[Graph]) -> ExampleAppliers:
    """``pe``'s applier on each graph (its current learned tensors, so gradients reach them)."""
    return ExampleAppliers([pe.applier(replace(pe.layer, graph=graph)) for graph in graphs])


def unpack_graphs(inputs: torch.Tensor) -> tuple[torch.Tensor, list[Graph]]:
    """A packed batch (``GraphBatch.packed``, (B, N, 1 + N) int64) -> node types (B, N) and one graph per
    example, its edges (u < v) read from the adjacency in row-major order."""
    node_types = inputs[..., 0]  # (B, N)
    adjacency = inputs[..., 1:]  # (B, N, N)
    graphs = []
    for matrix in adjacency.cpu():
        edges = torch.triu(matrix, diagonal=1).nonzero()  # (E, 2), u < v
        graphs.append(Graph(num_nodes=int(matrix.shape[0]), edges=edges))
    return node_types, graphs


class GraphTransformer(nn.Module):
    """A packed batch (B, N, 1 + N) (node types and adjacency, ``GraphBatch.packed``) -> class logits
    (B, num_classes), at any N."""

    def __init__(self, config: GraphModelConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        dim = config.dim
        self.node_embedding = nn.Embedding(NUM_NODE_TYPES, dim)
        self.graph_token = nn.Embedding(1, dim) if config.virtual_token else None  # Graphormer's graph_token
        self.blocks = nn.ModuleList(Block(dim, config.heads, config.ffn_mult) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, config.num_classes)
        init_weights(self, seed, config.layers)  # before the PE exists: non-PE weights do not depend on it
        # the training size's node count, no edges: learned tables are sized by the heads / width, not a graph
        placeholder = Graph(num_nodes=config.train_nodes, edges=torch.zeros((0, 2), dtype=torch.int64))
        layer = Layer(num_heads=config.heads, head_dim=config.head_dim, causal=False, model_dim=dim, graph=placeholder)
        self.pe = attach_positional_encodings(
            self.blocks,
            config.method,
            config.params,
            layer,
            init_tokens=config.train_nodes + int(config.virtual_token),
            init_grid=(config.train_nodes,),
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        node_types, graphs = unpack_graphs(inputs)
        return self.classify(node_types, graphs)

    def classify(self, node_types: torch.Tensor, graphs: Sequence[Graph]) -> torch.Tensor:
        """Node types (B, N) and one graph per example -> logits (B, num_classes)."""
        batch, nodes = node_types.shape
        if len(graphs) != batch or any(graph.num_nodes != nodes for graph in graphs):
            raise ValueError(f"expected {batch} graphs of {nodes} nodes, one per row of node_types")
        x = self.node_embedding(node_types)  # (B, N, D)
        if self.graph_token is not None:
            x = torch.cat((self.graph_token.weight.expand(batch, 1, -1), x), dim=1)  # (B, 1 + N, D)
        pos = node_positions(nodes, self.graph_token is not None, x.device)  # (T,)
        shared = example_appliers(self.pe, graphs)
        x = shared.embed(x, pos)  # absolute methods: + P at the node ids (graph token: its prefix row or 0)
        states = shared.initial_state(x.shape[1], x.device)
        for block in self.blocks:
            assert isinstance(block, Block)
            own = example_appliers(block.pe, graphs) if block.pe is not None else shared  # per-layer methods
            x, states = block(x, own, states, pos)
        x = self.final_norm(x)
        prefix = int(self.graph_token is not None)
        if self.config.readout == "graph_token":
            pooled = x[:, 0]  # (B, D)
        elif self.config.readout == "mean":
            pooled = x[:, prefix:].mean(dim=1)  # (B, D)
        else:  # the mean of the marked (source and target) nodes
            marked = (node_types != NODE_PLAIN).to(x.dtype)[..., None]  # (B, N, 1)
            pooled = (x[:, prefix:] * marked).sum(dim=1) / marked.sum(dim=1).clamp_min(1.0)  # (B, D)
        logits: torch.Tensor = self.head(pooled)  # (B, num_classes)
        return logits
