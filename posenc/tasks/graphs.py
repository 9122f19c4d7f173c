"""Graph tasks on a graph transformer (``posenc.training.graph_task``): random graphs, accuracy by graph size.

Unit: nodes. The training graph size is ``data.num_nodes`` (default 12); the evaluation sizes ``eval.num_nodes``,
default 2n/3, n, 4n/3, 2n (those of at least 3 nodes). ``graph_distance``: two marked nodes, classify their
shortest-path distance 1, 2, ..., >= ``data.max_distance`` (default 5), on ``data.graph_family`` graphs ('tree':
uniform random labelled trees, the default; 'er': sparse Erdos-Renyi graphs made connected). Graph methods
(registry ``axes`` 0) read each example's graph, 1D methods get the node ids (a labelling baseline).
"""

from __future__ import annotations

import torch

from posenc.errors import InvalidInput, Loc
from posenc.pe import get_method
from posenc.pe.appliers import Layer, build_applier, grid_positions
from posenc.pe.types import Extent, Graph
from posenc.schemas.jobs import MAX_GRAPH_NODES, MethodRef
from posenc.tasks.base import Family, cannot_run, check_trainable, parse_params
from posenc.tasks.images import dry_run_tokens

GRAPH_TASKS = ("graph_distance",)
DEFAULT_NUM_NODES = 12
DEFAULT_MAX_DISTANCE = 5
MIN_GRAPH_NODES = 3
SIZE_FACTORS = (2 / 3, 1.0, 4 / 3, 2.0)


class Graphs(Family):
    name = "graphs"
    unit = "nodes"
    model = "graphs"
    metric = "accuracy"
    metrics = ("accuracy",)
    train_field = ("data", "num_nodes")
    eval_field = ("eval", "num_nodes")
    data_fields = ("num_nodes", "graph_family", "max_distance")
    eval_fields = ("num_nodes", "samples")

    @classmethod
    def task_names(cls) -> tuple[str, ...]:
        return GRAPH_TASKS

    @classmethod
    def about(cls, task: str) -> str:
        return "random trees or Erdos-Renyi graphs: the shortest-path distance of two marked nodes"

    @property
    def graph_family(self) -> str:
        return self.spec.data.graph_family or "tree"

    @property
    def max_distance(self) -> int:
        return self.spec.data.max_distance if self.spec.data.max_distance is not None else DEFAULT_MAX_DISTANCE

    def train_size(self) -> int:
        return self.spec.data.num_nodes if self.spec.data.num_nodes is not None else DEFAULT_NUM_NODES

    def default_eval_sizes(self) -> list[int]:
        nodes = self.train_size()
        scaled = (round(nodes * factor) for factor in SIZE_FACTORS)
        return sorted({n for n in scaled if MIN_GRAPH_NODES <= n <= MAX_GRAPH_NODES} | {nodes})

    def given_eval_sizes(self) -> list[int] | None:
        return None if self.spec.eval.num_nodes is None else list(self.spec.eval.num_nodes)

    def tokens(self, size: int) -> int:
        """Nodes of one graph, and the virtual graph token if any."""
        return size + int(self.spec.model.cls_token)

    def eval_tokens(self, size: int) -> int:
        return self.spec.eval.samples * self.tokens(size)

    def output_classes(self) -> int:
        return self.max_distance

    def validate_method(self, ref: MethodRef, loc: Loc) -> None:
        """Graph methods read each example's graph, 1D methods get the node ids; every evaluation size is
        dry-run on a path graph of that size, with the virtual graph token as a prefix token."""
        if ref.patterned:
            raise InvalidInput(
                (*loc, ref.unit_field),
                "layer patterns and configs are for the decoders (text, sequence tasks, probes); "
                "the graph model has one setup",
            )
        method = get_method(ref.method_name)
        params = parse_params(method, method.training_params(ref.params), loc)
        if method.axes not in (0, 1) or method.causal_only:
            what = "causal attention only" if method.causal_only else f"{method.axes}D positions"
            raise InvalidInput(
                (*loc, "method"), f"{method.name!r} is for {what}; the graph model attends over nodes both ways"
            )
        check_trainable(method, loc)
        model = self.spec.model
        prefix = int(model.cls_token)
        head_dim = model.dim // model.heads
        for nodes in self.eval_sizes():
            tokens = prefix + nodes
            self.charge_method(method, params, loc, Extent(tokens, tokens, model.heads, head_dim, 1, model.dim))
        try:
            for nodes in self.eval_sizes():
                path = torch.stack((torch.arange(nodes - 1), torch.arange(1, nodes)), dim=-1)  # (n − 1, 2)
                layer = Layer(
                    num_heads=model.heads, head_dim=model.dim // model.heads, causal=False, model_dim=model.dim,
                    graph=Graph(num_nodes=nodes, edges=path),
                )  # fmt: skip
                applier = build_applier(method, params, layer)
                applier.check()
                dry_run_tokens(applier, grid_positions((nodes,), prefix)[:, 0], model.dim)  # (P + n,)
        except InvalidInput as exc:
            raise cannot_run(method, loc, exc) from None

    def protocol(self) -> str:
        return "top1_accuracy"

    def title(self) -> str:
        return f"{self.task}: accuracy vs graph size (nodes; {self.graph_family}s), trained at {self.train_size()}"

    def chance(self) -> float | None:
        return 1 / self.max_distance  # sizes of at least max_distance + 1 nodes; smaller ones have fewer classes
