"""Request bodies of the compute routes. Field names are the public contract.

Limits that depend on configuration (output budget, JSON element cap) are checked by the gateway before
anything is allocated; the bounds here are the hard ones that hold for every deployment.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posenc.schemas.tensors import FloatDType, Int64, TensorIn

MAX_HEADS = 1024
MAX_LENGTH = 1_048_576
# Rotary angles n·ω are built in float64; up to |n| = 2^26 their rounding error (≤ |n|·2^-51 rad, counting
# the float64 rounding of ω itself) stays within one float32 ulp of cos and sin, so the tables are exact to
# float32 rounding. Past it no float64 computation could be, so such positions are refused (422).
MAX_ROTARY_POSITION = 2**26
QUERY_OFFSET_DESCRIPTION = (
    "position of the first query among the keys: query i sits at position i + query_offset, key j at j. "
    "Default: key_length - query_length when there are more keys than queries (the queries are the last "
    "tokens, as in KV-cache decoding, FlashAttention >= 2.1 and Hugging Face's cache_position), else 0"
)
Length = Annotated[int, Field(ge=1, le=MAX_LENGTH)]
Heads = Annotated[int, Field(ge=1, le=MAX_HEADS)]
MAX_GRAPH_NODES = 4096  # graph methods solve all-pairs shortest paths or a dense eigenproblem: O(n^3)
MAX_GRAPH_EDGES = 1_000_000
GridSizes = Annotated[
    list[Annotated[int, Field(ge=1, le=65536)]],
    Field(min_length=2, max_length=3, description="(rows, cols) for 2D methods, (frames, rows, cols) for 3D"),
]
PREFIX_DESCRIPTION = (
    "tokens before the grid's (CLS, registers, a graph's virtual token): not rotated, biased or encoded the way "
    "grid tokens are (identity rotation; the method's own prefix entries or 0)"
)
POSITIONS_DESCRIPTION = (
    "int positions of the keys: (N,) for 1D methods, (N, A) coordinates for 2D/3D methods ((row, col) or "
    "(frame, row, col)); negative rows are prefix tokens (prefix p at -(p + 1)); the queries are the last Nq keys"
)


class GraphIn(BaseModel):
    """A graph for graph methods (Graphormer, Laplacian PE): nodes 0 … num_nodes − 1."""

    model_config = ConfigDict(extra="forbid")

    num_nodes: int = Field(ge=1, le=MAX_GRAPH_NODES)
    edges: list[tuple[Int64, Int64]] = Field(
        default_factory=list, max_length=MAX_GRAPH_EDGES, description="(u, v) node id pairs"
    )
    edge_features: list[Int64] | list[Annotated[list[Int64], Field(max_length=64)]] | None = Field(
        default=None,
        max_length=MAX_GRAPH_EDGES,
        description="one categorical id (or a list of at most 64 ids) per edge, in the order of edges",
    )
    directed: bool = Field(default=False, description="false: every edge is traversed both ways")


class _Request(BaseModel):
    # allow_inf_nan=False: JSON parsers turn NaN, Infinity and 1e400 into floats; every float field refuses them
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    method: str = Field(description="registered method name, see GET /v1/methods")
    params: dict[str, Any] = Field(
        default_factory=dict, description="method parameters; validated against the method's params_schema"
    )


class BiasRequest(_Request):
    """``POST /v1/bias``: B of shape (H, Nq, Nk), or the (H, Nq + Nk - 1) table for Toeplitz methods."""

    num_heads: Heads
    query_length: Length | None = Field(
        default=None, description="required for 1D methods; with a grid or a graph it is their token count"
    )
    grid: GridSizes | None = Field(default=None, description="2D/3D methods: the grid of the tokens (self-attention)")
    graph: GraphIn | None = Field(default=None, description="graph methods: the tokens are its nodes")
    prefix_tokens: int = Field(default=0, ge=0, le=MAX_LENGTH, description=PREFIX_DESCRIPTION)
    key_length: Length | None = Field(default=None, description="defaults to query_length")
    query_offset: int | None = Field(default=None, ge=0, le=MAX_LENGTH, description=QUERY_OFFSET_DESCRIPTION)
    causal: bool | None = Field(
        default=None,
        description="mask keys after the query (j > i + query_offset) with -inf (and use the method's causal form); "
        "default true for 1D sequences, false for a grid or a graph (token order is no direction there)",
    )
    dtype: FloatDType = "float32"
    form: Literal["dense", "toeplitz"] = Field(
        default="dense",
        description="toeplitz: (H, Nq + Nk - 1) with B[h, i, j] = table[h, i - j + Nk - 1] (i, j row and column "
        "indices; the positions differ by i + query_offset - j)",
    )

    @model_validator(mode="after")
    def _one_layout(self) -> BiasRequest:
        layouts = [name for name in ("query_length", "grid", "graph") if getattr(self, name) is not None]
        if len(layouts) != 1:
            raise ValueError("give exactly one of 'query_length' (1D), 'grid' (2D/3D) or 'graph' (graph methods)")
        if self.query_length is None and (self.key_length is not None or self.query_offset is not None):
            raise ValueError("key_length and query_offset apply to 1D sequences (query_length) only")
        if self.query_length is not None and self.prefix_tokens:
            raise ValueError("prefix_tokens apply to a grid or a graph")
        return self

    @property
    def resolved_query_length(self) -> int:
        """Tokens: query_length, or the prefix plus the grid's or the graph's tokens."""
        if self.grid is not None:
            return self.prefix_tokens + math.prod(self.grid)
        if self.graph is not None:
            return self.prefix_tokens + self.graph.num_nodes
        assert self.query_length is not None
        return self.query_length

    @property
    def resolved_key_length(self) -> int:
        return self.key_length if self.key_length is not None else self.resolved_query_length

    @property
    def resolved_causal(self) -> bool:
        return self.causal if self.causal is not None else self.query_length is not None

    @property
    def resolved_query_offset(self) -> int:
        return default_query_offset(self.query_offset, self.resolved_query_length, self.resolved_key_length)


# A model's config.json, or a preset's name (GET /v1/models): wherever the API takes a config.
PresetName = Annotated[str, Field(min_length=1, max_length=128, description="a preset's name (GET /v1/models)")]
ConfigOrPreset = dict[str, Any] | PresetName


class RotaryRequest(_Request):
    """``POST /v1/rotary``: rotate q and k of shape (B, H, N, D) by their positions, with a method and params or
    with a model's config and a layer index."""

    method: str | None = Field(  # type: ignore[assignment]
        default=None, description="registered rotary method, see GET /v1/methods; or give config and layer"
    )
    config: ConfigOrPreset | None = Field(
        default=None,
        description="a model's config.json (any dialect POST /v1/models/resolve reads) or a preset's name, in place "
        "of method and params: the layer's method, params, rotated slice and pairing come from it",
    )
    layer: int | None = Field(default=None, ge=0, le=1023, description="with config: the layer index")
    q: TensorIn
    k: TensorIn | None = Field(default=None, description="omit with rotate='query'; same D as q")
    positions: TensorIn | list[Int64] | list[list[Int64]] | None = Field(
        default=None,
        description="int positions (N,), or (N, A) coordinates for 2D/3D methods ((row, col), (frame, row, col)); "
        "negative rows are prefix tokens, left unrotated; default arange(N) + offset",
    )
    grid: GridSizes | None = Field(default=None, description="2D/3D methods: positions of the tokens of this grid")
    prefix_tokens: int = Field(default=0, ge=0, le=MAX_LENGTH, description=PREFIX_DESCRIPTION)
    offset: int = Field(
        default=0,
        ge=0,
        le=MAX_ROTARY_POSITION,
        description="added to the default positions (KV-cache decoding); offset + N - 1 <= 2^26, the largest "
        "position whose angles are exact to float32 rounding",
    )
    pairing: Literal["half", "interleaved"] | None = Field(
        default=None,
        description="half: pairs (k, k + d/2) (GPT-NeoX/HF); interleaved: pairs (2k, 2k + 1) (GPT-J/Meta); "
        "default the method's own (GET /v1/methods: pairings); one the method cannot rotate in is refused",
    )
    rotate: Literal["both", "query"] = Field(default="both", description="query: rotate q only (cross-attention)")
    rotary_dim: int | None = Field(
        default=None, ge=2, description="rotate only the first rotary_dim features (partial rotary); even"
    )
    return_tables: bool = Field(
        default=False, description="also return cos and sin, (N, rotary_dim / 2) each: one angle per rotated pair"
    )
    dtype: FloatDType | None = Field(default=None, description="output dtype; default the dtype of q")

    @model_validator(mode="after")
    def _method_or_config(self) -> RotaryRequest:
        if (self.method is None) == (self.config is None):
            raise ValueError("give exactly one of 'method' (with params) or 'config' (with layer)")
        if self.config is not None:
            if self.layer is None:
                raise ValueError("'config' needs 'layer', the index of the layer to rotate for")
            from_config = {"params", "rotary_dim", "pairing"} & self.model_fields_set
            if from_config:
                raise ValueError(f"{sorted(from_config)} come from the config's layer; leave them out with 'config'")
        elif self.layer is not None:
            raise ValueError("'layer' goes with 'config'")
        return self


class EncodingRequest(_Request):
    """``POST /v1/encodings``: absolute encoding P of shape (length, dim) or (*grid, dim)."""

    length: Length | None = None
    grid: list[Annotated[int, Field(ge=1, le=65536)]] | None = Field(
        default=None, min_length=1, max_length=3, description="(H, W) or (T, H, W) for 2D/3D methods"
    )
    graph: GraphIn | None = Field(default=None, description="graph methods: encode its nodes (N = num_nodes)")
    prefix_tokens: int = Field(
        default=0, ge=0, le=MAX_LENGTH, description="also return 'prefix' (P, dim): the prefix tokens' rows"
    )
    dim: Annotated[int, Field(ge=1, le=65536)]
    dtype: FloatDType = "float32"

    @model_validator(mode="after")
    def _length_or_grid(self) -> EncodingRequest:
        if sum(value is not None for value in (self.length, self.grid, self.graph)) != 1:
            raise ValueError("give exactly one of 'length' (1D methods), 'grid' (2D/3D methods) or 'graph'")
        return self


class AttentionRequest(_Request):
    """``POST /v1/attention``: attention weights (B, H, Nq, Nk) with the method applied by its kind, and the
    output (B, H, Nq, Dv) when ``v`` is given."""

    q: TensorIn
    k: TensorIn
    v: TensorIn | None = Field(default=None, description="(B, H, Nk, Dv) values: the response then has 'output'")
    x: TensorIn | None = Field(
        default=None,
        description="(B, Nk, D_model) the layer input at the key positions, for methods that read it (FoX's gates)",
    )
    state: dict[str, TensorIn] | None = Field(
        default=None,
        description="model-coupled methods (TAPE): the position state entering the layer, each tensor "
        "(B, H, Nk, D) by name ('cos', 'sin'); default: the first layer's. The response has the state leaving "
        "the layer as tensors 'state.<name>' (B, H, Nq, D)",
    )
    causal: bool | None = Field(
        default=None,
        description="mask keys after the query (j > i + query_offset, in token order); default true, false "
        "when grid, positions or graph is given",
    )
    query_offset: int | None = Field(default=None, ge=0, le=MAX_LENGTH, description=QUERY_OFFSET_DESCRIPTION)
    grid: GridSizes | None = Field(
        default=None, description="2D/3D methods: the keys are prefix_tokens tokens, then this grid's in C order"
    )
    prefix_tokens: int = Field(default=0, ge=0, le=MAX_LENGTH, description=PREFIX_DESCRIPTION)
    positions: TensorIn | list[Int64] | list[list[Int64]] | None = Field(
        default=None, description=POSITIONS_DESCRIPTION
    )
    graph: GraphIn | None = Field(default=None, description="graph methods: the keys are its nodes (positions = ids)")
    key_padding_mask: TensorIn | list[list[bool]] | None = Field(
        default=None, description="(B, Nk) booleans, true = a padding key that nobody attends to"
    )
    stats: bool = Field(default=True, description="per-head entropy, mean distance, mass by distance")
    scale: float | None = Field(default=None, gt=0, description="logit scale; default 1/sqrt(D)")
    pairing: Literal["half", "interleaved"] | None = Field(
        default=None, description="rotary methods: half or interleaved; default the method's own"
    )
    dtype: FloatDType | None = None

    @property
    def resolved_causal(self) -> bool:
        if self.causal is not None:
            return self.causal
        return self.grid is None and self.graph is None and self.positions is None


def default_query_offset(query_offset: int | None, query_length: int, key_length: int) -> int:
    """The explicit offset, else bottom-right alignment: the last query is the last key when Nk > Nq."""
    if query_offset is not None:
        return query_offset
    return max(key_length - query_length, 0)
