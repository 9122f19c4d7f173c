"""Graph encodings: positions are node ids of ``ctx.graph``.

Methods: ``graphormer`` (bias: a learned scalar per head and shortest-path distance, Ying et al., NeurIPS 2021),
``graphormer_centrality`` (absolute: learned in- and out-degree embeddings, same paper) and ``laplacian_pe``
(absolute: Laplacian eigenvectors; ``variant='gnn'`` is Dwivedi et al.'s LapPE over the nodes of a graph,
``variant='tabpet'`` is Tab-PET's over the features of a table).

The graph structure (adjacency, degrees, shortest paths, eigenvectors) is computed on the CPU, exactly (integers)
or in float64 (the Laplacian), whatever the requested device and dtype, so that the same graph gives the same
result everywhere; learned tables are only gathered. The adjacency is binary: an edge listed twice, or in both
directions of an undirected graph, counts once, and a self-loop (u, u) counts once in u's degree.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from posenc.errors import InvalidInput
from posenc.pe.ops import compute_dtype, learned_tensors
from posenc.pe.registry import MethodParams, Seed, register
from posenc.pe.types import AbsoluteContext, BiasContext, Extent, Graph, ParamCost
from posenc.schemas.methods import Kind
from posenc.schemas.tensors import TensorIn
from posenc.tensors import to_torch

GRAPHORMER_PAPER = (
    "Ying et al. Do Transformers Really Perform Badly for Graph Representation? (NeurIPS 2021). "
    "https://arxiv.org/abs/2106.05234"
)
LAPPE_PAPER = (
    "Dwivedi et al. Benchmarking Graph Neural Networks (JMLR 2023). https://arxiv.org/abs/2003.00982; "
    "Leng, Ghosh, Motani. Tab-PET: Graph-Based Positional Encodings for Tabular Transformers (AAAI 2026). "
    "https://arxiv.org/abs/2511.13338"
)

# A dense (N, N) adjacency and (S, N) distances: graphs are capped at this many nodes.
MAX_GRAPH_NODES = 4096
# laplacian_pe's dense O(N³) eigendecomposition (about 3 s at 1024 nodes, 25 s at 2048 on two busy cores).
MAX_EIGEN_NODES = 2048
# Seeded tables are drawn whole; this caps their size (256 MiB of float32).
MAX_SEEDED_TABLE_ELEMENTS = 2**26
# Graphormer's floyd_warshall: unreachable pairs (and any distance >= 510) get SPD 510, table row 511.
GRAPHORMER_UNREACHABLE = 510
# One BFS level of a chunk of sources holds at most this many candidate (source, node) pairs.
BFS_CANDIDATE_BUDGET = 1 << 22
# The sign rule's "nonzero": eigenvector entries that are zero in exact arithmetic come out of eigh near 1e-16.
SIGN_TOLERANCE = 1e-6
# Tab-PET's automatic k: eigenvalues of the low band are <= 1 − window (the mid band 1 ± window is avoided).
TABPET_WINDOW = 0.25
TABPET_MIN_K, TABPET_MAX_K = 2, 10
GRAPHORMER_FIELDS = ("spatial_table", "virtual_distance")
# Work units (about 1 ns of one core, posenc.compute.cost) of the graph algorithms, per step: the breadth-first
# search from every node visits every node and edge (n·(n + E) steps: a 4096-node path graph takes about 1.4 s);
# a dense symmetric float64 eigenproblem takes about n³/2 ns on one core and up to 2·n³ of CPU time with two
# threads (2048 nodes: 3.8 s … 17 s), so it is charged 2·n³; degrees read every edge once.
WORK_PER_SEARCH_STEP = 60
WORK_PER_EDGE = 20


def shortest_paths_work(nodes: int, edges: int) -> int:
    """Graphormer's all-pairs shortest paths: a breadth-first search from every node."""
    return WORK_PER_SEARCH_STEP * nodes * (nodes + edges)


def degrees_work(nodes: int, edges: int) -> int:
    """Degrees: every edge read once."""
    return WORK_PER_EDGE * (nodes + edges)


def spectrum_work(nodes: int, edges: int) -> int:
    """The Laplacian's eigenvectors: a dense symmetric eigenproblem, after the adjacency is built."""
    return 2 * nodes**3 + WORK_PER_EDGE * (nodes + edges)


CENTRALITY_FIELDS = ("in_degree_table", "out_degree_table")


# ------------------------------------------------------------------------------------------------ helpers
def require_graph(graph: Graph | None, method: str) -> Graph:
    """ctx.graph, or InvalidInput at ("graph",) when the request carries none."""
    if graph is None:
        raise InvalidInput(("graph",), f"{method} encodes the nodes of a graph; give the graph")
    return graph


def checked_edges(graph: Graph, limit: int = MAX_GRAPH_NODES) -> torch.Tensor:
    """The graph's edges (E, 2) int64 on the CPU after checking num_nodes and every node id.

    InvalidInput at ("graph", "num_nodes") outside 1 … ``limit``, at ("graph", "edges") for a shape other than
    (E, 2), a non-integer dtype or a node id outside 0 … num_nodes − 1.
    """
    nodes = graph.num_nodes
    if not 1 <= nodes <= limit:
        raise InvalidInput(("graph", "num_nodes"), f"must be between 1 and {limit} for this method, got {nodes}")
    edges = graph.edges
    if edges.dim() != 2 or edges.shape[1] != 2:
        raise InvalidInput(("graph", "edges"), f"expected shape [E, 2], got {list(edges.shape)}")
    if edges.is_floating_point() or edges.is_complex() or edges.dtype == torch.bool:
        raise InvalidInput(("graph", "edges"), f"node ids must be integers, got {edges.dtype}")
    edges = edges.detach().to(device="cpu", dtype=torch.int64)
    outside = (edges < 0) | (edges >= nodes)  # (E, 2)
    if bool(outside.any()):
        edge, end = (int(i) for i in outside.nonzero()[0])
        raise InvalidInput(
            ("graph", "edges"),
            f"edge {edge} has node id {int(edges[edge, end])}, num_nodes {nodes} (ids are 0 … {nodes - 1})",
        )
    return edges


def check_node_ids(positions: torch.Tensor, num_nodes: int) -> None:
    """Positions of a graph method are node ids 0 … num_nodes − 1: else InvalidInput at ("positions",)."""
    if positions.numel() == 0:
        return
    low, high = int(positions.min()), int(positions.max())
    if low < 0 or high >= num_nodes:
        bad = low if low < 0 else high
        raise InvalidInput(("positions",), f"node id {bad} is outside the graph, num_nodes {num_nodes}")


def adjacency_matrix(graph: Graph, edges: torch.Tensor, *, symmetric: bool) -> torch.Tensor:
    """A (N, N) bool on the CPU: A[u, v] for each edge (u, v), and A[v, u] too when ``symmetric``."""
    nodes = graph.num_nodes
    adjacency = torch.zeros((nodes, nodes), dtype=torch.bool)
    adjacency[edges[:, 0], edges[:, 1]] = True
    if symmetric:
        adjacency |= adjacency.T.clone()
    return adjacency


def hop_distances(adjacency: torch.Tensor, sources: torch.Tensor, max_hops: int) -> torch.Tensor:
    """Shortest-path distance in hops from each source to every node along the edges u → v of ``adjacency``
    (N, N) bool, exact up to ``max_hops``; nodes farther away or unreachable are −1: (S,) -> (S, N) int32.

    Level-synchronous breadth-first search from a chunk of sources at once. A level expands its frontier either
    edge by edge (the candidates are the edges leaving the frontier; a pair reached by several edges is kept
    once by letting one candidate claim it) or, when the frontier is large, as one sparse product
    frontier (S', N) · A (N, N): whichever touches fewer entries. Chunks keep a level within
    BFS_CANDIDATE_BUDGET candidates and its dense arrays within BFS_CANDIDATE_BUDGET entries.
    """
    nodes, count = adjacency.shape[0], sources.shape[0]
    tails, heads = adjacency.nonzero(as_tuple=True)  # (E,), (E,): row-major, so grouped by tail
    edges = int(heads.shape[0])
    degree = torch.bincount(tails, minlength=nodes)  # (N,)
    first_edge = torch.cumsum(degree, 0) - degree  # (N,): where each node's neighbours start in ``heads``
    transposed = adjacency.T.to(torch.float32).to_sparse()  # (N, N) COO: row v lists the u with u → v
    distances = torch.full((count, nodes), -1, dtype=torch.int32)  # (S, N)
    flat = distances.view(-1)  # (S·N,): entry s·N + v
    chunk = max(1, min(count, BFS_CANDIDATE_BUDGET // max(edges, nodes, 1)))
    claim = torch.empty((chunk * nodes,), dtype=torch.int64)  # (S'·N,): scratch, one slot per (source, node)
    for start in range(0, count, chunk):
        size = min(chunk, count - start)
        base = start * nodes
        block = distances[start : start + size]  # (S', N): a view of the chunk's rows
        front = base + torch.arange(size) * nodes + sources[start : start + size]  # (S',): flat (source, itself)
        flat[front] = 0
        for level in range(1, max_hops + 1):
            front_node = front % nodes  # (F,)
            counts = degree[front_node]  # (F,): edges leaving each frontier entry
            total = int(counts.sum())
            if total == 0:
                break
            if 16 * total > (edges + nodes) * size:  # a dense frontier: one sparse product is cheaper
                frontier = torch.zeros((size * nodes,), dtype=torch.float32)  # (S'·N,)
                frontier[front - base] = 1.0
                reached = torch.sparse.mm(transposed, frontier.view(size, nodes).T)  # (N, S'): edges into v
                fresh = (reached.T > 0) & (block < 0)  # (S', N)
                front = base + fresh.reshape(-1).nonzero()[:, 0]  # (F',): flat (source, node), each once
                flat[front] = level
                continue
            shift = torch.repeat_interleave(first_edge[front_node] - (torch.cumsum(counts, 0) - counts), counts)  # (C,)
            node = heads[torch.arange(total) + shift]  # (C,): the head of each edge leaving the frontier
            target = torch.repeat_interleave(front - front_node, counts) + node  # (C,): flat (source, head)
            target = target[flat[target] < 0]  # (C',): not reached before
            ids = torch.arange(target.shape[0])  # (C',)
            claim[target - base] = ids  # duplicates: one of them wins
            front = target[claim[target - base] == ids]  # (F',): each newly reached pair once
            flat[front] = level
    return distances


def normalized_laplacian(adjacency: torch.Tensor, degree: torch.Tensor) -> torch.Tensor:
    """L = I − D^−1/2 A D^−1/2: (N, N) float64 from A (N, N) float64 symmetric and the degrees (N,) > 0.

    The scale d_i^−1/2 · d_j^−1/2 is formed first (a commutative product), so L is exactly symmetric.
    """
    inv_sqrt = degree.rsqrt()  # (N,)
    scale = inv_sqrt[:, None] * inv_sqrt[None, :]  # (N, N)
    return torch.eye(adjacency.shape[0], dtype=adjacency.dtype) - scale * adjacency


def fix_signs(vectors: torch.Tensor) -> torch.Tensor:
    """Each column (N, K) times ±1 so that its first entry with |v| > SIGN_TOLERANCE is positive."""
    significant = vectors.abs() > SIGN_TOLERANCE  # (N, K)
    first = significant.to(torch.int8).argmax(dim=0)  # (K,): argmax returns the first maximal index
    pivot = vectors.gather(0, first[None, :])  # (1, K)
    return vectors * torch.where(pivot < 0, -1.0, 1.0).to(vectors.dtype)  # (N, K)


def pad_columns(vectors: torch.Tensor, width: int) -> torch.Tensor:
    """(N, K) with K <= width -> (N, width): zero columns appended (LapPE when num_nodes <= k)."""
    return F.pad(vectors, (0, width - vectors.shape[1]))  # (N, width)


def _check_seeded_size(elements: int, loc: tuple[str, ...]) -> None:
    if elements > MAX_SEEDED_TABLE_ELEMENTS:
        raise InvalidInput(
            loc,
            f"seeded tables of {elements} values are over the limit of {MAX_SEEDED_TABLE_ELEMENTS}; "
            "supply the tables or make them smaller",
        )


# ---------------------------------------------------------------------------------------------- graphormer
class GraphormerParams(MethodParams):
    num_spatial: int = Field(
        default=512,
        ge=2,
        le=4096,
        description="rows of the spatial table; row = SPD + 1, row 0 is padding (Graphormer num_spatial 512)",
    )
    spatial_pos_max: int = Field(
        default=20,
        ge=1,
        le=GRAPHORMER_UNREACHABLE,
        description="pairs with SPD >= spatial_pos_max are far: masked to -inf ('mask') or one shared bucket "
        "('bucket'); Graphormer's collator default 20",
    )
    far_rule: Literal["mask", "bucket"] = Field(
        default="mask",
        description="mask: Graphormer's collator, far and unreachable pairs get -inf; bucket: attention-gym, "
        "far and unreachable pairs share row spatial_pos_max + 1, no mask",
    )
    spatial_table: TensorIn | None = Field(
        default=None, description="the learned b, shape (num_spatial, num_heads); omit to draw it from seed"
    )
    virtual_distance: TensorIn | None = Field(
        default=None,
        description="the graph token's learned per-head scalar t, shape (num_heads,); omit to draw it from seed",
    )
    seed: Seed = Field(default=0, description="seed of the initialisation of the tensors not supplied")

    @model_validator(mode="after")
    def _rows_cover_the_buckets(self) -> GraphormerParams:
        needed = self.spatial_pos_max + (1 if self.far_rule == "mask" else 2)
        if self.num_spatial < needed:
            raise ValueError(
                f"num_spatial must be at least spatial_pos_max + {needed - self.spatial_pos_max} = {needed} "
                f"with far_rule={self.far_rule!r} (rows 0 … {needed - 1} are read)"
            )
        return self


def graphormer_learned_init(params: GraphormerParams, ctx: BiasContext) -> dict[str, torch.Tensor]:
    """spatial_table (num_spatial, H) then virtual_distance (H,), each N(0, 0.02²) (Graphormer's init_params for
    nn.Embedding, which also redraws the padding row 0), in float32 on the CPU from one generator seeded with
    params.seed."""
    _check_seeded_size(params.num_spatial * ctx.num_heads, ("params", "num_spatial"))
    generator = torch.Generator().manual_seed(params.seed)
    table = torch.randn((params.num_spatial, ctx.num_heads), generator=generator, dtype=torch.float32) * 0.02
    virtual = torch.randn((ctx.num_heads,), generator=generator, dtype=torch.float32) * 0.02
    return {"spatial_table": table, "virtual_distance": virtual}


def _graphormer_tensors(params: GraphormerParams, ctx: BiasContext) -> dict[str, torch.Tensor]:
    heads = ctx.num_heads
    return learned_tensors(
        params,
        {"spatial_table": (params.num_spatial, heads), "virtual_distance": (heads,)},
        lambda: graphormer_learned_init(params, ctx),
        device=ctx.device,
        dtype=compute_dtype(ctx.dtype),
        labels={"spatial_table": "[num_spatial, num_heads]", "virtual_distance": "[num_heads]"},
    )


def graphormer_prefix_bias(params: GraphormerParams, ctx: BiasContext) -> torch.Tensor:
    """The graph (virtual) token's entries: (H, 3) = [t, t, t] for graph token → node, node → graph token and
    graph token → itself. Graphormer adds t to all of row 0 (including [0, 0]) and to column 0."""
    virtual = _graphormer_tensors(params, ctx)["virtual_distance"]  # (H,)
    return virtual[:, None].expand(ctx.num_heads, 3).to(ctx.dtype)  # (H, 3)


def graphormer_cost(params: GraphormerParams, extent: Extent) -> ParamCost:
    """The seeded (num_spatial, H) table and (H,) scalars, drawn twice (the bias and the prefix entries), and per
    query-key pair the SPD gathered per query, its rows, the far mask and the index arithmetic (4 values, 6
    passes); the shortest paths themselves are the registered ``graph_work``."""
    seeded = params.spatial_table is None or params.virtual_distance is None
    return ParamCost(
        drawn=2 * (params.num_spatial + 1) * extent.heads if seeded else 0,
        elements=4 * extent.pairs + extent.queries * extent.keys // 2,
        passes=6 * extent.pairs,
        params=("num_spatial",),
    )


@register(
    "graphormer",
    axes=0,  # positions are node ids (features for tabpet)
    kind=Kind.BIAS,
    params=GraphormerParams,
    paper=GRAPHORMER_PAPER,
    learned=True,
    learned_init=graphormer_learned_init,
    param_cost=graphormer_cost,
    needs=frozenset({"graph"}),
    graph_work=shortest_paths_work,
    prefix_bias=graphormer_prefix_bias,
    conventions={
        "distance": "SPD(i → j) in hops from query node i to key node j along the edges (both directions unless "
        "graph.directed); computed by BFS from the query nodes on every call",
        "table_layout": "Graphormer's: row = SPD + 1, row 0 is padding (never read), unreachable would be SPD 510 "
        "= row 511; spatial_table is (num_spatial, num_heads) like nn.Embedding(num_spatial, H).weight",
        "far_pairs": "mask (Graphormer collator): SPD >= spatial_pos_max, unreachable included, gets -inf, so row "
        "511 is never read (spatial_pos_max <= 510); bucket (attention-gym with max_distance = spatial_pos_max "
        "- 1): far and unreachable pairs share row spatial_pos_max + 1, no -inf",
        "all_far_rows": "under 'mask' a query whose keys are all far has an all -inf row; in Graphormer the graph "
        "token column keeps it finite, so send the graph token (prefix) with cross-attention subsets",
        "graph_token": "prefix token (negative position): t on graph token -> node, node -> graph token and graph "
        "token -> itself (prefix_bias returns [t, t, t])",
        "edge_encoding": "not implemented: Graphormer's edge term (path-averaged edge-feature embeddings, "
        "multi_hop) is left out; graph.edge_features are ignored",
        "init": "spatial_table and virtual_distance N(0, 0.02^2) (Graphormer init_params), drawn in float32 on the "
        "CPU from one torch.Generator().manual_seed(seed), table first",
        "scale_placement": "added after the 1/sqrt(d) scaling, the same bias in every layer (Graphormer)",
        "size": f"num_nodes <= {MAX_GRAPH_NODES}",
    },
)
def graphormer(params: GraphormerParams, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: BiasContext) -> torch.Tensor:
    """Graphormer spatial encoding: B[h, i, j] = b[SPD(v_i, v_j) + 1, h], b (num_spatial, H) learned
    (Ying et al., NeurIPS 2021, eq. 6).

    Positions are node ids of ctx.graph. SPD is the shortest-path distance in hops (Graphormer runs
    Floyd–Warshall; BFS gives the same distances). Far pairs, SPD >= spatial_pos_max or unreachable, are −inf
    with ``far_rule='mask'`` (Graphormer's collator, a hard cut-off) or share the row spatial_pos_max + 1 with
    ``far_rule='bucket'`` (attention-gym). The graph token's per-head scalar t is the method's prefix bias.
    """
    graph = require_graph(ctx.graph, "graphormer")
    edges = checked_edges(graph)
    check_node_ids(q_pos, graph.num_nodes)
    check_node_ids(k_pos, graph.num_nodes)
    table = _graphormer_tensors(params, ctx)["spatial_table"]  # (num_spatial, H)
    adjacency = adjacency_matrix(graph, edges, symmetric=not graph.directed)  # (N, N)
    sources, query_row = torch.unique(q_pos.detach().cpu(), return_inverse=True)  # (S,), (Nq,)
    hops = hop_distances(adjacency, sources, params.spatial_pos_max - 1)  # (S, N): SPD, or −1 when far
    spd = hops[query_row][:, k_pos.detach().cpu()]  # (Nq, Nk)
    far = spd < 0  # (Nq, Nk): SPD >= spatial_pos_max or unreachable
    if params.far_rule == "mask":
        rows = torch.where(far, 0, spd + 1)  # (Nq, Nk): far pairs read the padding row, then become −inf
    else:
        rows = torch.where(far, params.spatial_pos_max, spd) + 1  # (Nq, Nk)
    bias = table.T[:, rows.to(table.device)]  # (H, Nq, Nk): gathered head-first, so no permuted copy
    if params.far_rule == "mask":
        bias.masked_fill_(far.to(bias.device)[None], float("-inf"))  # in place: a fresh gather
    return bias.to(ctx.dtype)


# ------------------------------------------------------------------------------------ graphormer_centrality
class GraphormerCentralityParams(MethodParams):
    num_degree: int = Field(
        default=512,
        ge=2,
        le=65536,
        description="rows of each degree table; row = degree + 1 (row 0 is padding), degrees past the table are "
        "clipped to its last row (Graphormer num_in_degree = num_out_degree = 512)",
    )
    in_degree_table: TensorIn | None = Field(
        default=None, description="the learned z⁻, shape (num_degree, dim); omit to draw it from seed"
    )
    out_degree_table: TensorIn | None = Field(
        default=None, description="the learned z⁺, shape (num_degree, dim); omit to draw it from seed"
    )
    seed: Seed = Field(default=0, description="seed of the initialisation of the tables not supplied")


def centrality_learned_init(params: GraphormerCentralityParams, ctx: AbsoluteContext) -> dict[str, torch.Tensor]:
    """in_degree_table then out_degree_table, each (num_degree, D) N(0, 0.02²) (Graphormer's init_params, which
    also redraws the padding row 0), in float32 on the CPU from one generator seeded with params.seed."""
    _check_seeded_size(2 * params.num_degree * ctx.dim, ("params", "num_degree"))
    generator = torch.Generator().manual_seed(params.seed)
    return {
        name: torch.randn((params.num_degree, ctx.dim), generator=generator, dtype=torch.float32) * 0.02
        for name in CENTRALITY_FIELDS
    }


def degree_rows(degree: torch.Tensor, num_degree: int) -> torch.Tensor:
    """Graphormer's embedding index degree + 1 (0 is padding), clipped to the last row: (N,) -> (N,) int64."""
    return (degree + 1).clamp(max=num_degree - 1)


def centrality_cost(params: GraphormerCentralityParams, extent: Extent) -> ParamCost:
    """The two seeded (num_degree, D) tables, drawn and scaled (2 passes), and drawn again for the other side
    (3 passes more: /v1/attention encodes q's and k's tokens), and per node the two gathered rows and their sum
    (3·D values) and the (N, N) adjacency."""
    seeded = params.in_degree_table is None or params.out_degree_table is None
    table = 2 * params.num_degree * extent.width
    nodes = max(extent.queries, extent.keys)
    return ParamCost(
        drawn=table if seeded else 0,
        elements=3 * nodes * extent.width + nodes * nodes // 4,
        passes=5 * table if seeded else 0,
        params=("num_degree",),
    )


@register(
    "graphormer_centrality",
    axes=0,  # positions are node ids (features for tabpet)
    kind=Kind.ABSOLUTE,
    params=GraphormerCentralityParams,
    paper=GRAPHORMER_PAPER,
    learned=True,
    learned_init=centrality_learned_init,
    param_cost=centrality_cost,
    needs=frozenset({"graph"}),
    graph_work=degrees_work,
    conventions={
        "degree": "the number of distinct neighbours in the binary adjacency (a self-loop counts once); "
        "undirected: in-degree = out-degree = degree, so the encoding is z_in[deg + 1] + z_out[deg + 1]; "
        "directed: in = edges (u, i), out = edges (i, v) (Graphormer's datasets are undirected and set out = in)",
        "index": "row = degree + 1, row 0 is padding (Graphormer's collator adds 1)",
        "clipping": "a degree >= num_degree - 1 reads the last row; Graphormer never clips (it would index past "
        "the table)",
        "graph_token": "no encoding of its own: a prefix token gets zeros (Graphormer's graph token embedding "
        "belongs to the model)",
        "init": "both tables N(0, 0.02^2) (Graphormer init_params), in float32 on the CPU from one "
        "torch.Generator().manual_seed(seed), in_degree_table first",
        "size": f"num_nodes <= {MAX_GRAPH_NODES}",
    },
)
def graphormer_centrality(params: GraphormerCentralityParams, ctx: AbsoluteContext) -> torch.Tensor:
    """Graphormer centrality encoding: h_i = z⁻[deg⁻(v_i) + 1] + z⁺[deg⁺(v_i) + 1], z± (num_degree, D) learned
    (Ying et al., NeurIPS 2021, eq. 5), added to the node features.

    Returns the (num_nodes, D) table with ctx.grid = (num_nodes,); degrees past the table are clipped.
    """
    graph = require_graph(ctx.graph, "graphormer_centrality")
    edges = checked_edges(graph)
    if ctx.grid != (graph.num_nodes,):
        raise InvalidInput(
            ("grid",), f"graphormer_centrality encodes the graph's {graph.num_nodes} nodes; got grid {list(ctx.grid)}"
        )
    expected = (params.num_degree, ctx.dim)
    tables = learned_tensors(
        params,
        dict.fromkeys(CENTRALITY_FIELDS, expected),
        lambda: centrality_learned_init(params, ctx),
        device=ctx.device,
        dtype=compute_dtype(ctx.dtype),
        labels=dict.fromkeys(CENTRALITY_FIELDS, "[num_degree, dim]"),
    )
    adjacency = adjacency_matrix(graph, edges, symmetric=not graph.directed)  # (N, N) bool
    in_rows = degree_rows(adjacency.sum(dim=0), params.num_degree).to(ctx.device)  # (N,) int64: edges (u, i)
    out_rows = degree_rows(adjacency.sum(dim=1), params.num_degree).to(ctx.device)  # (N,) int64: edges (i, v)
    encoded = tables["in_degree_table"][in_rows] + tables["out_degree_table"][out_rows]  # (N, D)
    return encoded.to(ctx.dtype)


# -------------------------------------------------------------------------------------------- laplacian_pe
class LaplacianParams(MethodParams):
    variant: Literal["gnn", "tabpet"] = Field(
        default="gnn",
        description="gnn: the first dim non-trivial eigenvectors over the nodes of ctx.graph (benchmarking-gnns); "
        "tabpet: k_first smallest and k_first largest over the features of 'data' (Tab-PET)",
    )
    data: TensorIn | None = Field(
        default=None,
        description="tabpet only: the table (rows, features) whose Spearman correlations make the feature graph",
    )
    k_first: int | None = Field(
        default=None,
        ge=TABPET_MIN_K,
        le=TABPET_MAX_K,
        description="tabpet only: eigenvectors taken from each end (dim = 2·k_first); None: Tab-PET's automatic "
        "choice (eigenvalue window 1 ± 0.25 with gap analysis)",
    )
    alpha: float = Field(
        default=1.0, ge=0, description="tabpet only: the z-scored PE is multiplied by alpha (Tab-PET sweeps 0 … 10)"
    )

    @model_validator(mode="after")
    def _fields_of_the_variant(self) -> LaplacianParams:
        if self.variant == "tabpet" and self.data is None:
            raise ValueError("variant='tabpet' needs 'data' (rows, features)")
        if self.variant == "gnn":
            extra = [name for name in ("data", "k_first", "alpha") if name in self.model_fields_set]
            if extra:
                raise ValueError(f"{extra} apply to variant='tabpet' only")
        return self


def spearman_correlation(data: torch.Tensor) -> torch.Tensor:
    """Spearman's ρ between the columns of ``data`` (rows, F) float64: (F, F), zero diagonal.

    Each column is ranked (1-based, ties get the average of their ranks, scipy's rankdata 'average'), then
    Pearson's correlation of the ranks is taken. A constant column correlates 0 with every other (scipy: NaN).
    """
    rows = data.shape[0]
    ordered, order = torch.sort(data, dim=0, stable=True)  # (rows, F) each
    index = torch.arange(rows)[:, None].expand_as(ordered)  # (rows, F)
    starts_run = torch.ones_like(ordered, dtype=torch.bool)  # (rows, F)
    starts_run[1:] = ordered[1:] != ordered[:-1]
    ends_run = torch.ones_like(ordered, dtype=torch.bool)  # (rows, F)
    ends_run[:-1] = ordered[1:] != ordered[:-1]
    run_start = torch.where(starts_run, index, 0).cummax(dim=0).values  # (rows, F)
    run_end = torch.where(ends_run, index, rows).flip(0).cummin(dim=0).values.flip(0)  # (rows, F)
    average = (run_start + run_end).to(torch.float64) / 2.0 + 1.0  # (rows, F): mean 1-based rank of the run
    ranks = torch.empty_like(average).scatter_(0, order, average)  # (rows, F): back in row order
    centred = ranks - ranks.mean(dim=0, keepdim=True)  # (rows, F)
    covariance = centred.T @ centred  # (F, F)
    spread = covariance.diagonal().sqrt()  # (F,)
    scale = spread[:, None] * spread[None, :]  # (F, F)
    correlation = torch.where(scale > 0, covariance / torch.where(scale > 0, scale, 1.0), 0.0)  # (F, F)
    return correlation.fill_diagonal_(0.0)


def tabpet_automatic_k(eigenvalues: torch.Tensor) -> int:
    """Tab-PET's ``automatic_k_selection`` from the ascending eigenvalues (N,) of L.

    low = the eigenvalues after the first that are <= 1 − 0.25. With more than three, the gaps between them
    are scanned and the count is cut before the first gap > max(10·median gap, 0.5) (numpy's median: the mean
    of the two middle gaps for an even count). k_first = clip(count, 2, 10); k_last = k_first. Tab-PET's
    high-band count is computed there but never used, so it is left out here.
    """
    rest = eigenvalues[1:]  # (N − 1,)
    low = rest[rest <= 1.0 - TABPET_WINDOW]  # (M,)
    count = int(low.shape[0])
    if count > 3:
        gaps = low[1:] - low[:-1]  # (M − 1,)
        ordered = gaps.sort().values  # (M − 1,)
        middle = ordered.shape[0] // 2
        median = float(ordered[middle]) if ordered.shape[0] % 2 else float(ordered[middle - 1 : middle + 1].mean())
        significant = (gaps > max(10.0 * median, 0.5)).nonzero()  # (G, 1)
        if significant.shape[0]:
            count = int(significant[0, 0]) + 1
    return max(TABPET_MIN_K, min(count, TABPET_MAX_K))


def _laplacian_gnn(ctx: AbsoluteContext) -> torch.Tensor:
    graph = ctx.graph
    if graph is None:
        raise InvalidInput(("graph",), "laplacian_pe with variant='gnn' needs a graph")
    edges = checked_edges(graph, MAX_EIGEN_NODES)
    nodes = graph.num_nodes
    if ctx.grid != (nodes,):
        raise InvalidInput(("grid",), f"laplacian_pe encodes the graph's {nodes} nodes; got grid {list(ctx.grid)}")
    adjacency = adjacency_matrix(graph, edges, symmetric=True).to(torch.float64)  # (N, N)
    degree = adjacency.sum(dim=1).clamp(min=1.0)  # (N,): an isolated node keeps L_ii = 1
    _, vectors = torch.linalg.eigh(normalized_laplacian(adjacency, degree))  # (N, N), eigenvalues ascending
    chosen = fix_signs(vectors[:, 1 : ctx.dim + 1])  # (N, min(k, N − 1)): the trivial eigenvector skipped
    return pad_columns(chosen, ctx.dim).to(device=ctx.device, dtype=ctx.dtype)  # (N, k)


def _tabpet_data(params: LaplacianParams) -> torch.Tensor:
    """params.data as (rows, F) float64 on the CPU; InvalidInput at ("params", "data") otherwise."""
    if params.data is None:  # the params model already refuses this
        raise InvalidInput(("params", "data"), "variant='tabpet' needs data (rows, features)")
    data = to_torch(params.data, ("params", "data"))
    if data.dim() != 2 or data.shape[0] < 2 or data.shape[1] < 2:
        raise InvalidInput(
            ("params", "data"), f"expected a table [rows, features] with at least 2 of each, got {list(data.shape)}"
        )
    if data.shape[1] > MAX_EIGEN_NODES:
        raise InvalidInput(
            ("params", "data"), f"{data.shape[1]} features is over the limit of {MAX_EIGEN_NODES} (the graph's nodes)"
        )
    return data.detach().to(device="cpu", dtype=torch.float64)


def _laplacian_tabpet(params: LaplacianParams, ctx: AbsoluteContext) -> torch.Tensor:
    data = _tabpet_data(params)
    features = data.shape[1]
    if ctx.grid != (features,):
        raise InvalidInput(
            ("grid",), f"tabpet encodes the {features} features (columns) of data; got grid {list(ctx.grid)}"
        )
    weights = spearman_correlation(data).abs()  # (F, F): A = |W|
    adjacency = torch.maximum(weights, weights.T)  # (F, F): max(A, Aᵀ)
    degree = adjacency.sum(dim=1)  # (F,)
    degree = torch.where(degree == 0, 1.0, degree)  # (F,): Tab-PET sets a zero degree to 1 (only that)
    eigenvalues, vectors = torch.linalg.eigh(normalized_laplacian(adjacency, degree))  # (F,), (F, F) ascending
    k = params.k_first if params.k_first is not None else tabpet_automatic_k(eigenvalues)
    if ctx.dim != 2 * k:
        chosen = "" if params.k_first is not None else " (chosen automatically)"
        raise InvalidInput(
            ("dim",), f"tabpet gives 2·k_first = {2 * k} columns (k_first = {k}{chosen}); got dim {ctx.dim}"
        )
    smallest = pad_columns(vectors[:, 1 : k + 1], k)  # (F, k): after the trivial one
    largest = pad_columns(vectors[:, max(features - k, 0) :], k)  # (F, k)
    encoding = fix_signs(torch.cat((smallest, largest), dim=1)).to(compute_dtype(ctx.dtype))  # (F, 2k)
    mean = encoding.mean(dim=0, keepdim=True)  # (1, 2k)
    spread = encoding.std(dim=0, keepdim=True)  # (1, 2k): unbiased, as torch.std in Tab-PET
    spread = torch.where(spread == 0, 1.0, spread)  # (1, 2k)
    return ((encoding - mean) / spread * params.alpha).to(device=ctx.device, dtype=ctx.dtype)  # (F, 2k)


def laplacian_cost(params: LaplacianParams, extent: Extent) -> ParamCost:
    """The dense Laplacian and its eigenvectors: about 6 (N, N) float64 matrices (adjacency, scale, identity, L,
    eigenvectors, eigh's workspace), N the nodes (gnn; the eigenproblem's work is the registered ``graph_work``)
    or the F features of ``data`` (tabpet, which has no graph: its eigenproblem, 2·F³ work units as
    ``spectrum_work``, ranking the (rows, F) table, about 12 values and 20 passes per entry, and the rows·F²
    covariance are counted here)."""
    if params.variant == "gnn" or params.data is None:
        nodes = max(extent.queries, extent.keys)
        return ParamCost(elements=6 * nodes * nodes)
    rows, features = [*params.data.shape, 1, 1][:2]
    entries = rows * features
    return ParamCost(
        elements=12 * entries + 6 * features * features,
        passes=20 * entries,
        macs=2 * entries * features + 16 * features**3,
        params=("data",),
    )


@register(
    "laplacian_pe",
    axes=0,  # positions are node ids (features for tabpet)
    kind=Kind.ABSOLUTE,
    params=LaplacianParams,
    paper=LAPPE_PAPER,
    graph_work=spectrum_work,
    param_cost=laplacian_cost,
    conventions={
        "laplacian": "L = I - D^-1/2 A D^-1/2; gnn: A binary over the undirected graph (direction ignored), degrees "
        "clipped to >= 1 so an isolated node has L_ii = 1 (networkx: 0); tabpet: A = max(|W|, |W|^T) weighted, a "
        "zero degree set to 1",
        "eigensolver": "torch.linalg.eigh in float64 on the CPU (the same result on every device), eigenvalues "
        "ascending; the first (trivial) eigenvector is skipped even when the graph is disconnected",
        "sign": "each column is flipped so that its first entry with |v| > 1e-6 is positive (neither reference "
        "fixes signs; benchmarking-gnns flips them at random in training, which belongs to the model)",
        "repeated_eigenvalues": "a basis of a repeated eigenvalue's eigenspace is whatever eigh returns: only the "
        "projector onto the eigenspace (sum of v v^T over the tied columns) is determined, and only when k does "
        "not cut through the tie",
        "gnn_padding": "k = dim columns; with num_nodes <= k the missing columns are zeros (benchmarking-gnns)",
        "tabpet_graph": "W = Spearman correlation of data's columns (average ranks for ties), zero diagonal; a "
        "constant column correlates 0 (scipy: NaN); 2 features give the 2x2 matrix (Tab-PET's spearmanr "
        "scalar becomes a 1x1 zero)",
        "tabpet_columns": "[k_first smallest after the trivial one | k_last = k_first largest], each block "
        "zero-padded to k when features <= k (Tab-PET would return fewer columns); dim must be 2·k_first",
        "tabpet_k": "k_first=None: Tab-PET's automatic_k_selection (low band <= 0.75 after the first eigenvalue, "
        "cut at the first gap > max(10·median, 0.5), clipped to 2..10) on eigh's eigenvalues (Tab-PET sorts "
        "np.linalg.eigvals; equal up to rounding)",
        "tabpet_scaling": "z-score per column with the unbiased std (std 0 -> 1) in float32 (float64 for float64 "
        "requests), then times alpha; Tab-PET concatenates alpha·PE to the feature tokens, here it is returned",
        "graph_token": "no encoding of its own: a prefix token gets zeros",
        "size": f"num_nodes (gnn) or features (tabpet) <= {MAX_EIGEN_NODES}: a dense O(N^3) eigendecomposition",
    },
)
def laplacian_pe(params: LaplacianParams, ctx: AbsoluteContext) -> torch.Tensor:
    """Laplacian eigenvector PE: the eigenvectors of L = I − D^−1/2 A D^−1/2, eigenvalues ascending
    (Dwivedi et al., benchmarking-gnns; Tab-PET, Leng et al., AAAI 2026).

    gnn: PE = eigvecs[:, 1 : k + 1] over the nodes of ctx.graph, k = dim, zero-padded when num_nodes <= k;
    output (num_nodes, k). tabpet: the nodes are the features of ``data`` and A = max(|W|, |W|ᵀ) with W their
    Spearman correlations; PE = [eigvecs[:, 1 : k + 1] | eigvecs[:, −k:]], k = k_first, each column z-scored and
    times alpha; output (features, 2k). Signs are fixed (first entry above 1e-6 in magnitude positive); fixed,
    not learned.
    """
    if params.variant == "gnn":
        return _laplacian_gnn(ctx)
    return _laplacian_tabpet(params, ctx)
