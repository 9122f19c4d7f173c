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
L x [x + Attn(LN(x)), x + FFN(LN(x))] -> LN -> readout -> linear head. Readouts: ``marked`` (default), the mean
of the source and target nodes (the pair readout of link prediction); ``graph_token``, the virtual token
(Graphormer's graph-level readout); ``mean``, the mean over the nodes. Measured at 12 nodes, 5 classes, L = 2,
d = 32, 8 heads, lr 1e-2, batch 32: with ``marked`` Graphormer is at 100 % after 600 steps; with ``graph_token``
its loss stays at ln 5 for about 900 steps (the token must first find the source by content before the source's
distance-biased attention pays off: a second-order plateau) and reaches the same accuracy by 1500. So the token
is kept by default (its prefix bias is exercised) but the marked nodes are read.

Bidirectional attention, FFN ``ffn_mult``·d with GELU, no dropout; weights as ``posenc.training.model``
(N(0, 0.02), residual outputs scaled by 1/√(2L), zero biases, drawn from a generator seeded by ``seed`` before
the PE modules exist, so two models with the same seed and different methods start from identical non-PE
weights). Every example has its own graph, so each forward builds one applier per example
(and per layer for ``per_layer`` methods) on ``Layer(..., graph=graphs[b])``; learned PE tensors are module
parameters created once by ``spec.learned_init`` for the training size and substituted through
``params.model_copy(update=...)`` at every forward, so gradients reach them through the method's own formula.
Positions are the node ids, the graph token −1 (``posenc.pe.types``): the applier gives it a zero encoding /
zero bias unless the method registers its own (Graphormer's virtual distance t).

The PE enters through the applier's hooks only, never by kind or name: ``embed`` once on the node embeddings
(absolute methods add their encoding, the others return them unchanged), then in every layer ``rotate``,
``score_terms`` and ``normalise`` (``attend_nodes``): ``Applier.attend`` less its embed step, which would add an
absolute encoding to q and k of every head a second time (the ``/v1/attention`` convention).

``train_graph_model`` and ``evaluate_graph_model`` are the entry points for jobs: train at one size, evaluate at
several (size extrapolation: train at 12 nodes, test at 8/12/16/24).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from posenc.errors import InvalidInput
from posenc.pe import MethodParams, get_method
from posenc.pe.appliers import Applier, Layer, build_applier
from posenc.pe.types import Graph
from posenc.training.hooks import JobCancelled, JobHooks, NoHooks, Progress
from posenc.training.model import init_weights
from posenc.training.train import ADAM_BETAS, DATA_SEED_OFFSET, GRAD_CLIP, ProgressScope, lr_factor

GraphTask = Literal["graph_distance"]
GraphFamily = Literal["tree", "er"]
Readout = Literal["graph_token", "mean", "marked"]
GRAPH_TASKS: tuple[str, ...] = get_args(GraphTask)
GRAPH_FAMILIES: tuple[str, ...] = get_args(GraphFamily)

NODE_PLAIN, NODE_SOURCE, NODE_TARGET = 0, 1, 2
NUM_NODE_TYPES = 3
DEFAULT_MAX_DISTANCE = 5  # classes d = 1, 2, 3, 4, >= 5
ER_MEAN_DEGREE = 2.5  # family 'er': expected degree of G(n, p) before the components are joined
MAX_GRAPH_DRAWS = 64  # graphs drawn per example while looking for a pair at the wanted distance
MAX_NODES = 256  # distances are all-pairs BFS in Python: O(n·(n + E)) per graph
EVAL_SEED_OFFSET = 0xE7A1  # evaluation streams are seeded apart from the training stream of the same seed
EVAL_BATCH = 64
WARMUP_FRACTION = 0.1  # of the steps: linear warmup, then cosine to 10 % (posenc.training.train.lr_factor)
WEIGHT_DECAY = 0.01


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


def _draw_edges(family: GraphFamily, num_nodes: int, generator: torch.Generator) -> list[tuple[int, int]]:
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
    task: GraphTask,
    batch_size: int,
    num_nodes: int,
    generator: torch.Generator,
    *,
    family: GraphFamily = "tree",
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
    task: GraphTask = "graph_distance"
    family: GraphFamily = "tree"
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


class GraphPositionalEncoding(nn.Module):
    """One instance of a registered method on the graph model: its learned parameters (created once), and an
    applier per graph built on them."""

    def __init__(self, config: GraphModelConfig, seed_offset: int = 0, *, learned: bool = True) -> None:
        super().__init__()
        self.spec = get_method(config.method)
        self.params: MethodParams = self.spec.parse_params(config.params)
        self.config = config
        self.learned = nn.ParameterDict()
        if self.spec.learned and learned:
            if self.spec.learned_init is None:
                raise ValueError(f"{config.method!r} is learned but has no learned_init, so it cannot be trained")
            params = self.params
            if seed_offset and "seed" in type(params).model_fields:
                # per-layer instances: layer l draws from seed + l, so the layers do not start identical
                params = params.model_copy(update={"seed": int(getattr(params, "seed", 0)) + seed_offset})
            # the training size's node count, no edges: learned tables are sized by the heads / width, not a graph
            placeholder = Graph(num_nodes=config.train_nodes, edges=torch.zeros((0, 2), dtype=torch.int64))
            tokens = config.train_nodes + int(config.virtual_token)
            init_context = build_applier(self.spec, params, self.layer(placeholder)).init_context(
                tokens, (config.train_nodes,)
            )
            for name, tensor in self.spec.learned_init(params, init_context).items():
                self.learned[name] = nn.Parameter(torch.as_tensor(tensor, dtype=torch.float32).clone())

    def layer(self, graph: Graph) -> Layer:
        config = self.config
        return Layer(num_heads=config.heads, head_dim=config.head_dim, causal=False, model_dim=config.dim, graph=graph)

    def current_params(self) -> MethodParams:
        """The params with the current learned tensors substituted (differentiable)."""
        return self.params.model_copy(update=dict(self.learned.items())) if self.learned else self.params

    def appliers(self, graphs: Sequence[Graph]) -> list[Applier]:
        """One applier per graph. No cache: a fixed table depends on the graph, which the cache keys omit."""
        params = self.current_params()
        return [build_applier(self.spec, params, self.layer(graph)) for graph in graphs]


class GraphSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, pes: Sequence[Applier], states: list[Any]
    ) -> tuple[torch.Tensor, list[Any]]:
        """x (B, N, D) with example b attended through ``pes[b]`` (its graph's applier)."""
        batch, length, dim = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.heads, dim // self.heads)  # (B, N, 3, H, d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, N, d_head)
        outputs, next_states = [], []
        for b, pe in enumerate(pes):
            one = slice(b, b + 1)
            # the encoding of absolute methods is already in x: layer_attend does not add it again; (1, H, N, d)
            attended, state = pe.layer_attend(
                q[one], k[one], v[one], x=x[one], state=states[b], pos=pos
            )  # (1, H, N, d)
            outputs.append(attended)
            next_states.append(state)
        merged = torch.cat(outputs).transpose(1, 2).reshape(batch, length, dim)  # (B, N, H·d_head)
        out: torch.Tensor = self.out(merged)
        return out, next_states


class GraphBlock(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + FFN(LN(x)) with a GELU FFN of width ffn_mult·d."""

    def __init__(self, dim: int, heads: int, ffn_mult: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = GraphSelfAttention(dim, heads)
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn_in = nn.Linear(dim, ffn_mult * dim)
        self.ffn_out = nn.Linear(ffn_mult * dim, dim)
        self.pe: GraphPositionalEncoding | None = None  # this layer's own instance, for per-layer methods

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, pes: Sequence[Applier], states: list[Any]
    ) -> tuple[torch.Tensor, list[Any]]:
        attended, states = self.attn(self.attn_norm(x), pos, pes, states)
        x = x + attended
        ffn_input = self.ffn_norm(x)
        # a model-coupled method's state update, per example (None for every other method)
        states = [
            pe.update_state(ffn_input[b : b + 1], state) for b, (pe, state) in enumerate(zip(pes, states, strict=True))
        ]
        out: torch.Tensor = x + self.ffn_out(F.gelu(self.ffn_in(ffn_input)))
        return out, states


class GraphTransformer(nn.Module):
    """Node types (B, N) and one graph per example -> class logits (B, num_classes), at any N."""

    def __init__(self, config: GraphModelConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        dim = config.dim
        self.node_embedding = nn.Embedding(NUM_NODE_TYPES, dim)
        self.graph_token = nn.Embedding(1, dim) if config.virtual_token else None  # Graphormer's graph_token
        self.blocks = nn.ModuleList(GraphBlock(dim, config.heads, config.ffn_mult) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, config.num_classes)
        init_weights(self, seed, config.layers)
        # after the draw: non-PE weights do not depend on the method
        per_layer = get_method(config.method).per_layer
        self.pe = GraphPositionalEncoding(config, learned=not per_layer)
        if per_layer:
            for index, block in enumerate(self.blocks):
                assert isinstance(block, GraphBlock)
                block.pe = GraphPositionalEncoding(config, seed_offset=index)

    def forward(self, node_types: torch.Tensor, graphs: Sequence[Graph]) -> torch.Tensor:
        batch, nodes = node_types.shape
        if len(graphs) != batch or any(graph.num_nodes != nodes for graph in graphs):
            raise ValueError(f"expected {batch} graphs of {nodes} nodes, one per row of node_types")
        x = self.node_embedding(node_types)  # (B, N, D)
        if self.graph_token is not None:
            x = torch.cat((self.graph_token.weight.expand(batch, 1, -1), x), dim=1)  # (B, 1 + N, D)
        pos = node_positions(nodes, self.graph_token is not None, x.device)  # (T,)
        shared = self.pe.appliers(graphs)
        # absolute methods: + P at the node ids (the graph token: the method's prefix row or 0); others unchanged
        x = torch.cat([pe.embed(x[b : b + 1], pos) for b, pe in enumerate(shared)])  # (B, T, D)
        states = [pe.initial_state(1, x.shape[1], x.device) for pe in shared]
        for block in self.blocks:
            assert isinstance(block, GraphBlock)
            pes = block.pe.appliers(graphs) if block.pe is not None else shared
            x, states = block(x, pos, pes, states)
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


# ------------------------------------------------------------------------------------------ train / evaluate
def train_graph_model(
    method: str,
    params: Mapping[str, Any] | None = None,
    *,
    task: GraphTask = "graph_distance",
    num_nodes: int = 12,
    steps: int = 600,
    batch_size: int = 32,
    lr: float = 1e-2,
    seed: int = 0,
    layers: int = 2,
    dim: int = 32,
    heads: int = 8,
    family: GraphFamily = "tree",
    max_distance: int = DEFAULT_MAX_DISTANCE,
    virtual_token: bool = True,
    readout: Readout = "marked",
    warmup_steps: int | None = None,
    device: str = "cpu",
    threads: int | None = None,
    hooks: JobHooks | None = None,
    scope: ProgressScope | None = None,
) -> tuple[GraphTransformer, list[float]]:
    """Train a ``GraphTransformer`` with ``method`` on ``task`` at ``num_nodes`` nodes: (model in eval mode, the
    loss of every step).

    AdamW (betas of ``posenc.training.train``, weight decay WEIGHT_DECAY on matrices only), linear warmup for
    ``warmup_steps`` (default 10 % of the steps) then cosine to 10 % of ``lr``, gradients clipped at 1.0. The
    weights are drawn from ``seed``, the batches from a generator seeded with seed + DATA_SEED_OFFSET, so every
    method of a seed sees the same graphs. ``threads`` sets torch's CPU threads (1 is fastest at these sizes: the
    tensors are tiny and the examples are looped over). ``hooks`` are called as ``posenc.training.train.train``
    calls them: ``should_cancel`` before each step (raising JobCancelled), ``progress`` after it, counted by
    ``scope``.
    """
    check_task(task, num_nodes, family, max_distance)
    if threads is not None:
        torch.set_num_threads(threads)
    hooks = hooks if hooks is not None else NoHooks()
    scope = scope if scope is not None else ProgressScope()
    total = scope.total if scope.total is not None else steps
    warmup = warmup_steps if warmup_steps is not None else max(1, int(WARMUP_FRACTION * steps))
    config = GraphModelConfig(
        layers=layers,
        dim=dim,
        heads=heads,
        method=method,
        params=dict(params or {}),
        virtual_token=virtual_token,
        readout=readout,
        train_nodes=num_nodes,
        task=task,
        family=family,
        max_distance=max_distance,
    )
    target = torch.device(device)
    model = GraphTransformer(config, seed).to(target)
    decayed = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    plain = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decayed, "weight_decay": WEIGHT_DECAY}, {"params": plain, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=ADAM_BETAS)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, warmup, steps))
    generator = torch.Generator().manual_seed(seed + DATA_SEED_OFFSET)
    losses: list[float] = []
    model.train()
    for step in range(steps):
        if hooks.should_cancel():
            raise JobCancelled(f"cancelled before step {step + 1} of {steps}")
        batch = graph_batch(task, batch_size, num_nodes, generator, family=family, max_distance=max_distance)
        logits = model(batch.node_types.to(target), batch.graphs)  # (B, C)
        loss = F.cross_entropy(logits, batch.labels.to(target))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.item()))
        hooks.progress(Progress(step=scope.offset + step + 1, total=total, loss=losses[-1], stage=scope.stage))
    model.eval()
    return model, losses


def evaluation_generator(seed: int, num_nodes: int) -> torch.Generator:
    """The evaluation stream of one size: seeded by (seed, num_nodes), apart from the training stream."""
    return torch.Generator().manual_seed((seed + EVAL_SEED_OFFSET) * 1_000_003 + num_nodes)


@torch.no_grad()
def evaluate_graph_model(
    model: GraphTransformer,
    *,
    task: GraphTask = "graph_distance",
    num_nodes_list: Sequence[int] = (8, 12, 16, 24),
    samples: int = 512,
    seed: int = 0,
    batch_size: int = EVAL_BATCH,
) -> dict[int, float]:
    """Accuracy at each graph size: {num_nodes: fraction of ``samples`` fresh examples classified right}.

    The examples of a size come from ``evaluation_generator(seed, num_nodes)`` (the same for every method and
    independent of the other sizes), with the family and class count the model was trained with. Chance is
    1/feasible_classes(num_nodes, max_distance) (labels are balanced)."""
    config = model.config
    if task != config.task:
        raise InvalidInput(("task",), f"the model was trained on {config.task!r}, not {task!r}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    accuracy: dict[int, float] = {}
    for num_nodes in num_nodes_list:
        generator = evaluation_generator(seed, num_nodes)
        correct = 0
        for start in range(0, samples, batch_size):
            count = min(batch_size, samples - start)
            batch = graph_batch(
                task, count, num_nodes, generator, family=config.family, max_distance=config.max_distance
            )
            predicted = model(batch.node_types.to(device), batch.graphs).argmax(dim=-1)  # (B,)
            correct += int((predicted.cpu() == batch.labels).sum())
        accuracy[num_nodes] = correct / samples
    model.train(was_training)
    return accuracy
