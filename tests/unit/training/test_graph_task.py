"""The graph task: random graphs and BFS labels checked against Floyd–Warshall, the graph transformer with each
graph method as the only variable, and a short training run in which Graphormer's bias learns adjacency."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

import pytest
import torch

from posenc.errors import InvalidInput
from posenc.pe import get_method
from posenc.pe.appliers import Layer, build_applier
from posenc.pe.types import Graph
from posenc.schemas.jobs import TrainSpec
from posenc.training.evaluate import evaluate_graphs
from posenc.training.graph_task import (
    NODE_PLAIN,
    NODE_SOURCE,
    NODE_TARGET,
    GraphBatch,
    GraphModelConfig,
    GraphTransformer,
    distance_classes,
    feasible_classes,
    graph_batch,
    node_positions,
    random_connected_graph,
    random_tree,
    unpack_graphs,
)
from posenc.training.train import Batch, train

METHODS = ("nope", "graphormer", "graphormer_centrality", "laplacian_pe")


def floyd_warshall(num_nodes: int, edges: torch.Tensor) -> list[list[float]]:
    """All-pairs hop distances of an undirected graph, inf when unreachable (independent of the module's BFS)."""
    inf = float("inf")
    distance = [[0.0 if i == j else inf for j in range(num_nodes)] for i in range(num_nodes)]
    for u, v in edges.tolist():
        distance[u][v] = distance[v][u] = min(distance[u][v], 1.0)
    for via in range(num_nodes):
        for i in range(num_nodes):
            for j in range(num_nodes):
                distance[i][j] = min(distance[i][j], distance[i][via] + distance[via][j])
    return distance


def batch_of(
    seed: int, *, batch_size: int = 16, num_nodes: int = 10, family: str = "tree", max_distance: int = 5
) -> GraphBatch:
    generator = torch.Generator().manual_seed(seed)
    options = {"family": family, "max_distance": max_distance}
    return graph_batch("graph_distance", batch_size, num_nodes, generator, **options)  # type: ignore[arg-type]


def tiny_config(method: str, **changes: object) -> GraphModelConfig:
    config = GraphModelConfig(layers=2, dim=16, heads=2, method=method, train_nodes=8)
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread for these tests (tiny per-example ops: a second thread only adds synchronisation, and
    on a busy machine costs 10x or more), restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------------------- data
@pytest.mark.parametrize("family", ["tree", "er"])
def test_the_same_seed_gives_the_same_batch(family: str) -> None:
    first, again, other = batch_of(3, family=family), batch_of(3, family=family), batch_of(4, family=family)
    assert torch.equal(first.node_types, again.node_types)
    assert torch.equal(first.labels, again.labels)
    for graph, same in zip(first.graphs, again.graphs, strict=True):
        assert torch.equal(graph.edges, same.edges)
    assert not torch.equal(first.node_types, other.node_types)


@pytest.mark.parametrize("family", ["tree", "er"])
@pytest.mark.parametrize("num_nodes", [5, 12])
def test_labels_are_the_floyd_warshall_distance_between_the_marked_nodes(family: str, num_nodes: int) -> None:
    max_distance = 4
    batch = batch_of(0, family=family, num_nodes=num_nodes, batch_size=24, max_distance=max_distance)
    assert batch.node_types.shape == (24, num_nodes)
    assert batch.labels.dtype == torch.int64
    for types, label, graph in zip(batch.node_types, batch.labels, batch.graphs, strict=True):
        assert graph.num_nodes == num_nodes
        assert graph.edges.dtype == torch.int64
        assert (types == NODE_SOURCE).sum() == 1
        assert (types == NODE_TARGET).sum() == 1
        assert ((types == NODE_PLAIN).sum()) == num_nodes - 2
        source, target = int((types == NODE_SOURCE).nonzero()), int((types == NODE_TARGET).nonzero())
        distance = floyd_warshall(num_nodes, graph.edges)
        assert all(d < float("inf") for row in distance for d in row)  # connected
        assert int(label) == min(int(distance[source][target]), max_distance) - 1


def test_trees_are_trees_and_er_graphs_are_connected() -> None:
    generator = torch.Generator().manual_seed(0)
    for num_nodes in (2, 3, 9, 20):
        tree = torch.tensor(random_tree(num_nodes, generator)).reshape(-1, 2)
        assert tree.shape == (num_nodes - 1, 2)  # n − 1 edges and connected: a tree
        assert all(d < float("inf") for row in floyd_warshall(num_nodes, tree) for d in row)
        graph = torch.tensor(random_connected_graph(num_nodes, generator)).reshape(-1, 2)
        assert all(d < float("inf") for row in floyd_warshall(num_nodes, graph) for d in row)
        assert len({tuple(edge) for edge in graph.tolist()}) == graph.shape[0]  # no edge listed twice


@pytest.mark.parametrize("family", ["tree", "er"])
@pytest.mark.parametrize("num_nodes", [8, 24])
def test_labels_are_uniform_over_the_feasible_classes(family: str, num_nodes: int) -> None:
    samples, classes = 600, feasible_classes(num_nodes, 5)
    counts = collections.Counter(batch_of(1, num_nodes=num_nodes, batch_size=samples, family=family).labels.tolist())
    assert set(counts) == set(range(classes))
    # a multinomial count is within 5 sigma; the pairs of a random graph are far from uniform (measured: 53 % of
    # the pairs of a 24-node tree are >= 5 apart, 2 % of those of an 8-node ER graph), so unbalanced labels fail
    expected = samples / classes
    sigma = (samples * (1 / classes) * (1 - 1 / classes)) ** 0.5
    assert all(abs(count - expected) < 5 * sigma for count in counts.values()), counts


def test_small_graphs_only_get_the_distances_they_can_have() -> None:
    batch = batch_of(2, num_nodes=4, batch_size=60, max_distance=6)
    assert set(batch.labels.tolist()) == {0, 1, 2}  # distances 1 … 3 in 4 nodes


@pytest.mark.parametrize(
    ("num_nodes", "family", "max_distance", "task", "loc"),
    [
        (2, "tree", 5, "graph_distance", ("num_nodes",)),
        (8, "tree", 1, "graph_distance", ("max_distance",)),
        (8, "grid", 5, "graph_distance", ("family",)),
        (8, "tree", 5, "node_count", ("task",)),
    ],
)
def test_bad_task_settings_are_refused(
    num_nodes: int, family: str, max_distance: int, task: str, loc: tuple[str, ...]
) -> None:
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(InvalidInput) as raised:
        graph_batch(task, 2, num_nodes, generator, family=family, max_distance=max_distance)  # type: ignore[arg-type]
    assert raised.value.loc == loc


# ---------------------------------------------------------------------------------------------------- model
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("virtual_token", "readout"), [(True, "graph_token"), (False, "mean"), (True, "marked")])
def test_forward_gives_finite_logits_at_the_training_size_and_beyond(
    method: str, virtual_token: bool, readout: str
) -> None:
    model = GraphTransformer(tiny_config(method, virtual_token=virtual_token, readout=readout), seed=0)
    for num_nodes in (8, 13):
        batch = batch_of(0, num_nodes=num_nodes, batch_size=3)
        logits = model.classify(batch.node_types, batch.graphs)
        assert logits.shape == (3, 5)
        assert torch.isfinite(logits).all()


def test_a_graph_token_readout_needs_the_graph_token() -> None:
    with pytest.raises(ValueError, match="virtual_token"):
        tiny_config("nope", virtual_token=False, readout="graph_token")


def test_a_model_is_rebuilt_from_its_json_config_and_weights() -> None:
    model = GraphTransformer(tiny_config("graphormer"), seed=1)
    rebuilt = GraphTransformer(GraphModelConfig.from_json(model.config.to_json()), seed=2)
    rebuilt.load_state_dict(model.state_dict())
    batch = batch_of(0, num_nodes=7, batch_size=2)
    with torch.no_grad():
        torch.testing.assert_close(
            rebuilt.classify(batch.node_types, batch.graphs), model.classify(batch.node_types, batch.graphs)
        )


def test_positions_are_node_ids_after_the_graph_token() -> None:
    assert node_positions(4, True).tolist() == [-1, 0, 1, 2, 3]
    assert node_positions(3, False).tolist() == [0, 1, 2]


def test_same_seed_gives_identical_non_pe_weights_for_every_method() -> None:
    states = {method: GraphTransformer(tiny_config(method), seed=3).state_dict() for method in METHODS}
    reference = states["nope"]
    assert not any(name.startswith("pe.") for name in reference)  # nope and laplacian_pe hold no weights
    for method, state in states.items():
        shared = {name: tensor for name, tensor in state.items() if not name.startswith("pe.")}
        assert shared.keys() == reference.keys(), method
        for name, tensor in reference.items():
            assert torch.equal(shared[name], tensor), (method, name)
    assert set(states["graphormer"]) - set(reference) == {"pe.learned.spatial_table", "pe.learned.virtual_distance"}
    other_seed = GraphTransformer(tiny_config("nope"), seed=4).state_dict()
    assert not torch.equal(other_seed["node_embedding.weight"], reference["node_embedding.weight"])


def test_nope_ignores_the_graph_and_graph_methods_read_it() -> None:
    batch = batch_of(5, num_nodes=9, batch_size=4)
    rewired = batch_of(6, num_nodes=9, batch_size=4).graphs  # other graphs, the same marked nodes
    for method in METHODS:
        model = GraphTransformer(tiny_config(method), seed=0)
        with torch.no_grad():
            same = torch.allclose(
                model.classify(batch.node_types, batch.graphs), model.classify(batch.node_types, rewired), atol=1e-6
            )
        assert same == (method == "nope"), method


@pytest.mark.parametrize(("method", "names"), [("graphormer", 2), ("graphormer_centrality", 2)])
def test_learned_pe_tensors_are_parameters_that_get_gradients(method: str, names: int) -> None:
    model = GraphTransformer(tiny_config(method), seed=0)
    batch = batch_of(0, num_nodes=8, batch_size=4)
    loss = torch.nn.functional.cross_entropy(model.classify(batch.node_types, batch.graphs), batch.labels)
    loss.backward()  # type: ignore[no-untyped-call]
    learned = dict(model.pe.learned.items())
    assert len(learned) == names
    for name, parameter in learned.items():
        assert parameter.grad is not None, name
        assert bool(parameter.grad.abs().sum() > 0), name


def test_an_absolute_encoding_is_added_to_the_node_embeddings_only_not_to_q_and_k() -> None:
    graph = Graph(num_nodes=5, edges=torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4]]))
    layer = Layer(num_heads=2, head_dim=4, causal=False, model_dim=8, graph=graph)
    pos = node_positions(5, True)
    q, k, v = torch.randn(3, 1, 2, 6, 4, generator=torch.Generator().manual_seed(0)).unbind(0)  # (1, H, T, d)
    x = torch.zeros(1, 6, 8)
    outputs = []
    for method in ("nope", "laplacian_pe"):
        spec = get_method(method)
        applier = build_applier(spec, spec.parse_params({}), layer)
        outputs.append(applier.layer_attend(q, k, v, x=x, pos=pos)[0])
        assert applier.embed(x, pos)[0, 0].abs().sum() == 0  # the graph token gets a zero encoding
    torch.testing.assert_close(outputs[0], outputs[1])


def test_a_packed_batch_unpacks_to_the_same_node_types_and_edge_sets() -> None:
    batch = batch_of(7, num_nodes=9, batch_size=5, family="er")
    packed = batch.packed()
    assert packed.shape == (5, 9, 10)
    assert packed.dtype == torch.int64
    node_types, graphs = unpack_graphs(packed)
    assert torch.equal(node_types, batch.node_types)
    for graph, original in zip(graphs, batch.graphs, strict=True):
        assert graph.num_nodes == original.num_nodes
        as_set = {tuple(sorted(edge)) for edge in original.edges.tolist()}
        assert {tuple(edge) for edge in graph.edges.tolist()} == as_set
    model = GraphTransformer(tiny_config("graphormer"), seed=0)
    with torch.no_grad():
        torch.testing.assert_close(model(packed), model.classify(batch.node_types, batch.graphs))


def test_class_names_follow_the_distances() -> None:
    assert distance_classes(3) == ("d=1", "d=2", "d>=3")


# ------------------------------------------------------------------------------------------ train / evaluate
def one_model(method: str, **changes: object) -> GraphTransformer:
    model = GraphTransformer(tiny_config(method, **changes), seed=0)
    model.eval()
    return model


def test_evaluation_is_deterministic_and_the_same_for_every_size_set() -> None:
    model = one_model("graphormer")
    options = {"family": "tree", "max_distance": 5, "samples": 20}
    first = [evaluate_graphs(model, "graph_distance", n, **options) for n in (6, 9)]  # type: ignore[arg-type]
    again = evaluate_graphs(model, "graph_distance", 9, **options)  # type: ignore[arg-type]
    assert [score.num_nodes for score in first] == [6, 9]
    assert all(0.0 <= score.accuracy <= 1.0 for score in first)
    assert again == first[1]  # a size's examples do not depend on the other sizes


def test_graphormer_learns_adjacency_in_a_short_run_through_the_shared_trainer() -> None:
    # "are the marked nodes adjacent" (max_distance 2) read out at the marked nodes: one layer suffices. A model
    # blind to the graph (nope) stays at ln 2 and chance, 1/2, by construction (balanced labels).
    config = GraphModelConfig(layers=1, dim=32, heads=8, method="graphormer", train_nodes=6, max_distance=2)

    def batches(generator: torch.Generator) -> Batch:
        drawn = graph_batch("graph_distance", 32, 6, generator, max_distance=2)
        return Batch(drawn.packed(), drawn.labels, tokens=32 * 7)

    spec = TrainSpec(steps=150, batch_size=32, lr=1e-2, warmup_steps=15)
    outcome = train(config, 0, spec, batches)
    losses = outcome.losses
    assert len(losses) == 150
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    assert last < first - 0.3, (first, last)
    model = outcome.model
    score = evaluate_graphs(model, "graph_distance", 6, family="tree", max_distance=2, samples=128)
    assert score.accuracy > 0.8
