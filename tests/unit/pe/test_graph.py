"""Graph methods (posenc.pe.graph): Graphormer's spatial bias and centrality encoding, Laplacian eigenvector PE.

References written here from the formulas: shortest paths by a per-source BFS over Python adjacency lists,
degrees by counting, the GNN Laplacian with numpy's dense eigh, and Tab-PET entirely in Python floats (average
ranks, Pearson, a cyclic Jacobi eigensolver, unbiased z-score). Hand-computed golden values T19; the
far/unreachable rules of both far_rule values; the graph token's prefix bias; sign determinism, relabelling
and the projector of a repeated eigenvalue; zero padding; errors with their locations; gradients to the tables.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from typing import Any

import numpy as np
import pydantic
import pytest
import torch

import posenc.pe.graph
from posenc.errors import InvalidInput
from posenc.pe import AbsoluteContext, BiasContext, bias_dense, encoding, get_method
from posenc.pe.graph import (
    MAX_EIGEN_NODES,
    MAX_GRAPH_NODES,
    SIGN_TOLERANCE,
    GraphormerCentralityParams,
    GraphormerParams,
    adjacency_matrix,
    centrality_learned_init,
    graphormer_learned_init,
    hop_distances,
    normalized_laplacian,
    spearman_correlation,
    tabpet_automatic_k,
)
from posenc.pe.types import Graph
from posenc.schemas.methods import Kind

GRAPHORMER = get_method("graphormer")
CENTRALITY = get_method("graphormer_centrality")
LAPLACIAN = get_method("laplacian_pe")
F64 = torch.float64


def make_graph(num_nodes: int, edges: list[tuple[int, int]], directed: bool = False) -> Graph:
    tensor = torch.tensor(edges, dtype=torch.int64).reshape(-1, 2)
    return Graph(num_nodes=num_nodes, edges=tensor, directed=directed)


def path_edges(n: int) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(n - 1)]


def as_wire(tensor: torch.Tensor) -> dict[str, Any]:
    return {"dtype": "float64", "shape": list(tensor.shape), "data": tensor.reshape(-1).tolist()}


def neighbours(num_nodes: int, edges: list[tuple[int, int]], directed: bool) -> list[set[int]]:
    adj: list[set[int]] = [set() for _ in range(num_nodes)]
    for u, v in edges:
        adj[u].add(v)
        if not directed:
            adj[v].add(u)
    return adj


def ref_spd(num_nodes: int, edges: list[tuple[int, int]], directed: bool = False) -> list[list[int | None]]:
    """All-pairs hop distances by one BFS per source; None for unreachable."""
    adj = neighbours(num_nodes, edges, directed)
    out: list[list[int | None]] = []
    for source in range(num_nodes):
        dist: list[int | None] = [None] * num_nodes
        dist[source] = 0
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for v in adj[u]:
                if dist[v] is None:
                    dist[v] = dist[u] + 1  # type: ignore[operator]
                    queue.append(v)
        out.append(dist)
    return out


def random_graph(num_nodes: int, num_edges: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(num_nodes), rng.randrange(num_nodes)) for _ in range(num_edges)]


# ================================================================================================ registry
def test_registration() -> None:
    assert GRAPHORMER.kind is Kind.BIAS
    assert GRAPHORMER.learned
    assert GRAPHORMER.needs == frozenset({"graph"})
    assert GRAPHORMER.prefix_bias is not None
    assert not GRAPHORMER.toeplitz
    assert GRAPHORMER.axes == 0  # positions are node ids
    assert CENTRALITY.kind is Kind.ABSOLUTE
    assert CENTRALITY.learned
    assert CENTRALITY.needs == frozenset({"graph"})
    assert LAPLACIAN.kind is Kind.ABSOLUTE
    assert not LAPLACIAN.learned
    assert LAPLACIAN.needs == frozenset()
    for spec in (GRAPHORMER, CENTRALITY, LAPLACIAN):
        assert spec.family == "graph"
        assert spec.conventions
    assert "not implemented" in GRAPHORMER.conventions["edge_encoding"]


# ============================================================================================== graphormer
def bias_ctx(graph: Graph | None, q_len: int, k_len: int, heads: int = 2, dtype: torch.dtype = F64) -> BiasContext:
    return BiasContext(num_heads=heads, query_length=q_len, key_length=k_len, causal=False, dtype=dtype, graph=graph)


def graphormer_bias(
    graph: Graph,
    q_pos: list[int] | None = None,
    k_pos: list[int] | None = None,
    heads: int = 2,
    dtype: torch.dtype = F64,
    **params: Any,
) -> torch.Tensor:
    q = torch.tensor(q_pos if q_pos is not None else list(range(graph.num_nodes)), dtype=torch.int64)
    k = torch.tensor(k_pos if k_pos is not None else list(range(graph.num_nodes)), dtype=torch.int64)
    parsed = GRAPHORMER.parse_params(params)
    return bias_dense(GRAPHORMER, parsed, bias_ctx(graph, q.shape[0], k.shape[0], heads, dtype), q, k)


def random_table(rows: int, width: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, width, generator=torch.Generator().manual_seed(seed), dtype=F64)


def test_t19_spatial_index_on_p4() -> None:
    row_ids = torch.arange(512, dtype=F64)[:, None]  # (512, 1): row r holds the value r
    bias = graphormer_bias(make_graph(4, path_edges(4)), heads=1, spatial_table=as_wire(row_ids))
    assert bias[0].tolist() == [[1, 2, 3, 4], [2, 1, 2, 3], [3, 2, 1, 2], [4, 3, 2, 1]]


def test_path_graph_bias_is_the_table_at_the_hop_distance() -> None:
    n, heads = 9, 3
    table = random_table(512, heads, seed=1)
    bias = graphormer_bias(make_graph(n, path_edges(n)), heads=heads, spatial_table=as_wire(table))
    for h in range(heads):
        for i in range(n):
            for j in range(n):
                assert bias[h, i, j].item() == table[abs(i - j) + 1, h].item()


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("far_rule", ["mask", "bucket"])
def test_random_graph_matches_bfs_reference(directed: bool, far_rule: str) -> None:
    n, heads, spm = 14, 2, 3
    # a chain 0 → … → 9 with random chords; 10, 13 isolated; 11-12 a second component with a self-loop
    edges = [*path_edges(10), *random_graph(10, 3, seed=3), (11, 12), (12, 12)]
    table = random_table(16, heads, seed=4)
    q_pos, k_pos = [5, 0, 13, 5, 11, 2], [12, 3, 3, 0, 9, 10, 13, 1]  # unordered, repeated, a subset
    bias = graphormer_bias(
        make_graph(n, edges, directed),
        q_pos,
        k_pos,
        heads=heads,
        num_spatial=16,
        spatial_pos_max=spm,
        far_rule=far_rule,
        spatial_table=as_wire(table),
    )
    spd = ref_spd(n, edges, directed)
    seen = {"near": 0, "far": 0, "unreachable": 0}
    for a, i in enumerate(q_pos):
        for b, j in enumerate(k_pos):
            d = spd[i][j]
            far = d is None or d >= spm
            seen["unreachable" if d is None else "far" if far else "near"] += 1
            for h in range(heads):
                got = bias[h, a, b].item()
                if far and far_rule == "mask":
                    assert got == -math.inf, (i, j, d)
                elif far:
                    assert got == table[spm + 1, h].item(), (i, j, d)  # the shared far bucket
                else:
                    assert got == table[d + 1, h].item(), (i, j, d)  # type: ignore[operator]
    assert all(seen.values()), seen


def test_default_cut_off_is_spd_20() -> None:
    n = 25
    table = random_table(512, 1, seed=5)
    bias = graphormer_bias(make_graph(n, path_edges(n)), heads=1, spatial_table=as_wire(table))[0]
    assert bias[0, 19].item() == table[20, 0].item()
    assert bias[0, 20].item() == -math.inf
    assert bias[3, 24].item() == -math.inf
    bucket = graphormer_bias(make_graph(n, path_edges(n)), heads=1, spatial_table=as_wire(table), far_rule="bucket")[0]
    assert bucket[0, 20].item() == bucket[0, 24].item() == table[21, 0].item()  # attention-gym: min(SPD, 20)


def test_unreachable_pairs_masked_or_far_bucket() -> None:
    graph = make_graph(3, [(0, 1)])  # node 2 isolated
    table = random_table(512, 1, seed=6)
    masked = graphormer_bias(graph, heads=1, spatial_table=as_wire(table))[0]
    assert masked[0, 2].item() == masked[2, 1].item() == -math.inf
    assert masked[2, 2].item() == table[1, 0].item()  # SPD 0 to itself
    bucket = graphormer_bias(graph, heads=1, spatial_table=as_wire(table), far_rule="bucket", spatial_pos_max=5)[0]
    assert bucket[0, 2].item() == bucket[2, 0].item() == table[6, 0].item()  # unreachable shares the far bucket
    assert not torch.isinf(bucket).any()


def test_directed_distances_follow_the_edges() -> None:
    table = random_table(512, 1, seed=7)
    bias = graphormer_bias(make_graph(3, [(0, 1), (1, 2)], directed=True), heads=1, spatial_table=as_wire(table))[0]
    assert bias[0, 2].item() == table[3, 0].item()  # 0 → 1 → 2
    assert bias[2, 0].item() == -math.inf  # no path back


def test_prefix_bias_is_t_three_times() -> None:
    t = torch.tensor([0.5, -1.25, 3.0], dtype=F64)
    params = GRAPHORMER.parse_params({"virtual_distance": as_wire(t)})
    assert GRAPHORMER.prefix_bias is not None
    values = GRAPHORMER.prefix_bias(params, bias_ctx(make_graph(2, [(0, 1)]), 2, 2, heads=3))
    assert values.shape == (3, 3)
    assert torch.equal(values, t[:, None].expand(3, 3))


def test_seeded_init_is_normal_002_and_reproducible() -> None:
    params = GraphormerParams(seed=11)
    ctx = bias_ctx(make_graph(2, [(0, 1)]), 2, 2, heads=4)
    first, again = graphormer_learned_init(params, ctx), graphormer_learned_init(params, ctx)
    assert first["spatial_table"].shape == (512, 4)
    assert first["virtual_distance"].shape == (4,)
    assert torch.equal(first["spatial_table"], again["spatial_table"])
    assert abs(first["spatial_table"].std().item() - 0.02) < 0.002
    other = graphormer_learned_init(GraphormerParams(seed=12), ctx)
    assert not torch.equal(first["spatial_table"], other["spatial_table"])
    # the seeded bias is the bias of the initial table, and the seeded t that of the initial virtual_distance
    seeded = graphormer_bias(make_graph(2, [(0, 1)]), heads=4, seed=11)
    supplied = graphormer_bias(make_graph(2, [(0, 1)]), heads=4, spatial_table=as_wire(first["spatial_table"]))
    torch.testing.assert_close(seeded, supplied)
    assert GRAPHORMER.prefix_bias is not None
    prefix = GRAPHORMER.prefix_bias(params, ctx)
    assert torch.equal(prefix[:, 2], first["virtual_distance"].to(F64))


def test_float32_bias_is_the_float64_one_rounded() -> None:
    graph = make_graph(6, random_graph(6, 7, seed=8))
    high = graphormer_bias(graph, seed=3, far_rule="bucket")
    low = graphormer_bias(graph, seed=3, far_rule="bucket", dtype=torch.float32)
    assert low.dtype == torch.float32
    assert torch.equal(low, high.to(torch.float32))


def test_gradients_reach_the_spatial_table_and_t() -> None:
    n, heads = 4, 2
    table = random_table(8, heads, seed=9).requires_grad_(True)
    t = torch.zeros(heads, dtype=F64, requires_grad=True)
    params = GRAPHORMER.parse_params({"num_spatial": 8, "spatial_pos_max": 3}).model_copy(
        update={"spatial_table": table, "virtual_distance": t}
    )
    graph = make_graph(n, path_edges(n))
    q = torch.arange(n)
    bias = bias_dense(GRAPHORMER, params, bias_ctx(graph, n, n, heads), q, q)
    (table_grad,) = torch.autograd.grad(bias.masked_fill(torch.isinf(bias), 0.0).sum(), [table])
    # P4 hop counts: SPD 0 ×4 (row 1), 1 ×6 (row 2), 2 ×4 (row 3); SPD 3 is masked (spatial_pos_max 3)
    expected = torch.zeros(8, heads, dtype=F64)
    expected[1], expected[2], expected[3] = 4.0, 6.0, 4.0
    assert torch.equal(table_grad, expected)
    assert GRAPHORMER.prefix_bias is not None
    (t_grad,) = torch.autograd.grad(GRAPHORMER.prefix_bias(params, bias_ctx(graph, n, n, heads)).sum(), [t])
    assert torch.equal(t_grad, torch.full((heads,), 3.0, dtype=F64))


def test_graphormer_errors() -> None:
    graph = make_graph(4, [(0, 1), (1, 7)])
    with pytest.raises(InvalidInput, match="node id 7, num_nodes 4") as bad_edge:
        graphormer_bias(graph)
    assert bad_edge.value.loc == ("graph", "edges")
    with pytest.raises(InvalidInput) as negative:
        graphormer_bias(make_graph(4, [(-1, 2)]))
    assert negative.value.loc == ("graph", "edges")
    with pytest.raises(InvalidInput) as shape:
        graphormer_bias(Graph(num_nodes=3, edges=torch.tensor([0, 1, 2])))
    assert shape.value.loc == ("graph", "edges")
    with pytest.raises(InvalidInput) as floats:
        graphormer_bias(Graph(num_nodes=3, edges=torch.tensor([[0.0, 1.0]])))
    assert floats.value.loc == ("graph", "edges")
    with pytest.raises(InvalidInput, match=str(MAX_GRAPH_NODES)) as big:
        graphormer_bias(make_graph(MAX_GRAPH_NODES + 1, [(0, 1)]), q_pos=[0], k_pos=[0])
    assert big.value.loc == ("graph", "num_nodes")
    with pytest.raises(InvalidInput, match="node id 5") as position:
        graphormer_bias(make_graph(4, path_edges(4)), q_pos=[0, 1], k_pos=[2, 5])
    assert position.value.loc == ("positions",)
    params = GRAPHORMER.parse_params({})
    with pytest.raises(InvalidInput) as no_graph:
        bias_dense(GRAPHORMER, params, bias_ctx(None, 2, 2), torch.arange(2), torch.arange(2))
    assert no_graph.value.loc == ("graph",)
    with pytest.raises(InvalidInput) as table_shape:
        graphormer_bias(make_graph(2, [(0, 1)]), heads=2, spatial_table=as_wire(torch.zeros(512, 3)))
    assert table_shape.value.loc == ("params", "spatial_table", "shape")
    with pytest.raises(InvalidInput) as t_shape:
        graphormer_bias(make_graph(2, [(0, 1)]), heads=2, virtual_distance=as_wire(torch.zeros(3)))
    assert t_shape.value.loc == ("params", "virtual_distance", "shape")


@pytest.mark.parametrize(
    "raw",
    [
        {"num_spatial": 20, "spatial_pos_max": 20},  # mask reads rows 0 … 20
        {"num_spatial": 21, "spatial_pos_max": 20, "far_rule": "bucket"},  # bucket reads row 21
        {"spatial_pos_max": 511},  # beyond Graphormer's unreachable SPD 510
        {"spatial_pos_max": 0},
        {"far_rule": "clip"},
    ],
)
def test_graphormer_params_are_validated(raw: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        GRAPHORMER.parse_params(raw)


@pytest.mark.parametrize("budget", [None, 40])
@pytest.mark.parametrize("directed", [False, True])
def test_hop_distances_both_expansions_and_chunks(
    budget: int | None, directed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge-by-edge and the sparse-product expansions, in one chunk or many, give the BFS distances."""
    if budget is not None:
        monkeypatch.setattr(posenc.pe.graph, "BFS_CANDIDATE_BUDGET", budget)
    products = []
    sparse_mm = torch.sparse.mm

    def counting_mm(*args: Any) -> torch.Tensor:
        products.append(1)
        result: torch.Tensor = sparse_mm(*args)
        return result

    monkeypatch.setattr(torch.sparse, "mm", counting_mm)
    n = 30
    edges = [*random_graph(24, 70, seed=12), *path_edges(6), (26, 27), (27, 28), (28, 29)]  # 24, 25 isolated
    graph = make_graph(n, edges, directed)
    adjacency = adjacency_matrix(graph, graph.edges, symmetric=not directed)
    sources = torch.tensor([3, 0, 29, 3, 24, 26, 11, 5])
    spd = ref_spd(n, edges, directed)
    for max_hops in (0, 1, 2, 40):
        got = hop_distances(adjacency, sources, max_hops)
        assert got.shape == (8, n)
        for row, s in enumerate(sources.tolist()):
            want = [d if d is not None and d <= max_hops else -1 for d in spd[s]]
            assert got[row].tolist() == want, (s, max_hops)
    assert products, "the dense-frontier branch ran"


def test_edge_order_and_duplicates_do_not_matter() -> None:
    edges = random_graph(8, 12, seed=10)
    shuffled = [(v, u) for u, v in reversed(edges)] + edges[:3]
    a = graphormer_bias(make_graph(8, edges), seed=1, spatial_pos_max=4)
    b = graphormer_bias(make_graph(8, shuffled), seed=1, spatial_pos_max=4)
    assert torch.equal(a, b)


# =================================================================================== graphormer_centrality
def centrality(graph: Graph, dim: int, dtype: torch.dtype = F64, **params: Any) -> torch.Tensor:
    ctx = AbsoluteContext(grid=(graph.num_nodes,), dim=dim, dtype=dtype, graph=graph)
    return encoding(CENTRALITY, CENTRALITY.parse_params(params), ctx)


def ref_degrees(num_nodes: int, edges: list[tuple[int, int]], directed: bool) -> tuple[list[int], list[int]]:
    """(in, out) degrees: distinct neighbours, a self-loop once; undirected: both equal the degree."""
    pairs = {(u, v) for u, v in edges}
    if not directed:
        pairs |= {(v, u) for u, v in edges}
    in_deg = [sum(1 for u, v in pairs if v == i) for i in range(num_nodes)]
    out_deg = [sum(1 for u, v in pairs if u == i) for i in range(num_nodes)]
    return in_deg, out_deg


@pytest.mark.parametrize("directed", [False, True])
def test_centrality_indexes_degree_plus_one(directed: bool) -> None:
    n, dim, rows = 7, 3, 16
    edges = [(0, 1), (0, 2), (0, 3), (1, 0), (4, 4), (2, 3), (2, 3), (5, 0)]  # duplicates, a self-loop; 6 isolated
    z_in, z_out = random_table(rows, dim, 1), random_table(rows, dim, 2)
    got = centrality(
        make_graph(n, edges, directed),
        dim,
        num_degree=rows,
        in_degree_table=as_wire(z_in),
        out_degree_table=as_wire(z_out),
    )
    in_deg, out_deg = ref_degrees(n, edges, directed)
    assert in_deg[6] == out_deg[6] == 0
    for i in range(n):
        torch.testing.assert_close(got[i], z_in[in_deg[i] + 1] + z_out[out_deg[i] + 1], rtol=0, atol=0)
    if not directed:
        assert in_deg == out_deg


def test_centrality_clips_degrees_to_the_table() -> None:
    star = make_graph(6, [(0, i) for i in range(1, 6)])  # centre degree 5, leaves 1
    z_in, z_out = random_table(4, 2, 3), random_table(4, 2, 4)
    got = centrality(star, 2, num_degree=4, in_degree_table=as_wire(z_in), out_degree_table=as_wire(z_out))
    assert torch.equal(got[0], z_in[3] + z_out[3])  # degree 5 + 1 = 6 clipped to the last row 3
    assert torch.equal(got[1], z_in[2] + z_out[2])


def test_centrality_gradients_reach_both_tables() -> None:
    z_in = random_table(8, 2, 5).requires_grad_(True)
    z_out = random_table(8, 2, 6).requires_grad_(True)
    graph = make_graph(4, path_edges(4))  # degrees 1, 2, 2, 1
    params = CENTRALITY.parse_params({"num_degree": 8}).model_copy(
        update={"in_degree_table": z_in, "out_degree_table": z_out}
    )
    total = encoding(CENTRALITY, params, AbsoluteContext(grid=(4,), dim=2, dtype=F64, graph=graph)).sum()
    in_grad, out_grad = torch.autograd.grad(total, [z_in, z_out])
    expected = torch.zeros(8, 2, dtype=F64)
    expected[2], expected[3] = 2.0, 2.0  # rows degree + 1
    assert torch.equal(in_grad, expected)
    assert torch.equal(out_grad, expected)


def test_centrality_seeded_init() -> None:
    graph = make_graph(5, path_edges(5))
    init = centrality_learned_init(GraphormerCentralityParams(seed=4), AbsoluteContext(grid=(5,), dim=6, graph=graph))
    assert init["in_degree_table"].shape == init["out_degree_table"].shape == (512, 6)
    assert not torch.equal(init["in_degree_table"], init["out_degree_table"])
    seeded = centrality(graph, 6, seed=4)
    supplied = centrality(
        graph,
        6,
        in_degree_table=as_wire(init["in_degree_table"].double()),
        out_degree_table=as_wire(init["out_degree_table"].double()),
    )
    torch.testing.assert_close(seeded, supplied)
    float32 = centrality(graph, 6, dtype=torch.float32, seed=4)
    assert float32.dtype == torch.float32
    assert torch.equal(float32, seeded.float())


def test_centrality_errors() -> None:
    graph = make_graph(4, path_edges(4))
    params = CENTRALITY.parse_params({})
    with pytest.raises(InvalidInput) as grid:
        encoding(CENTRALITY, params, AbsoluteContext(grid=(5,), dim=2, graph=graph))
    assert grid.value.loc == ("grid",)
    with pytest.raises(InvalidInput) as no_graph:
        encoding(CENTRALITY, params, AbsoluteContext(grid=(4,), dim=2))
    assert no_graph.value.loc == ("graph",)
    with pytest.raises(InvalidInput, match="node id 4, num_nodes 4") as edge:
        centrality(make_graph(4, [(4, 0)]), 2)
    assert edge.value.loc == ("graph", "edges")
    with pytest.raises(InvalidInput) as shape:
        centrality(graph, 2, in_degree_table=as_wire(torch.zeros(512, 3)))
    assert shape.value.loc == ("params", "in_degree_table", "shape")
    with pytest.raises(InvalidInput) as big:
        centrality(graph, 2**16, num_degree=65536)
    assert big.value.loc == ("params", "num_degree")


# ============================================================================================ laplacian_pe
def lap_pe(
    graph: Graph | None, dim: int, dtype: torch.dtype = F64, grid: tuple[int, ...] | None = None
) -> torch.Tensor:
    grid = grid if grid is not None else ((graph.num_nodes,) if graph is not None else (1,))
    ctx = AbsoluteContext(grid=grid, dim=dim, dtype=dtype, graph=graph)
    return encoding(LAPLACIAN, LAPLACIAN.parse_params({}), ctx)


def ref_laplacian(num_nodes: int, edges: list[tuple[int, int]]) -> np.ndarray:
    """benchmarking-gnns: binary undirected A, degrees clipped to >= 1, L = I − D^-1/2 A D^-1/2."""
    a = np.zeros((num_nodes, num_nodes))
    for u, v in edges:
        a[u, v] = a[v, u] = 1.0
    degree = np.maximum(a.sum(axis=1), 1.0)
    return np.eye(num_nodes) - a / np.sqrt(np.outer(degree, degree))


def ref_sign(column: list[float]) -> list[float]:
    for value in column:
        if abs(value) > SIGN_TOLERANCE:
            return column if value > 0 else [-x for x in column]
    return column


def ref_lap_pe(num_nodes: int, edges: list[tuple[int, int]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(PE (N, k), eigenvalues) from numpy's eigh, first column skipped, signs fixed, zero-padded."""
    values, vectors = np.linalg.eigh(ref_laplacian(num_nodes, edges))
    out = np.zeros((num_nodes, k))
    for c in range(min(k, num_nodes - 1)):
        out[:, c] = ref_sign(vectors[:, c + 1].tolist())
    return out, values


def distinct(values: np.ndarray, gap: float = 1e-6) -> bool:
    return bool(np.all(np.diff(np.sort(values)) > gap))


# T19: P4, k = 2, sign fixed so that row 0 >= 0
T19_COLUMNS = [
    [0.5773502692, 0.4082482905, -0.4082482905, -0.5773502692],
    [0.5773502692, -0.4082482905, -0.4082482905, 0.5773502692],
]


def test_t19_lappe_on_p4() -> None:
    pe = lap_pe(make_graph(4, path_edges(4)), 2)
    torch.testing.assert_close(pe, torch.tensor(T19_COLUMNS, dtype=F64).T, atol=1e-9, rtol=0)
    _, values = ref_lap_pe(4, path_edges(4), 2)
    np.testing.assert_allclose(values, [0.0, 0.5, 1.5, 2.0], atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lappe_matches_numpy_reference(seed: int) -> None:
    n, k = 9, 4
    edges = [*path_edges(n), *random_graph(n, 6, seed)]
    expected, values = ref_lap_pe(n, edges, k)
    assert distinct(values[: k + 2])
    torch.testing.assert_close(lap_pe(make_graph(n, edges), k), torch.from_numpy(expected), atol=1e-9, rtol=0)


def test_isolated_nodes_have_unit_diagonal() -> None:
    n, edges = 6, [(0, 1), (1, 2), (3, 4)]  # node 5 isolated; two components
    adjacency = torch.zeros(n, n, dtype=F64)
    for u, v in edges:
        adjacency[u, v] = adjacency[v, u] = 1.0
    laplacian = normalized_laplacian(adjacency, adjacency.sum(dim=1).clamp(min=1.0))
    assert laplacian[5, 5].item() == 1.0
    np.testing.assert_allclose(laplacian.numpy(), ref_laplacian(n, edges), atol=1e-15)
    # the PE: the trivial column is skipped even though 0 is a double eigenvalue; columns stay orthonormal
    pe = lap_pe(make_graph(n, edges), n - 1)
    torch.testing.assert_close(pe.T @ pe, torch.eye(n - 1, dtype=F64), atol=1e-12, rtol=0)
    # e_5 (eigenvalue 1, isolated node) lies in the span of the columns
    projector = pe @ pe.T
    torch.testing.assert_close(projector[:, 5], torch.eye(n, dtype=F64)[:, 5], atol=1e-12, rtol=0)


def test_zero_padding_when_num_nodes_is_at_most_k() -> None:
    edges = [(0, 1), (1, 2)]
    pe = lap_pe(make_graph(3, edges), 5)
    assert pe.shape == (3, 5)
    expected, _ = ref_lap_pe(3, edges, 5)
    torch.testing.assert_close(pe, torch.from_numpy(expected), atol=1e-12, rtol=0)
    assert torch.equal(pe[:, 2:], torch.zeros(3, 3, dtype=F64))
    single = lap_pe(make_graph(1, []), 3)  # one node: every column is padding
    assert torch.equal(single, torch.zeros(1, 3, dtype=F64))


def test_relabelling_permutes_rows_up_to_column_signs() -> None:
    n, k = 8, 5
    edges = [*path_edges(n), (0, 5), (2, 6), (1, 7)]
    _, values = ref_lap_pe(n, edges, k)
    assert distinct(values)
    perm = [3, 7, 0, 5, 1, 6, 2, 4]  # old node i is new node perm[i]
    relabelled = [(perm[u], perm[v]) for u, v in edges]
    pe, pe_new = lap_pe(make_graph(n, edges), k), lap_pe(make_graph(n, relabelled), k)
    moved = pe_new[torch.tensor(perm)]  # (N, k): row i is old node i
    signs = torch.sign((moved * pe).sum(dim=0))  # (k,)
    assert set(signs.tolist()) <= {-1.0, 1.0}
    torch.testing.assert_close(moved, pe * signs, atol=1e-10, rtol=0)


def test_sign_rule_skips_exact_zeros_and_is_deterministic() -> None:
    # P5 with the centre labelled 0 (1-2-0-3-4): the antisymmetric eigenvectors are exactly 0 at node 0
    edges = [(1, 2), (2, 0), (0, 3), (3, 4)]
    pe = lap_pe(make_graph(5, edges), 4)
    _, values = ref_lap_pe(5, edges, 4)
    assert distinct(values)
    np.testing.assert_allclose(values, [1 - math.cos(math.pi * m / 4) for m in range(5)], atol=1e-12)
    zero_at_centre = [c for c in range(4) if abs(pe[0, c].item()) < 1e-12]
    assert zero_at_centre, "the test needs a column whose first entry is an exact zero"
    for c in range(4):
        column = pe[:, c].tolist()
        first = next(x for x in column if abs(x) > SIGN_TOLERANCE)
        assert first > 0
    # the same graph given in another edge order and direction: the identical table
    flipped = make_graph(5, [(v, u) for u, v in reversed(edges)])
    assert torch.equal(lap_pe(flipped, 4), pe)
    assert torch.equal(lap_pe(make_graph(5, edges), 4), pe)
    # negating an input column does not matter: the reference sign rule agrees entry for entry
    expected, _ = ref_lap_pe(5, edges, 4)
    torch.testing.assert_close(pe, torch.from_numpy(expected), atol=1e-10, rtol=0)


def test_repeated_eigenvalue_projector_is_stable() -> None:
    # star K1,3: eigenvalues 0, 1, 1, 2; k = 2 keeps exactly the tied pair, whose basis is arbitrary
    edges = [(0, 1), (0, 2), (0, 3)]
    _, values = ref_lap_pe(4, edges, 3)
    np.testing.assert_allclose(values, [0, 1, 1, 2], atol=1e-12)
    pe = lap_pe(make_graph(4, edges), 2)
    _, vectors = np.linalg.eigh(ref_laplacian(4, edges))
    tied = vectors[:, 1:3]
    torch.testing.assert_close(pe @ pe.T, torch.from_numpy(tied @ tied.T), atol=1e-10, rtol=0)
    perm = [2, 0, 3, 1]
    relabelled = lap_pe(make_graph(4, [(perm[u], perm[v]) for u, v in edges]), 2)[torch.tensor(perm)]
    torch.testing.assert_close(relabelled @ relabelled.T, pe @ pe.T, atol=1e-10, rtol=0)


def test_directed_graph_uses_the_undirected_laplacian() -> None:
    edges = path_edges(5)
    directed = Graph(num_nodes=5, edges=torch.tensor(edges), directed=True)
    assert torch.equal(lap_pe(directed, 3), lap_pe(make_graph(5, edges), 3))


def test_lappe_float32_is_the_float64_table_rounded() -> None:
    graph = make_graph(6, [*path_edges(6), (0, 3)])
    assert torch.equal(lap_pe(graph, 3, dtype=torch.float32), lap_pe(graph, 3).float())


def test_lappe_errors() -> None:
    with pytest.raises(InvalidInput, match="laplacian_pe with variant='gnn' needs a graph") as no_graph:
        lap_pe(None, 2, grid=(4,))
    assert no_graph.value.loc == ("graph",)
    with pytest.raises(InvalidInput) as grid:
        lap_pe(make_graph(4, path_edges(4)), 2, grid=(5,))
    assert grid.value.loc == ("grid",)
    with pytest.raises(InvalidInput, match="node id 9, num_nodes 4") as edge:
        lap_pe(make_graph(4, [(0, 9)]), 2)
    assert edge.value.loc == ("graph", "edges")
    with pytest.raises(InvalidInput) as big:
        lap_pe(make_graph(MAX_EIGEN_NODES + 1, []), 2)
    assert big.value.loc == ("graph", "num_nodes")


@pytest.mark.parametrize(
    "raw",
    [
        {"variant": "tabpet"},  # no data
        {"data": {"dtype": "float64", "shape": [2, 2], "data": [1, 2, 3, 4]}},  # data with gnn
        {"k_first": 3},
        {"alpha": 2.0},
        {"variant": "tabpet", "data": {"dtype": "float64", "shape": [2, 2], "data": [1, 2, 3, 4]}, "k_first": 11},
        {"variant": "tabpet", "data": {"dtype": "float64", "shape": [2, 2], "data": [1, 2, 3, 4]}, "k_first": 1},
    ],
)
def test_laplacian_params_are_validated(raw: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        LAPLACIAN.parse_params(raw)


# ================================================================================================= tabpet
def ref_ranks(column: list[float]) -> list[float]:
    """1-based ranks, ties get the average of the ranks they span."""
    ranks = [0.0] * len(column)
    for i, x in enumerate(column):
        below = sum(1 for y in column if y < x)
        equal = sum(1 for y in column if y == x)
        ranks[i] = below + (equal + 1) / 2
    return ranks


def ref_spearman(rows: list[list[float]]) -> list[list[float]]:
    features = len(rows[0])
    ranked = [ref_ranks([r[f] for r in rows]) for f in range(features)]
    out = [[0.0] * features for _ in range(features)]
    for a in range(features):
        for b in range(features):
            if a == b:
                continue
            x, y = ranked[a], ranked[b]
            mx, my = sum(x) / len(x), sum(y) / len(y)
            cov = sum((p - mx) * (q - my) for p, q in zip(x, y, strict=True))
            vx = sum((p - mx) ** 2 for p in x)
            vy = sum((q - my) ** 2 for q in y)
            out[a][b] = cov / math.sqrt(vx * vy) if vx > 0 and vy > 0 else 0.0
    return out


def jacobi_eigh(matrix: list[list[float]]) -> tuple[list[float], list[list[float]]]:
    """Cyclic Jacobi rotations on a symmetric matrix: (ascending eigenvalues, eigenvector columns)."""
    n = len(matrix)
    a = [row[:] for row in matrix]
    v = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]
    for _ in range(100):
        if sum(a[i][j] ** 2 for i in range(n) for j in range(n) if i != j) < 1e-28:
            break
        for p in range(n):
            for q in range(p + 1, n):
                if a[p][q] == 0.0:
                    continue
                theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q])
                t = (1.0 if theta >= 0 else -1.0) / (abs(theta) + math.sqrt(theta * theta + 1.0))
                c = 1.0 / math.sqrt(t * t + 1.0)
                s = t * c
                for k in range(n):  # A ← A J
                    akp, akq = a[k][p], a[k][q]
                    a[k][p], a[k][q] = c * akp - s * akq, s * akp + c * akq
                for k in range(n):  # A ← Jᵀ A
                    apk, aqk = a[p][k], a[q][k]
                    a[p][k], a[q][k] = c * apk - s * aqk, s * apk + c * aqk
                for k in range(n):  # V ← V J
                    vkp, vkq = v[k][p], v[k][q]
                    v[k][p], v[k][q] = c * vkp - s * vkq, s * vkp + c * vkq
    order = sorted(range(n), key=lambda i: a[i][i])
    return [a[i][i] for i in order], [[v[r][i] for i in order] for r in range(n)]


def ref_tabpet(rows: list[list[float]], k: int, alpha: float = 1.0) -> tuple[list[list[float]], list[float]]:
    """Tab-PET in Python floats: (PE (F, 2k) z-scored, eigenvalues)."""
    w = ref_spearman(rows)
    n = len(w)
    a = [[max(abs(w[i][j]), abs(w[j][i])) for j in range(n)] for i in range(n)]
    degree = [sum(row) or 1.0 for row in a]
    lap = [[(1.0 if i == j else 0.0) - a[i][j] / math.sqrt(degree[i] * degree[j]) for j in range(n)] for i in range(n)]
    values, vectors = jacobi_eigh(lap)
    picks = list(range(1, k + 1)) + list(range(n - k, n))
    columns = [ref_sign([vectors[r][c] for r in range(n)]) for c in picks]
    out_columns = []
    for col in columns:
        mean = sum(col) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in col) / (n - 1)) or 1.0
        out_columns.append([alpha * (x - mean) / std for x in col])
    return [[out_columns[c][r] for c in range(2 * k)] for r in range(n)], values


TABLE = [  # 9 rows, 6 features, with ties and a negatively correlated column
    [1.0, 2.0, 0.5, 3.0, 1.0, 7.0],
    [2.0, 1.0, 0.7, 2.0, 1.0, 6.5],
    [3.0, 4.0, 0.2, 2.0, 2.0, 6.0],
    [4.0, 3.0, 0.9, 1.0, 2.0, 5.0],
    [5.0, 6.0, 0.1, 5.0, 3.0, 4.0],
    [6.0, 5.0, 0.4, 4.0, 3.0, 4.5],
    [7.0, 8.0, 0.8, 6.0, 1.0, 2.0],
    [8.0, 7.0, 0.3, 9.0, 4.0, 1.0],
    [9.0, 9.0, 0.6, 8.0, 4.0, 0.5],
]


def tabpet(
    rows: list[list[float]], dim: int, dtype: torch.dtype = F64, grid: tuple[int, ...] | None = None, **params: Any
) -> torch.Tensor:
    data = torch.tensor(rows, dtype=F64)
    raw = {"variant": "tabpet", "data": as_wire(data), **params}
    ctx = AbsoluteContext(grid=grid if grid is not None else (data.shape[1],), dim=dim, dtype=dtype)
    return encoding(LAPLACIAN, LAPLACIAN.parse_params(raw), ctx)


def test_spearman_matches_reference_with_ties_and_constant_columns() -> None:
    rows = [[*row, 3.0] for row in TABLE]  # a constant last column
    got = spearman_correlation(torch.tensor(rows, dtype=F64))
    torch.testing.assert_close(got, torch.tensor(ref_spearman(rows), dtype=F64), atol=1e-12, rtol=0)
    assert torch.equal(got[-1], torch.zeros(7, dtype=F64))
    assert torch.equal(got.diagonal(), torch.zeros(7, dtype=F64))


def test_jacobi_reference_solver_is_an_eigendecomposition() -> None:
    matrix = [[2.0, -1.0, 0.5], [-1.0, 3.0, 0.25], [0.5, 0.25, 1.0]]
    values, vectors = jacobi_eigh(matrix)
    for c in range(3):
        for r in range(3):
            mv = sum(matrix[r][j] * vectors[j][c] for j in range(3))
            assert abs(mv - values[c] * vectors[r][c]) < 1e-12


@pytest.mark.parametrize(("k", "alpha"), [(2, 1.0), (2, 0.5)])
def test_tabpet_matches_python_reference(k: int, alpha: float) -> None:
    expected, values = ref_tabpet(TABLE, k, alpha)
    assert all(b - a > 1e-6 for a, b in itertools.pairwise(values)), "distinct eigenvalues"
    got = tabpet(TABLE, 2 * k, k_first=k, alpha=alpha)
    assert got.shape == (6, 2 * k)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), atol=1e-9, rtol=0)


def test_tabpet_columns_are_z_scored_in_float32() -> None:
    got = tabpet(TABLE, 6, dtype=torch.float32, k_first=3)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.mean(dim=0), torch.zeros(6), atol=1e-6, rtol=0)
    torch.testing.assert_close(got.std(dim=0), torch.ones(6), atol=1e-6, rtol=0)
    torch.testing.assert_close(got.double(), tabpet(TABLE, 6, k_first=3), atol=1e-5, rtol=0)


def test_tabpet_automatic_k_rule() -> None:
    def k_of(values: list[float]) -> int:
        return tabpet_automatic_k(torch.tensor(values, dtype=F64))

    assert k_of([0.0, 0.1, 0.2, 0.3, 0.4, 0.9, 1.2, 1.6]) == 4  # even gaps: no cut
    # low band [0.01, 0.02, 0.03, 0.6, 0.7]; gaps [0.01, 0.01, 0.57, 0.1], numpy median 0.055: cut at 0.57 > 0.55
    assert k_of([0.0, 0.01, 0.02, 0.03, 0.6, 0.7, 1.5]) == 3
    assert k_of([0.0, 0.9, 1.1, 1.9]) == 2  # nothing in the low band: at least 2
    assert k_of([0.0, *[0.01 * i for i in range(1, 15)], 1.5]) == 10  # at most 10
    assert k_of([0.0, 0.75, 0.7500001]) == 2


def test_tabpet_automatic_k_end_to_end() -> None:
    data = torch.tensor(TABLE, dtype=F64)
    weights = spearman_correlation(data).abs()
    adjacency = torch.maximum(weights, weights.T)
    values = torch.linalg.eigvalsh(normalized_laplacian(adjacency, adjacency.sum(dim=1)))
    k = tabpet_automatic_k(values)
    with pytest.raises(InvalidInput, match="automatically") as wrong:
        tabpet(TABLE, 2 * k + 2)
    assert wrong.value.loc == ("dim",)
    torch.testing.assert_close(tabpet(TABLE, 2 * k), tabpet(TABLE, 2 * k, k_first=k), rtol=0, atol=0)


def test_tabpet_pads_blocks_when_features_are_few() -> None:
    rows = [[1.0, 2.0, 5.0], [2.0, 1.0, 4.0], [3.0, 3.0, 1.0], [4.0, 5.0, 2.0]]
    got = tabpet(rows, 8, k_first=4)  # 3 features: 2 after the trivial one, 3 largest, zero padding
    assert got.shape == (3, 8)
    assert torch.equal(got[:, 2:4], torch.zeros(3, 2, dtype=F64))
    assert torch.equal(got[:, 7], torch.zeros(3, dtype=F64))


def test_tabpet_errors() -> None:
    with pytest.raises(InvalidInput) as dim:
        tabpet(TABLE, 5, k_first=2)
    assert dim.value.loc == ("dim",)
    with pytest.raises(InvalidInput) as grid:
        tabpet(TABLE, 4, k_first=2, grid=(7,))
    assert grid.value.loc == ("grid",)
    with pytest.raises(InvalidInput) as one_row:
        tabpet([TABLE[0]], 4, k_first=2)
    assert one_row.value.loc == ("params", "data")
    flat = {"variant": "tabpet", "data": {"dtype": "float64", "shape": [6], "data": [1, 2, 3, 4, 5, 6]}}
    with pytest.raises(InvalidInput) as vector:
        encoding(LAPLACIAN, LAPLACIAN.parse_params(flat), AbsoluteContext(grid=(6,), dim=4))
    assert vector.value.loc == ("params", "data")
    bad = {"variant": "tabpet", "data": {"dtype": "float64", "shape": [2, 2], "data": [1, "nan", 3, 4]}}
    with pytest.raises(InvalidInput) as nan:
        encoding(LAPLACIAN, LAPLACIAN.parse_params(bad), AbsoluteContext(grid=(2,), dim=4))
    assert nan.value.loc[:2] == ("params", "data")
