"""Wire models of the posenc API, GENERATED from tests/contract/openapi.json: do not edit by hand.

Regenerate (from the repository root) after the server's contract changes:
    .venv/bin/python clients/python/scripts/regenerate_models.py --snapshot
tests/contract/test_sdk_models.py fails while this file and the snapshot disagree.
"""

from __future__ import annotations

# ruff: noqa
# mypy: disable-error-code="assignment"
# (the generator gives optional constrained scalars, e.g. rotary_dim, a root model defaulting to None)

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, RootModel


class Artifact(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    name: Annotated[str, Field(title="Name")]
    size: Annotated[int | None, Field(title="Size")] = None
    url: Annotated[str, Field(title="Url")]


class AttentionRequest(BaseModel):
    """
    ``POST /v1/attention``: attention weights (B, H, Nq, Nk) with the method applied by its kind, and the
    output (B, H, Nq, Dv) when ``v`` is given.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    causal: Annotated[bool | None, Field(title="Causal")] = None
    """
    mask keys after the query (j > i + query_offset, in token order); default true, false when grid, positions or graph is given
    """
    dtype: Annotated[
        Literal["float32", "float64", "bfloat16", "float16"] | None,
        Field(title="Dtype"),
    ] = None
    graph: GraphIn | None = None
    """
    graph methods: the keys are its nodes (positions = ids)
    """
    grid: Annotated[Grid | None, Field(title="Grid")] = None
    """
    2D/3D methods: the keys are prefix_tokens tokens, then this grid's in C order
    """
    k: Annotated[TensorData | RandomTensor, Field(title="K")]
    key_padding_mask: Annotated[
        TensorData | RandomTensor | list[list[bool]] | None,
        Field(title="Key Padding Mask"),
    ] = None
    """
    (B, Nk) booleans, true = a padding key that nobody attends to
    """
    method: Annotated[str, Field(title="Method")]
    """
    registered method name, see GET /v1/methods
    """
    pairing: Annotated[Literal["half", "interleaved"] | None, Field(title="Pairing")] = None
    """
    rotary methods: half or interleaved; default the method's own
    """
    params: Annotated[dict[str, Any] | None, Field(title="Params")] = None
    """
    method parameters; validated against the method's params_schema
    """
    positions: Annotated[
        TensorData | RandomTensor | list[Position] | list[list[Position]] | None,
        Field(title="Positions"),
    ] = None
    """
    int positions of the keys: (N,) for 1D methods, (N, A) coordinates for 2D/3D methods ((row, col) or (frame, row, col)); negative rows are prefix tokens (prefix p at -(p + 1)); the queries are the last Nq keys
    """
    prefix_tokens: Annotated[int, Field(ge=0, le=1048576, title="Prefix Tokens")] = 0
    """
    tokens before the grid's (CLS, registers, a graph's virtual token): not rotated, biased or encoded the way grid tokens are (identity rotation; the method's own prefix entries or 0)
    """
    q: Annotated[TensorData | RandomTensor, Field(title="Q")]
    query_offset: Annotated[QueryOffset | None, Field(title="Query Offset")] = None
    """
    position of the first query among the keys: query i sits at position i + query_offset, key j at j. Default: key_length - query_length when there are more keys than queries (the queries are the last tokens, as in KV-cache decoding, FlashAttention >= 2.1 and Hugging Face's cache_position), else 0
    """
    scale: Annotated[Scale | None, Field(title="Scale")] = None
    """
    logit scale; default 1/sqrt(D)
    """
    state: Annotated[dict[str, TensorData | RandomTensor] | None, Field(title="State")] = None
    """
    model-coupled methods (TAPE): the position state entering the layer, each tensor (B, H, Nk, D) by name ('cos', 'sin'); default: the first layer's. The response has the state leaving the layer as tensors 'state.<name>' (B, H, Nq, D)
    """
    stats: Annotated[bool, Field(title="Stats")] = True
    """
    per-head entropy, mean distance, mass by distance
    """
    v: Annotated[TensorData | RandomTensor | None, Field(title="V")] = None
    """
    (B, H, Nk, Dv) values: the response then has 'output'
    """
    x: Annotated[TensorData | RandomTensor | None, Field(title="X")] = None
    """
    (B, Nk, D_model) the layer input at the key positions, for methods that read it (FoX's gates)
    """


class BatchLengths(RootModel[list[int]]):
    root: Annotated[list[int], Field(max_length=16, min_length=1, title="Batch Lengths")]
    """
    a left-padded batch's row lengths, each 1 ... 4096; default [length, length/2]
    """


class BiasRequest(BaseModel):
    """
    ``POST /v1/bias``: B of shape (H, Nq, Nk), or the (H, Nq + Nk - 1) table for Toeplitz methods.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    causal: Annotated[bool | None, Field(title="Causal")] = None
    """
    mask keys after the query (j > i + query_offset) with -inf (and use the method's causal form); default true for 1D sequences, false for a grid or a graph (token order is no direction there)
    """
    dtype: Annotated[Literal["float32", "float64", "bfloat16", "float16"], Field(title="Dtype")] = "float32"
    form: Annotated[Literal["dense", "toeplitz"], Field(title="Form")] = "dense"
    """
    toeplitz: (H, Nq + Nk - 1) with B[h, i, j] = table[h, i - j + Nk - 1] (i, j row and column indices; the positions differ by i + query_offset - j)
    """
    graph: GraphIn | None = None
    """
    graph methods: the tokens are its nodes
    """
    grid: Annotated[Grid1 | None, Field(title="Grid")] = None
    """
    2D/3D methods: the grid of the tokens (self-attention)
    """
    key_length: Annotated[KeyLength | None, Field(title="Key Length")] = None
    """
    defaults to query_length
    """
    method: Annotated[str, Field(title="Method")]
    """
    registered method name, see GET /v1/methods
    """
    num_heads: Annotated[int, Field(ge=1, le=1024, title="Num Heads")]
    params: Annotated[dict[str, Any] | None, Field(title="Params")] = None
    """
    method parameters; validated against the method's params_schema
    """
    prefix_tokens: Annotated[int, Field(ge=0, le=1048576, title="Prefix Tokens")] = 0
    """
    tokens before the grid's (CLS, registers, a graph's virtual token): not rotated, biased or encoded the way grid tokens are (identity rotation; the method's own prefix entries or 0)
    """
    query_length: Annotated[QueryLength | None, Field(title="Query Length")] = None
    """
    required for 1D methods; with a grid or a graph it is their token count
    """
    query_offset: Annotated[QueryOffset | None, Field(title="Query Offset")] = None
    """
    position of the first query among the keys: query i sits at position i + query_offset, key j at j. Default: key_length - query_length when there are more keys than queries (the queries are the last tokens, as in KV-cache decoding, FlashAttention >= 2.1 and Hugging Face's cache_position), else 0
    """


class Chunk(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=1048576, title="Chunk")]
    """
    chunked attention: blocks of c tokens, each seeing only itself
    """


class ChunkSizes(RootModel[list[int]]):
    root: Annotated[list[int], Field(max_length=8, min_length=1, title="Chunk Sizes")]
    """
    chunked prefill's chunk sizes, each 1 ... length; default [length/4]
    """


class CompareRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    max_position: Annotated[int, Field(ge=0, le=1048576, title="Max Position")]
    seed: Annotated[int, Field(ge=0, le=9223372036854776000, title="Seed")] = 0
    setup_a: SetupIn
    setup_b: SetupIn
    tolerance_angle: Annotated[float, Field(ge=0.0, title="Tolerance Angle")] = 0.001
    tolerance_logit: Annotated[float, Field(ge=0.0, title="Tolerance Logit")] = 0.001


class ComputeJobSpec(BaseModel):
    """
    Kind ``compute``: the body of ``POST /v1/{route}``, run by a worker without the gateway's output budget
    (``max_job_output_bytes`` instead); every tensor goes to the artifact ``tensors.safetensors``.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    request: Annotated[
        BiasRequest | RotaryRequest | EncodingRequest | AttentionRequest,
        Field(title="Request"),
    ]
    """
    that route's JSON request body, validated by its model; tensors inline or {'random': ...}
    """
    route: Annotated[Literal["bias", "rotary", "encodings", "attention"], Field(title="Route")]
    """
    the compute route whose request this is: POST /v1/{route}
    """


class Config(RootModel[str]):
    root: Annotated[str, Field(max_length=128, min_length=1, title="Config")]
    """
    a preset's name (GET /v1/models)
    """


class Config1(RootModel[str]):
    root: Annotated[str, Field(max_length=128, title="Config")]
    """
    decoders: a real model's config.json, or a preset's name (GET /v1/models): every layer gets the positional setup POST /v1/models/resolve gives it (method, θ, scaling, rotated share, NoPE, window, temperature), its context lengths scaled to train.length and its spans a quarter of it, the shortest repeating unit of its layers tiled over the model's; give no method, params, pattern or layers with it
    """


class Config2(RootModel[str]):
    root: Annotated[str, Field(max_length=128, min_length=1, title="Config")]
    """
    a preset's name (GET /v1/models)
    """


class ConfigWarningOut(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    code: Annotated[str, Field(title="Code")]
    """
    the bug pattern, e.g. sliding_layers_scaled, rope_theta_outside_rope_parameters
    """
    evidence: Annotated[dict[str, Any], Field(title="Evidence")]
    """
    the config values that show it
    """
    layers: Annotated[list[int], Field(title="Layers")]
    """
    the layers concerned (empty: the whole config)
    """
    message: Annotated[str, Field(title="Message")]


class ConvertRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    config: Annotated[dict[str, Any] | Config, Field(title="Config")]
    to: Annotated[Literal["v4", "v5"], Field(title="To")]
    """
    Hugging Face v4 (rope_scaling) or v5 (rope_parameters)
    """


class ConvertResponse(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    config: Annotated[dict[str, Any], Field(title="Config")]


class Corpus(RootModel[str]):
    root: Annotated[str, Field(max_length=4096, title="Corpus")]
    """
    text: 'stdlib' (built offline from the Python standard library), 'tinyshakespeare' (tinyshakespeare.txt in a data directory), or a text file under the data directories (POSENC_DATA_DIR, POSENC_DATA_DIRS), by name relative to one of them or by an absolute path inside one
    """


class DataSpec(BaseModel):
    """
    The data: a character-level corpus, or a task of one of the task families (``posenc.tasks``: synthetic
    sequence tasks, RULER-style probes, image tasks on a ViT, graph tasks on a graph transformer). Each family
    reads its own fields; a field of another family is refused, naming it.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    corpus: Annotated[Corpus | None, Field(title="Corpus")] = None
    """
    text: 'stdlib' (built offline from the Python standard library), 'tinyshakespeare' (tinyshakespeare.txt in a data directory), or a text file under the data directories (POSENC_DATA_DIR, POSENC_DATA_DIRS), by name relative to one of them or by an absolute path inside one
    """
    graph_family: Annotated[Literal["tree", "er"] | None, Field(title="Graph Family")] = None
    """
    graph tasks: 'tree' (uniform random labelled trees, the default) or 'er' (sparse Erdos-Renyi graphs made connected)
    """
    image_size: Annotated[ImageSize | None, Field(title="Image Size")] = None
    """
    image tasks: training resolution in pixels (default 32)
    """
    max_distance: Annotated[MaxDistance | None, Field(title="Max Distance")] = None
    """
    graph tasks: classes of distance 1 ... max_distance, the last one '>= max_distance' (default 5)
    """
    num_nodes: Annotated[NumNodes | None, Field(title="Num Nodes")] = None
    """
    graph tasks: nodes per training graph (default 12)
    """
    patch_size: Annotated[PatchSize | None, Field(title="Patch Size")] = None
    """
    image tasks: side of a square patch in pixels (default 4)
    """
    probes: Annotated[Probes | None, Field(title="Probes")] = None
    """
    probes: which probes the model is trained on
    """
    size: Annotated[Size | None, Field(title="Size")] = None
    """
    sequence tasks: the largest training size, in items
    """
    task: Annotated[Task | None, Field(title="Task")] = None
    """
    a task of a task family: synthetic sequence tasks (copy, copy_single, copy_replace, reverse, addition, selective_copy, counting, flip_flop, parity, sort), the probes ('probes'), image tasks (shapes, quadrant, above_left, same_diagonal) or graph tasks (graph_distance); GET /v1/tasks lists them
    """
    val_fraction: Annotated[float, Field(gt=0.0, lt=0.5, title="Val Fraction")] = 0.1
    """
    text: the validation split's share
    """


class DecodeRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    prefill: Annotated[int, Field(ge=1, le=8192, title="Prefill")]
    seed: Annotated[int, Field(ge=0, le=9223372036854776000, title="Seed")] = 0
    setup: SetupIn
    steps: Annotated[int, Field(ge=1, le=8192, title="Steps")]
    tolerance: Annotated[float, Field(ge=0.0, title="Tolerance")] = 1e-09


class Depth(RootModel[float]):
    root: Annotated[float, Field(ge=0.0, le=1.0)]


class Depths(RootModel[list[Depth]]):
    root: Annotated[list[Depth], Field(max_length=16, min_length=1, title="Depths")]
    """
    probes: needle depths (default 0, 1/4, 1/2, 3/4, 1)
    """


class Documents(RootModel[list[int]]):
    root: Annotated[list[int], Field(max_length=64, min_length=1, title="Documents")]
    """
    packed documents' lengths, 4096 tokens in all; default two of length/2
    """


class EdgeFeatures1Item(RootModel[int]):
    root: Annotated[int, Field(ge=-9223372036854776000, le=9223372036854776000)]


class EdgeFeatures1(RootModel[list[EdgeFeatures1Item]]):
    root: Annotated[list[EdgeFeatures1Item], Field(max_length=1000000, title="Edge Features")]
    """
    one categorical id (or a list of at most 64 ids) per edge, in the order of edges
    """


class EdgeFeatures2ItemItem(RootModel[int]):
    root: Annotated[int, Field(ge=-9223372036854776000, le=9223372036854776000)]


class EdgeFeatures2Item(RootModel[list[EdgeFeatures2ItemItem]]):
    root: Annotated[list[EdgeFeatures2ItemItem], Field(max_length=64)]


class EdgeFeatures2(RootModel[list[EdgeFeatures2Item]]):
    root: Annotated[list[EdgeFeatures2Item], Field(max_length=1000000, title="Edge Features")]
    """
    one categorical id (or a list of at most 64 ids) per edge, in the order of edges
    """


class EdgeFeatures(RootModel[EdgeFeatures1 | EdgeFeatures2]):
    root: Annotated[EdgeFeatures1 | EdgeFeatures2, Field(title="Edge Features")]
    """
    one categorical id (or a list of at most 64 ids) per edge, in the order of edges
    """


class EdgeItem(RootModel[int]):
    root: Annotated[int, Field(ge=-9223372036854776000, le=9223372036854776000)]


class Edge(RootModel[tuple[EdgeItem, EdgeItem]]):
    root: Annotated[tuple[EdgeItem, EdgeItem], Field(max_length=2, min_length=2)]


class EncodingRequest(BaseModel):
    """
    ``POST /v1/encodings``: absolute encoding P of shape (length, dim) or (*grid, dim).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    dim: Annotated[int, Field(ge=1, le=65536, title="Dim")]
    dtype: Annotated[Literal["float32", "float64", "bfloat16", "float16"], Field(title="Dtype")] = "float32"
    graph: GraphIn | None = None
    """
    graph methods: encode its nodes (N = num_nodes)
    """
    grid: Annotated[Grid2 | None, Field(title="Grid")] = None
    """
    (H, W) or (T, H, W) for 2D/3D methods
    """
    length: Annotated[Length | None, Field(title="Length")] = None
    method: Annotated[str, Field(title="Method")]
    """
    registered method name, see GET /v1/methods
    """
    params: Annotated[dict[str, Any] | None, Field(title="Params")] = None
    """
    method parameters; validated against the method's params_schema
    """
    prefix_tokens: Annotated[int, Field(ge=0, le=1048576, title="Prefix Tokens")] = 0
    """
    also return 'prefix' (P, dim): the prefix tokens' rows
    """


class EngineNoteOut(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    code: Annotated[str, Field(title="Code")]
    """
    the pattern: cos_sin_scale, mla_mscale_softmax, derived_max_length, ...
    """
    elsewhere: Annotated[str, Field(title="Elsewhere")]
    """
    what the cited public threads show another engine did or does
    """
    huggingface: Annotated[str, Field(title="Huggingface")]
    """
    what Hugging Face computes for this config (checked here)
    """
    layers: Annotated[list[int], Field(title="Layers")]
    """
    the layers concerned (empty: the whole config)
    """
    sources: Annotated[list[str], Field(title="Sources")]
    """
    the threads (GitHub issues and pull requests)
    """


class EvalSpec(BaseModel):
    """
    The evaluation sizes, each family in its own unit: ``lengths`` in tokens (text, probes), ``sizes`` in items
    (sequence tasks), ``resolutions`` in pixels (images), ``num_nodes`` in nodes (graphs). The training size is
    always evaluated too.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    depths: Annotated[Depths | None, Field(title="Depths")] = None
    """
    probes: needle depths (default 0, 1/4, 1/2, 3/4, 1)
    """
    lengths: Annotated[Lengths | None, Field(title="Lengths")] = None
    """
    text and probes: evaluation lengths in tokens; default text [L, 2L, 4L, 8L], probes [L/4, L/2, L, 2L, 4L, 8L] with L = train.length
    """
    max_tokens: Annotated[int, Field(ge=1, le=9223372036854776000, title="Max Tokens")] = 65536
    """
    scored tokens per length (text)
    """
    num_nodes: Annotated[NumNodes1 | None, Field(title="Num Nodes")] = None
    """
    graph tasks: evaluation graph sizes in nodes; default [2n/3, n, 4n/3, 2n] with n = data.num_nodes (those of at least 3 nodes)
    """
    protocol: Annotated[Literal["nonoverlapping", "sliding"], Field(title="Protocol")] = "nonoverlapping"
    resolutions: Annotated[Resolutions | None, Field(title="Resolutions")] = None
    """
    image tasks: evaluation resolutions in pixels, multiples of data.patch_size; default [S/2, 3S/4, S, 3S/2, 2S] with S = data.image_size (those that are multiples of the patch)
    """
    samples: Annotated[int, Field(ge=1, le=9223372036854776000, title="Samples")] = 100
    """
    held-out examples per size: sequences (tasks), per probe (probes), images, graphs
    """
    sizes: Annotated[Sizes | None, Field(title="Sizes")] = None
    """
    sequence tasks: evaluation sizes in items; default every size 1 ... 2n, then 3n and 4n with n = data.size
    """
    stride: Annotated[Stride | None, Field(title="Stride")] = None
    """
    sliding: tokens scored per window (default L/2)
    """


class ExtensionSpec(BaseModel):
    """
    A context-extension study (benchmark only; text and probes): one base model per seed trained at
    ``train.length`` and kept, then every entry of ``methods`` (an arm: a rotary scaling rule) applied to it at
    evaluation only and, with ``finetune_steps``, also after a short fine-tune at ``finetune_length`` with the
    rule in place. An arm's params that it leaves out are filled from the study: ``base`` from the base model,
    ``factor`` from ``factor``, ``original_max_position_embeddings`` from ``train.length``.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    base: MethodRef | None = None
    """
    the base model's method: a rotary method, trained once per seed and reused by every arm
    """
    factor: Annotated[float, Field(ge=1.0, le=1024.0, title="Factor")] = 2.0
    """
    the arms' scaling factor where their params give none
    """
    finetune_length: Annotated[FinetuneLength | None, Field(title="Finetune Length")] = None
    """
    the fine-tune's sequence length (default factor x train.length)
    """
    finetune_lr: Annotated[FinetuneLr | None, Field(title="Finetune Lr")] = None
    """
    the fine-tune's peak lr (default train.lr)
    """
    finetune_steps: Annotated[int, Field(ge=0, le=1000000, title="Finetune Steps")] = 0
    """
    0: the arms at evaluation only; else also each arm fine-tuned for this many steps from the base model (and the base model itself, unscaled, as the fine-tune's control)
    """


class FieldError(BaseModel):
    """
    One invalid field: ``loc`` is the path into the request (e.g. ``["body", "params", "factor"]``).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    loc: Annotated[list[str | int], Field(title="Loc")]
    msg: Annotated[str, Field(title="Msg")]
    type: Annotated[str, Field(title="Type")]


class FinetuneLength(RootModel[int]):
    root: Annotated[int, Field(ge=2, le=65536, title="Finetune Length")]
    """
    the fine-tune's sequence length (default factor x train.length)
    """


class FinetuneLr(RootModel[float]):
    root: Annotated[float, Field(gt=0.0, le=1.0, title="Finetune Lr")]
    """
    the fine-tune's peak lr (default train.lr)
    """


class FrequenciesRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    setup: SetupIn
    train_length: Annotated[int, Field(ge=1, le=67108864, title="Train Length")]
    """
    the training context the pairs are read at
    """


class GgufRequest(BaseModel):
    """
    ``POST /v1/models/gguf``: a GGUF's header metadata (as the SDK's ``read_gguf`` reads it) resolved per
    layer, and compared with a Hugging Face config of the same model when ``against`` is given.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    against: Annotated[dict[str, Any] | str | None, Field(title="Against")] = None
    """
    a Hugging Face config.json of the same model (or a preset's name) to compare with: every rope field the conversion dropped, renamed or changed, and every layer that resolves differently, is a warning
    """
    metadata: Annotated[dict[str, Any], Field(max_length=4096, title="Metadata")]
    """
    the GGUF's key/value metadata: general.architecture, {arch}.block_count, {arch}.rope.*, {arch}.attention.*; numbers, strings, booleans and arrays of them (strings up to 4096 characters, arrays up to 8192 values, 65536 in all)
    """
    tensors: Annotated[dict[str, list[float]] | None, Field(max_length=3, title="Tensors")] = None
    """
    the GGUF's rope tensors by name (rope_freqs.weight, rope_factors_long.weight, rope_factors_short.weight): one factor per rotary pair, at most 4096
    """


class GgufResolved(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    against: Annotated[str | None, Field(title="Against")]
    """
    what the GGUF was compared with: 'config', a preset's name, or null
    """
    config: Annotated[dict[str, Any], Field(title="Config")]
    """
    the Hugging Face style config the GGUF's metadata maps to
    """
    engine_notes: Annotated[list[EngineNoteOut] | None, Field(title="Engine Notes")] = None
    """
    where engines are known to compute this config differently: Hugging Face's numbers, and as cited text what differs elsewhere
    """
    layers: Annotated[list[LayerRopeOut], Field(title="Layers")]
    model_type: Annotated[str | None, Field(title="Model Type")]
    warnings: Annotated[list[ConfigWarningOut], Field(title="Warnings")]


class GraphIn(BaseModel):
    """
    A graph for graph methods (Graphormer, Laplacian PE): nodes 0 … num_nodes − 1.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    directed: Annotated[bool, Field(title="Directed")] = False
    """
    false: every edge is traversed both ways
    """
    edge_features: Annotated[EdgeFeatures | None, Field(title="Edge Features")] = None
    """
    one categorical id (or a list of at most 64 ids) per edge, in the order of edges
    """
    edges: Annotated[list[Edge] | None, Field(max_length=1000000, title="Edges")] = None
    """
    (u, v) node id pairs
    """
    num_nodes: Annotated[int, Field(ge=1, le=4096, title="Num Nodes")]


class Grid1Item(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=65536)]


class Grid1(RootModel[list[Grid1Item]]):
    root: Annotated[list[Grid1Item], Field(max_length=3, min_length=2, title="Grid")]
    """
    (rows, cols) for 2D methods, (frames, rows, cols) for 3D
    """


class Grid2Item(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=65536)]


class Grid2(RootModel[list[Grid2Item]]):
    root: Annotated[list[Grid2Item], Field(max_length=3, min_length=1, title="Grid")]
    """
    (H, W) or (T, H, W) for 2D/3D methods
    """


class Grid3Item(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=65536)]


class Grid3(RootModel[list[Grid3Item]]):
    root: Annotated[list[Grid3Item], Field(max_length=3, min_length=2, title="Grid")]
    """
    (rows, cols) for 2D methods, (frames, rows, cols) for 3D
    """


class Grid4(RootModel[list[int]]):
    root: Annotated[list[int], Field(max_length=3, min_length=3, title="Grid")]
    """
    image / video: (T, H, W) patches before the merge
    """


class GridItem(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=65536)]


class Grid(RootModel[list[GridItem]]):
    root: Annotated[list[GridItem], Field(max_length=3, min_length=2, title="Grid")]
    """
    (rows, cols) for 2D methods, (frames, rows, cols) for 3D
    """


class ImageSize(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=1024, title="Image Size")]
    """
    image tasks: training resolution in pixels (default 32)
    """


class Job(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    artifacts: Annotated[list[Artifact] | None, Field(title="Artifacts")] = None
    attempts: Annotated[int, Field(title="Attempts")] = 0
    children: Annotated[list[JobChild] | None, Field(title="Children")] = None
    """
    a benchmark that fanned out (one job per run, on any worker): its runs, in run order; its progress is theirs summed. They are listed by GET /v1/jobs?parent={id}
    """
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    error: Annotated[str | None, Field(title="Error")] = None
    estimate_s: Annotated[float | None, Field(title="Estimate S")] = None
    """
    seconds this job should take on one worker of its queue (started_at to finished_at), estimated when it was submitted: per process and per run set-up, training steps, tokens, evaluation sizes and multiply-adds, each at its default cost, scaled by how fast this deployment's workers ran their recent runs of the same task family and attention path. Several workers share a benchmark's runs
    """
    finished_at: Annotated[AwareDatetime | None, Field(title="Finished At")] = None
    id: Annotated[str, Field(title="Id")]
    kind: Annotated[Literal["train", "extrapolate", "benchmark", "compute"], Field(title="Kind")]
    parent: Annotated[str | None, Field(title="Parent")] = None
    """
    a run of a benchmark that fanned out: the benchmark's job id
    """
    progress: JobProgress | None = None
    queue: Annotated[str, Field(title="Queue")] = "cpu"
    result: Annotated[dict[str, Any] | None, Field(title="Result")] = None
    spec: Annotated[dict[str, Any], Field(title="Spec")]
    started_at: Annotated[AwareDatetime | None, Field(title="Started At")] = None
    status: Annotated[
        Literal["queued", "running", "succeeded", "failed", "cancelled", "expired"],
        Field(title="Status"),
    ]
    updated_at: Annotated[AwareDatetime | None, Field(title="Updated At")] = None


class JobChild(BaseModel):
    """
    One (method, seed) run of a benchmark that fanned out, or one (task, method, seed) run of a suite: a job of
    its own (``GET /v1/jobs/{id}``).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    id: Annotated[str, Field(title="Id")]
    method: Annotated[str, Field(title="Method")]
    """
    the run's method label, as in the result table ('rope', 'rope#2', ...)
    """
    seed: Annotated[int, Field(title="Seed")]
    status: Annotated[
        Literal["queued", "running", "succeeded", "failed", "cancelled", "expired"],
        Field(title="Status"),
    ]
    step: Annotated[int, Field(title="Step")] = 0
    task: Annotated[str | None, Field(title="Task")] = None
    """
    a suite's run: the task it belongs to ('copy_single', ...)
    """
    total: Annotated[int, Field(title="Total")] = 0


class JobCreate(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    kind: Annotated[Literal["train", "extrapolate", "benchmark", "compute"], Field(title="Kind")]
    spec: Annotated[JobSpec | ComputeJobSpec, Field(title="Spec")]
    """
    train, extrapolate, benchmark: a JobSpec; compute: a ComputeJobSpec {route, request}
    """


class JobEvent(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    at: Annotated[str, Field(title="At")]
    """
    when, ISO 8601 UTC
    """
    event: Annotated[str, Field(title="Event")]
    """
    what happened: a state transition, or a line the job wrote (a study's base model trained or reused)
    """


class JobEventList(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    data: Annotated[list[JobEvent], Field(title="Data")]


class JobList(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    count: Annotated[int, Field(title="Count")]
    data: Annotated[list[JobSummary], Field(title="Data")]


class JobProgress(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    eta_s: Annotated[float | None, Field(title="Eta S")] = None
    loss: Annotated[float | None, Field(title="Loss")] = None
    stage: Annotated[str | None, Field(title="Stage")] = None
    """
    e.g. 'train rope seed 0' or 'eval 512'
    """
    step: Annotated[int, Field(title="Step")] = 0
    total: Annotated[int, Field(title="Total")] = 0


class JobSpec(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    checkpoint: Annotated[str | None, Field(title="Checkpoint")] = None
    """
    extrapolate only: id of a finished train job whose model to evaluate
    """
    data: DataSpec | None = None
    device: Annotated[Literal["auto", "cpu", "cuda"], Field(title="Device")] = "auto"
    eval: EvalSpec | None = None
    extension: ExtensionSpec | None = None
    """
    benchmark only: a context-extension study; its methods are the arms (rotary scaling rules) applied to one base model per seed
    """
    methods: Annotated[list[MethodRef] | None, Field(max_length=32, title="Methods")] = None
    """
    at least one; only a suite's spec may leave them out, and then gets the suite's own methods (the 'leaderboard' suite: every 1D method that trains in a job)
    """
    model: ModelSpec | None = None
    seeds: Annotated[list[Seed] | None, Field(max_length=64, min_length=1, title="Seeds")] = None
    suite: Annotated[Suite | None, Field(title="Suite")] = None
    """
    benchmark only: a named preset ('quick', 'standard', 'paper', 'leaderboard') that sets data, model, train and eval for each of its tasks; give methods (and seeds to override the suite's)
    """
    train: TrainSpec | None = None


class JobSummary(BaseModel):
    """
    One job in a listing: what it is, its state and its links, without its spec, result or artifacts (the
    whole record is ``GET /v1/jobs/{id}``). Its size does not depend on the spec or the result.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    attempts: Annotated[int, Field(title="Attempts")] = 0
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    error: Annotated[str | None, Field(title="Error")] = None
    """
    the error's first 500 characters; the job's record has it whole
    """
    estimate_s: Annotated[float | None, Field(title="Estimate S")] = None
    """
    the job's estimate_s, as in its record
    """
    finished_at: Annotated[AwareDatetime | None, Field(title="Finished At")] = None
    id: Annotated[str, Field(title="Id")]
    kind: Annotated[Literal["train", "extrapolate", "benchmark", "compute"], Field(title="Kind")]
    methods: Annotated[list[str] | None, Field(title="Methods")] = None
    """
    the names of the spec's method entries (their label, else the method, the config preset, or 'config'); a run of a benchmark: its own; empty for a compute job; null for a job whose record predates this field
    """
    parent: Annotated[str | None, Field(title="Parent")] = None
    """
    a run of a benchmark that fanned out: the benchmark's job id
    """
    progress: JobProgress | None = None
    queue: Annotated[str, Field(title="Queue")] = "cpu"
    runs: Annotated[int, Field(title="Runs")] = 0
    """
    a benchmark that fanned out: how many runs it has (GET /v1/jobs?parent={id} lists them); its progress is theirs summed
    """
    started_at: Annotated[AwareDatetime | None, Field(title="Started At")] = None
    status: Annotated[
        Literal["queued", "running", "succeeded", "failed", "cancelled", "expired"],
        Field(title="Status"),
    ]
    updated_at: Annotated[AwareDatetime | None, Field(title="Updated At")] = None


class KeyLength(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=1048576, title="Key Length")]
    """
    defaults to query_length
    """


class Label(RootModel[str]):
    root: Annotated[
        str,
        Field(max_length=64, min_length=1, pattern="^[A-Za-z0-9_.+-]+$", title="Label"),
    ]
    """
    the entry's name in results (default: the method, or the method and its pattern)
    """


class Layer(RootModel[int]):
    root: Annotated[int, Field(ge=0, le=1023, title="Layer")]
    """
    with config: the layer index
    """


class Layer1(RootModel[int]):
    root: Annotated[int, Field(ge=0, le=1023, title="Layer")]


class LayerOverride(BaseModel):
    """
    One layer of a pattern's unit: what it changes of the entry's method and params.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    chunk: Annotated[Chunk | None, Field(title="Chunk")] = None
    """
    chunked attention: blocks of c tokens, each seeing only itself
    """
    method: Annotated[Method | None, Field(title="Method")] = None
    """
    this layer's method (default: the entry's); 'nope' for none
    """
    params: Annotated[dict[str, Any] | None, Field(title="Params")] = None
    """
    this layer's params: merged over the entry's when the method is the entry's, else its own
    """
    rotary_fraction: Annotated[RotaryFraction | None, Field(title="Rotary Fraction")] = None
    """
    rotary methods: the share of each head's features rotated (default 1)
    """
    temperature: QueryTemperature | None = None
    """
    Llama 4's query temperature
    """
    window: Annotated[Window | None, Field(title="Window")] = None
    """
    sliding window: query i attends to keys i − w + 1 .. i
    """


class LayerRopeOut(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    attention_scale: Annotated[float, Field(title="Attention Scale")]
    """
    multiplies cos and sin (YaRN / LongRoPE): logits x its square
    """
    chunk: Annotated[int | None, Field(title="Chunk")] = None
    compress_rate: Annotated[int | None, Field(title="Compress Rate")] = None
    """
    DeepSeek-V4's compressed layers: compressed key i is rotated at position i x compress_rate
    """
    head_dim: Annotated[int, Field(title="Head Dim")]
    indexer: LayerRopeOut | None = None
    """
    DeepSeek-V3.2 / GLM-5: the sparse-attention indexer's own rotation (its head, slice, pairing)
    """
    layer: Annotated[int, Field(title="Layer")]
    layer_type: Annotated[str, Field(title="Layer Type")]
    """
    full_attention, sliding_attention, chunked_attention, indexed_attention (DeepSeek Sparse Attention), linear_attention (no attention scores, no RoPE), or DeepSeek-V4's compressed_sparse_attention and heavily_compressed_attention
    """
    method: Annotated[str | None, Field(title="Method")]
    """
    a registered rotary method, or null for a NoPE layer
    """
    mrope_section: Annotated[list[int] | None, Field(title="Mrope Section")] = None
    notes: Annotated[list[str] | None, Field(title="Notes")] = None
    """
    what else about the layer's attention a port must keep (gpt-oss's sinks)
    """
    pairing: Annotated[str, Field(title="Pairing")]
    """
    half (rotate_half) or interleaved
    """
    params: Annotated[dict[str, Any], Field(title="Params")]
    """
    in the method's own parameter names
    """
    query_temperature: Annotated[dict[str, Any] | None, Field(title="Query Temperature")] = None
    rotary_dim: Annotated[int, Field(title="Rotary Dim")]
    """
    features rotated per head (0 on NoPE layers)
    """
    rotary_slice: Annotated[list[int], Field(title="Rotary Slice")]
    """
    [start, stop) of the rotated features in a head
    """
    shared_key_rope: Annotated[bool, Field(title="Shared Key Rope")] = False
    """
    MLA: one rotated key part shared by all heads
    """
    softmax_scale: Annotated[float, Field(title="Softmax Scale")]
    """
    the logits' multiplier before the softmax
    """
    softmax_scale_source: Annotated[str, Field(title="Softmax Scale Source")]
    window: Annotated[int | None, Field(title="Window")] = None


class Layers(RootModel[list[LayerOverride]]):
    root: Annotated[list[LayerOverride], Field(max_length=64, min_length=1, title="Layers")]
    """
    decoders: a unit of per-layer setups written out, tiled over the model's layers
    """


class Length(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=1048576, title="Length")]


class Length1(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=1048576)]


class Lengths(RootModel[list[Length1]]):
    root: Annotated[list[Length1], Field(max_length=64, title="Lengths")]
    """
    text and probes: evaluation lengths in tokens; default text [L, 2L, 4L, 8L], probes [L/4, L/2, L, 2L, 4L, 8L] with L = train.length
    """


class MaxDistance(RootModel[int]):
    root: Annotated[int, Field(ge=2, le=256, title="Max Distance")]
    """
    graph tasks: classes of distance 1 ... max_distance, the last one '>= max_distance' (default 5)
    """


class Method(RootModel[str]):
    root: Annotated[str, Field(max_length=128, title="Method")]
    """
    this layer's method (default: the entry's); 'nope' for none
    """


class Method1(RootModel[str]):
    root: Annotated[str, Field(max_length=128, title="Method")]
    """
    the method; with a pattern or layers, the method every layer starts from; none with a config
    """


class MethodInfo(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    axes: Annotated[int, Field(title="Axes")] = 1
    """
    coordinates per position: 1 for sequences, 2 for images, 3 for video, 0 for graph nodes
    """
    causal_only: Annotated[bool, Field(title="Causal Only")] = False
    """
    defined for causal attention only
    """
    config_keys: Annotated[list[str] | None, Field(title="Config Keys")] = None
    """
    real models' configs: the keys of a rope dict this method reads
    """
    config_spellings: Annotated[list[str] | None, Field(title="Config Spellings")] = None
    """
    real models' configs: the rope_type values that name this method (POST /v1/models/resolve)
    """
    conventions: Annotated[dict[str, str] | None, Field(title="Conventions")] = None
    """
    the conventions papers disagree on, and which one this method follows
    """
    family: Annotated[str, Field(title="Family")]
    """
    the module the method lives in, e.g. 'rope_scaling'
    """
    kind: Annotated[
        Literal["absolute", "bias", "rotary", "score_mod", "attention"],
        Field(title="Kind"),
    ]
    """
    What a method changes; each kind has one function signature (see ``posenc.pe.types``).
    """
    learned: Annotated[bool, Field(title="Learned")]
    """
    has trainable parameters (supplied as tensors or initialised from a seed)
    """
    model_coupled: Annotated[bool, Field(title="Model Coupled")] = False
    """
    carries a position state from layer to layer (TAPE); /v1/attention gives one layer's update
    """
    name: Annotated[str, Field(title="Name")]
    needs: Annotated[list[str] | None, Field(title="Needs")] = None
    """
    layer inputs the method reads besides q and k ('x': the layer input)
    """
    pairings: Annotated[list[str] | None, Field(title="Pairings")] = None
    """
    rotary methods: the pairings it rotates in, its own first (a request that names none gets it; another is refused)
    """
    paper: Annotated[str, Field(title="Paper")]
    """
    citation and URL of the paper the formula comes from
    """
    params_schema: Annotated[dict[str, Any], Field(title="Params Schema")]
    """
    JSON schema of 'params', with the paper's defaults
    """
    per_layer: Annotated[bool, Field(title="Per Layer")] = False
    """
    a model keeps one set of the method's learned parameters per layer
    """
    summary: Annotated[str, Field(title="Summary")]
    """
    first line of the method's docstring
    """
    toeplitz: Annotated[bool, Field(title="Toeplitz")] = False
    """
    bias methods only: depends on i - j alone, so form='toeplitz' is available
    """


class MethodList(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    count: Annotated[int, Field(title="Count")]
    data: Annotated[list[MethodInfo], Field(title="Data")]


class MethodRef(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    config: Annotated[dict[str, Any] | Config1 | None, Field(title="Config")] = None
    """
    decoders: a real model's config.json, or a preset's name (GET /v1/models): every layer gets the positional setup POST /v1/models/resolve gives it (method, θ, scaling, rotated share, NoPE, window, temperature), its context lengths scaled to train.length and its spans a quarter of it, the shortest repeating unit of its layers tiled over the model's; give no method, params, pattern or layers with it
    """
    label: Annotated[Label | None, Field(title="Label")] = None
    """
    the entry's name in results (default: the method, or the method and its pattern)
    """
    layers: Annotated[Layers | None, Field(title="Layers")] = None
    """
    decoders: a unit of per-layer setups written out, tiled over the model's layers
    """
    method: Annotated[Method1 | None, Field(title="Method")] = None
    """
    the method; with a pattern or layers, the method every layer starts from; none with a config
    """
    params: Annotated[dict[str, Any] | None, Field(title="Params")] = None
    pattern: Annotated[Pattern | None, Field(title="Pattern")] = None
    """
    decoders: a named layer pattern of real models (GET /v1/tasks lists them), tiled over the model's layers; its local spans are a quarter of the training length
    """


class ModelPreset(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    config: Annotated[dict[str, Any], Field(title="Config")]
    """
    the rope-relevant fields of the model's published config.json
    """
    model_type: Annotated[str | None, Field(title="Model Type")]
    name: Annotated[str, Field(title="Name")]


class ModelPresetList(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    count: Annotated[int, Field(title="Count")]
    data: Annotated[list[ModelPreset], Field(title="Data")]


class ModelSpec(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    cls_token: Annotated[bool, Field(title="Cls Token")] = True
    """
    image tasks: classify from a CLS token (else mean-pool); graph tasks: add Graphormer's virtual graph token; text models ignore it
    """
    dim: Annotated[int, Field(ge=8, le=4096, title="Dim")] = 128
    ffn_mult: Annotated[int, Field(ge=1, le=16, title="Ffn Mult")] = 4
    heads: Annotated[int, Field(ge=1, le=256, title="Heads")] = 4
    layers: Annotated[int, Field(ge=1, le=48, title="Layers")] = 2
    pairing: Annotated[Literal["half", "interleaved"] | None, Field(title="Pairing")] = None
    """
    rotary methods: the feature pairs rotated together, half (GPT-NeoX/HF rotate_half) or interleaved (GPT-J/Meta); default each method's own (GET /v1/methods: pairings), a pairing a method cannot rotate in is refused
    """


class NumNodes(RootModel[int]):
    root: Annotated[int, Field(ge=3, le=256, title="Num Nodes")]
    """
    graph tasks: nodes per training graph (default 12)
    """


class NumNodes1Item(RootModel[int]):
    root: Annotated[int, Field(ge=3, le=256)]


class NumNodes1(RootModel[list[NumNodes1Item]]):
    root: Annotated[list[NumNodes1Item], Field(max_length=64, title="Num Nodes")]
    """
    graph tasks: evaluation graph sizes in nodes; default [2n/3, n, 4n/3, 2n] with n = data.num_nodes (those of at least 3 nodes)
    """


class PatchSize(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=256, title="Patch Size")]
    """
    image tasks: side of a square patch in pixels (default 4)
    """


class Pattern(RootModel[str]):
    root: Annotated[str, Field(max_length=64, title="Pattern")]
    """
    decoders: a named layer pattern of real models (GET /v1/tasks lists them), tiled over the model's layers; its local spans are a quarter of the training length
    """


class PatternInfo(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    description: Annotated[str, Field(title="Description")]
    model: Annotated[str, Field(title="Model")]
    """
    the models that ship this layer pattern
    """
    name: Annotated[str, Field(title="Name")]
    """
    the value of a method entry's 'pattern'
    """
    unit: Annotated[list[dict[str, Any]], Field(title="Unit")]
    """
    the repeating unit's layer overrides at a local span of 16 tokens (a job's span is a quarter of its training length, at least 4)
    """


class PermutationRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    head_dim: Annotated[int, Field(ge=2, le=8192, title="Head Dim")]
    rotary_dim: Annotated[RotaryDim | None, Field(title="Rotary Dim")] = None
    to: Annotated[Literal["half", "interleaved"], Field(title="To")]
    """
    half: Meta/interleaved rows -> Hugging Face
    """


class PermutationResponse(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    order: Annotated[list[int], Field(title="Order")]
    """
    within each head: new row r = old row order[r]
    """


class Position(RootModel[int]):
    root: Annotated[int, Field(ge=-9223372036854776000, le=9223372036854776000)]


class PositionIdsRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    advance: Annotated[Literal["max_hw", "max_id"], Field(title="Advance")] = "max_hw"
    """
    the position after a grid: start + max(H, W)/m (transformers 5.x) or one past its largest id
    """
    rule: Annotated[Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"], Field(title="Rule")] = "qwen2_5_vl"
    segments: Annotated[list[SegmentIn], Field(max_length=4096, min_length=1, title="Segments")]
    spatial_merge_size: Annotated[int, Field(ge=1, le=64, title="Spatial Merge Size")] = 2
    tokens_per_second: Annotated[float, Field(gt=0.0, le=1000.0, title="Tokens Per Second")] = 2.0
    """
    Qwen2.5-VL's vision_config value
    """


class PositionIdsResponse(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    ids: Annotated[list[list[int]], Field(title="Ids")]
    """
    (3, N): temporal, height and width ids
    """
    next_position: Annotated[int, Field(title="Next Position")]
    warnings: Annotated[list[str], Field(title="Warnings")]


class PositionsBands(RootModel[list[list[int]]]):
    root: Annotated[list[list[int]], Field(max_length=16, title="Positions Bands")]
    """
    [start, stop) bands; default [0,1k), [1k,8k), [8k,64k), [64k,1M)
    """


class PrecisionRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    dtype: Annotated[Literal["float32", "bfloat16", "float16", "float64"], Field(title="Dtype")] = "bfloat16"
    positions_bands: Annotated[PositionsBands | None, Field(title="Positions Bands")] = None
    """
    [start, stop) bands; default [0,1k), [1k,8k), [8k,64k), [64k,1M)
    """
    positions_per_band: Annotated[int, Field(ge=2, le=1024, title="Positions Per Band")] = 256
    seed: Annotated[int, Field(ge=0, le=9223372036854776000, title="Seed")] = 0
    setup: SetupIn


class Prefill(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=4096, title="Prefill")]
    """
    tokens before token-by-token decode; default length/2
    """


class Probes(RootModel[list[str]]):
    root: Annotated[list[str], Field(max_length=16, min_length=1, title="Probes")]
    """
    probes: which probes the model is trained on
    """


class Problem(BaseModel):
    """
    ``application/problem+json`` body.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    detail: Annotated[str | None, Field(title="Detail")] = None
    errors: Annotated[list[FieldError] | None, Field(title="Errors")] = None
    """
    field errors of a 422; for a 413, the fields that drive the size (type 'budget')
    """
    instance: Annotated[str | None, Field(title="Instance")] = None
    limit: Annotated[int | None, Field(title="Limit")] = None
    """
    the limit that was exceeded (413)
    """
    size: Annotated[int | None, Field(title="Size")] = None
    """
    the size that was asked for (413)
    """
    status: Annotated[int, Field(title="Status")]
    title: Annotated[str, Field(title="Title")]
    type: Annotated[str, Field(title="Type")] = "about:blank"
    """
    URI naming the kind of problem
    """


class QueryLength(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=1048576, title="Query Length")]
    """
    required for 1D methods; with a grid or a graph it is their token count
    """


class QueryOffset(RootModel[int]):
    root: Annotated[int, Field(ge=0, le=1048576, title="Query Offset")]
    """
    position of the first query among the keys: query i sits at position i + query_offset, key j at j. Default: key_length - query_length when there are more keys than queries (the queries are the last tokens, as in KV-cache decoding, FlashAttention >= 2.1 and Hugging Face's cache_position), else 0
    """


class QueryTemperature(BaseModel):
    """
    Llama 4's query temperature: q at position n times log(1 + floor((n + 1)/floor_scale))·attn_scale + 1.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    attn_scale: Annotated[float, Field(ge=0.0, le=10.0, title="Attn Scale")]
    """
    Llama 4: 0.1
    """
    floor_scale: Annotated[float, Field(gt=0.0, le=1048576.0, title="Floor Scale")]
    """
    Llama 4: 8192 (its chunk size)
    """


class RandomSpec(BaseModel):
    """
    Server-side generated tensor: same shape, seed and distribution give the same values.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    distribution: Annotated[Literal["normal", "uniform"], Field(title="Distribution")] = "normal"
    dtype: Annotated[Literal["float32", "float64", "bfloat16", "float16"], Field(title="Dtype")] = "float32"
    seed: Annotated[int, Field(ge=-9223372036854776000, le=9223372036854776000, title="Seed")] = 0
    shape: Annotated[list[ShapeItem], Field(max_length=8, title="Shape")]


class RandomTensor(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    random: RandomSpec


class Requests(RootModel[list[int]]):
    root: Annotated[list[int], Field(max_length=16, min_length=1, title="Requests")]
    """
    requests a transformers model serves one after another (a forward each), each 1 ... 4096 tokens: its dynamic rotary state carries across them and into the transformers_* variants of the prefill / decode sequence; default [length, length/2]
    """


class Resolution(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=1024)]


class Resolutions(RootModel[list[Resolution]]):
    root: Annotated[list[Resolution], Field(max_length=64, title="Resolutions")]
    """
    image tasks: evaluation resolutions in pixels, multiples of data.patch_size; default [S/2, 3S/4, S, 3S/2, 2S] with S = data.image_size (those that are multiples of the patch)
    """


class ResolveRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    config: Annotated[dict[str, Any] | None, Field(title="Config")] = None
    """
    a model's config.json as published: Hugging Face v4 rope_scaling or v5 rope_parameters (flat or per layer type), text_config nesting, partial_rotary_factor, head_dim, no_rope_layers, sliding and chunked attention keys, M-RoPE and MLA keys, vLLM's rope type spellings
    """
    preset: Annotated[str | None, Field(title="Preset")] = None
    """
    a preset's name from GET /v1/models, in place of config
    """


class ResolvedModel(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    engine_notes: Annotated[list[EngineNoteOut] | None, Field(title="Engine Notes")] = None
    """
    where engines are known to compute this config differently: Hugging Face's numbers, and as cited text what differs elsewhere
    """
    layers: Annotated[list[LayerRopeOut], Field(title="Layers")]
    model_type: Annotated[str | None, Field(title="Model Type")]
    warnings: Annotated[list[ConfigWarningOut], Field(title="Warnings")]


class RotaryDim(RootModel[int]):
    root: Annotated[int, Field(ge=2, le=8192, title="Rotary Dim")]


class RotaryDim1(RootModel[int]):
    root: Annotated[int, Field(ge=2, title="Rotary Dim")]
    """
    rotate only the first rotary_dim features (partial rotary); even
    """


class RotaryFraction(RootModel[float]):
    root: Annotated[float, Field(gt=0.0, le=1.0, title="Rotary Fraction")]
    """
    rotary methods: the share of each head's features rotated (default 1)
    """


class RotaryRequest(BaseModel):
    """
    ``POST /v1/rotary``: rotate q and k of shape (B, H, N, D) by their positions, with a method and params or
    with a model's config and a layer index.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    config: Annotated[dict[str, Any] | Config2 | None, Field(title="Config")] = None
    """
    a model's config.json (any dialect POST /v1/models/resolve reads) or a preset's name, in place of method and params: the layer's method, params, rotated slice and pairing come from it
    """
    dtype: Annotated[
        Literal["float32", "float64", "bfloat16", "float16"] | None,
        Field(title="Dtype"),
    ] = None
    """
    output dtype; default the dtype of q
    """
    grid: Annotated[Grid3 | None, Field(title="Grid")] = None
    """
    2D/3D methods: positions of the tokens of this grid
    """
    k: Annotated[TensorData | RandomTensor | None, Field(title="K")] = None
    """
    omit with rotate='query'; same D as q
    """
    layer: Annotated[Layer | None, Field(title="Layer")] = None
    """
    with config: the layer index
    """
    method: Annotated[str | None, Field(title="Method")] = None
    """
    registered rotary method, see GET /v1/methods; or give config and layer
    """
    offset: Annotated[int, Field(ge=0, le=67108864, title="Offset")] = 0
    """
    added to the default positions (KV-cache decoding); offset + N - 1 <= 2^26, the largest position whose angles are exact to float32 rounding
    """
    pairing: Annotated[Literal["half", "interleaved"] | None, Field(title="Pairing")] = None
    """
    half: pairs (k, k + d/2) (GPT-NeoX/HF); interleaved: pairs (2k, 2k + 1) (GPT-J/Meta); default the method's own (GET /v1/methods: pairings); one the method cannot rotate in is refused
    """
    params: Annotated[dict[str, Any] | None, Field(title="Params")] = None
    """
    method parameters; validated against the method's params_schema
    """
    positions: Annotated[
        TensorData | RandomTensor | list[Position] | list[list[Position]] | None,
        Field(title="Positions"),
    ] = None
    """
    int positions (N,), or (N, A) coordinates for 2D/3D methods ((row, col), (frame, row, col)); negative rows are prefix tokens, left unrotated; default arange(N) + offset
    """
    prefix_tokens: Annotated[int, Field(ge=0, le=1048576, title="Prefix Tokens")] = 0
    """
    tokens before the grid's (CLS, registers, a graph's virtual token): not rotated, biased or encoded the way grid tokens are (identity rotation; the method's own prefix entries or 0)
    """
    q: Annotated[TensorData | RandomTensor, Field(title="Q")]
    return_tables: Annotated[bool, Field(title="Return Tables")] = False
    """
    also return cos and sin, (N, rotary_dim / 2) each: one angle per rotated pair
    """
    rotary_dim: Annotated[RotaryDim1 | None, Field(title="Rotary Dim")] = None
    """
    rotate only the first rotary_dim features (partial rotary); even
    """
    rotate: Annotated[Literal["both", "query"], Field(title="Rotate")] = "both"
    """
    query: rotate q only (cross-attention)
    """


class Scale(RootModel[float]):
    root: Annotated[float, Field(gt=0.0, title="Scale")]
    """
    logit scale; default 1/sqrt(D)
    """


class Seed(RootModel[int]):
    root: Annotated[int, Field(ge=-9223372036854776000, le=9223372036854776000)]


class SegmentIn(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    grid: Annotated[Grid4 | None, Field(title="Grid")] = None
    """
    image / video: (T, H, W) patches before the merge
    """
    kind: Annotated[Literal["text", "image", "video"], Field(title="Kind")]
    length: Annotated[int, Field(ge=0, le=1048576, title="Length")] = 0
    """
    text: its tokens
    """
    seconds_per_grid: Annotated[float, Field(gt=0.0, le=3600.0, title="Seconds Per Grid")] = 1.0
    """
    video: seconds per temporal grid step (at most an hour); the ids it makes must stay below 2^26
    """


class ServeCheckRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    batch_lengths: Annotated[BatchLengths | None, Field(title="Batch Lengths")] = None
    """
    a left-padded batch's row lengths, each 1 ... 4096; default [length, length/2]
    """
    chunk_sizes: Annotated[ChunkSizes | None, Field(title="Chunk Sizes")] = None
    """
    chunked prefill's chunk sizes, each 1 ... length; default [length/4]
    """
    documents: Annotated[Documents | None, Field(title="Documents")] = None
    """
    packed documents' lengths, 4096 tokens in all; default two of length/2
    """
    heads: Annotated[int, Field(ge=1, le=64, title="Heads")] = 4
    """
    attention heads (bias methods give each its slope)
    """
    length: Annotated[int, Field(ge=2, le=4096, title="Length")] = 64
    """
    tokens of the prefill / decode sequence
    """
    prefill: Annotated[Prefill | None, Field(title="Prefill")] = None
    """
    tokens before token-by-token decode; default length/2
    """
    requests: Annotated[Requests | None, Field(title="Requests")] = None
    """
    requests a transformers model serves one after another (a forward each), each 1 ... 4096 tokens: its dynamic rotary state carries across them and into the transformers_* variants of the prefill / decode sequence; default [length, length/2]
    """
    seed: Annotated[int, Field(ge=0, le=9223372036854776000, title="Seed")] = 0
    setup: ServeSetupIn
    sinks: Annotated[int, Field(ge=0, le=4096, title="Sinks")] = 4
    """
    the eviction cache's sink tokens
    """
    tolerance: Annotated[float, Field(ge=0.0, title="Tolerance")] = 1e-09
    """
    a logit error above it is wrong
    """
    window: Annotated[Window1 | None, Field(title="Window")] = None
    """
    the eviction cache's recent tokens; default length/4
    """


class ServeSetupIn(BaseModel):
    """
    A layer's use of positions: a method (rotary, or a bias method such as ALiBi) with params, rotary_dim (q and
    k features per head, rotated or not) and pairing; or a model config and a layer (a NoPE layer included).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    config: Annotated[dict[str, Any] | Config2 | None, Field(title="Config")] = None
    """
    a model's config.json or a preset's name
    """
    layer: Annotated[Layer1 | None, Field(title="Layer")] = None
    method: Annotated[str | None, Field(title="Method")] = None
    """
    a registered rotary or bias method
    """
    pairing: Annotated[Literal["half", "interleaved"] | None, Field(title="Pairing")] = None
    """
    half or interleaved; default the method's own (GET /v1/methods: pairings)
    """
    params: Annotated[dict[str, Any] | None, Field(title="Params")] = None
    """
    the method's params
    """
    rotary_dim: Annotated[int, Field(ge=2, le=8192, title="Rotary Dim")] = 128
    """
    rotated features per head; even
    """


class SetupIn(BaseModel):
    """
    One layer's rotation: a method with params, rotary_dim and pairing; or a model config and a layer.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    config: Annotated[dict[str, Any] | Config2 | None, Field(title="Config")] = None
    """
    a model's config.json or a preset's name
    """
    layer: Annotated[Layer1 | None, Field(title="Layer")] = None
    method: Annotated[str | None, Field(title="Method")] = None
    """
    a registered rotary method
    """
    pairing: Annotated[Literal["half", "interleaved"] | None, Field(title="Pairing")] = None
    """
    half or interleaved; default the method's own (GET /v1/methods: pairings)
    """
    params: Annotated[dict[str, Any] | None, Field(title="Params")] = None
    """
    the method's params
    """
    rotary_dim: Annotated[int, Field(ge=2, le=8192, title="Rotary Dim")] = 128
    """
    rotated features per head; even
    """


class ShapeItem(RootModel[int]):
    root: Annotated[int, Field(ge=0, le=2147483647)]


class Size(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=4096, title="Size")]
    """
    sequence tasks: the largest training size, in items
    """


class Size1(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=4096)]


class Sizes(RootModel[list[Size1]]):
    root: Annotated[list[Size1], Field(max_length=64, title="Sizes")]
    """
    sequence tasks: evaluation sizes in items; default every size 1 ... 2n, then 3n and 4n with n = data.size
    """


class Stride(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=9223372036854776000, title="Stride")]
    """
    sliding: tokens scored per window (default L/2)
    """


class Suite(RootModel[str]):
    root: Annotated[str, Field(max_length=32, title="Suite")]
    """
    benchmark only: a named preset ('quick', 'standard', 'paper', 'leaderboard') that sets data, model, train and eval for each of its tasks; give methods (and seeds to override the suite's)
    """


class SuiteInfo(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    budget: Annotated[str, Field(title="Budget")]
    """
    the duration it is sized for
    """
    description: Annotated[str, Field(title="Description")]
    name: Annotated[str, Field(title="Name")]
    seeds: Annotated[list[int], Field(title="Seeds")]
    tasks: Annotated[list[str], Field(title="Tasks")]


class Task(RootModel[str]):
    root: Annotated[str, Field(max_length=64, title="Task")]
    """
    a task of a task family: synthetic sequence tasks (copy, copy_single, copy_replace, reverse, addition, selective_copy, counting, flip_flop, parity, sort), the probes ('probes'), image tasks (shapes, quadrant, above_left, same_diagonal) or graph tasks (graph_distance); GET /v1/tasks lists them
    """


class TaskCatalogue(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    patterns: Annotated[list[PatternInfo], Field(title="Patterns")]
    """
    the named layer patterns a decoder job's method entry may use
    """
    suites: Annotated[list[SuiteInfo], Field(title="Suites")]
    tasks: Annotated[list[TaskInfo], Field(title="Tasks")]


class TaskInfo(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    about: Annotated[str, Field(title="About")]
    eval_field: Annotated[str, Field(title="Eval Field")]
    """
    where a spec gives the evaluation sizes, e.g. 'eval.sizes'
    """
    family: Annotated[str, Field(title="Family")]
    higher_is_better: Annotated[bool, Field(title="Higher Is Better")]
    metric: Annotated[str, Field(title="Metric")]
    """
    the headline metric of result rows and plots
    """
    metrics: Annotated[list[str], Field(title="Metrics")]
    task: Annotated[str, Field(title="Task")]
    """
    the data.task name ('(data.corpus)' for text, chosen by its corpus)
    """
    train_field: Annotated[str, Field(title="Train Field")]
    """
    where a spec gives the training size, e.g. 'data.size'
    """
    unit: Annotated[str, Field(title="Unit")]
    """
    the unit of every size a spec gives or a result reports for this task
    """


class TemperatureRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    config: Annotated[dict[str, Any] | Config2, Field(title="Config")]
    """
    a model's config.json or a preset's name
    """
    layer: Annotated[int, Field(ge=0, le=1023, title="Layer")]
    length: Annotated[int, Field(ge=1, le=1048576, title="Length")]
    """
    positions offset ... offset + length - 1
    """
    offset: Annotated[int, Field(ge=0, le=1099511627776, title="Offset")] = 0
    """
    the first position (tokens already cached)
    """


class TemperatureResponse(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    applies: Annotated[bool, Field(title="Applies")]
    """
    whether the layer scales its queries (Llama 4: the NoPE layers; Mistral 3: the RoPE layers)
    """
    formula: Annotated[str | None, Field(title="Formula")]
    temperature: Annotated[list[float], Field(title="Temperature")]
    """
    per position: the factor on q (1 where it does not apply)
    """


class TensorData(BaseModel):
    """
    A tensor given inline: exactly one of ``data`` (flat, row-major) or ``base64`` (little-endian bytes).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    base64: Annotated[str | None, Field(title="Base64")] = None
    data: Annotated[
        list[float | int | bool | Literal["nan", "inf", "-inf"]] | None,
        Field(title="Data"),
    ] = None
    dtype: Annotated[
        Literal["float32", "float64", "bfloat16", "float16", "int64", "int32", "bool"],
        Field(title="Dtype"),
    ] = "float32"
    shape: Annotated[list[ShapeItem], Field(max_length=8, title="Shape")]


class TensorOut(BaseModel):
    """
    A tensor in a JSON response: flat row-major ``data``; non-finite values as strings.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    data: Annotated[list[float | int | bool | Literal["nan", "inf", "-inf"]], Field(title="Data")]
    dtype: Annotated[str, Field(title="Dtype")]
    shape: Annotated[list[int], Field(title="Shape")]


class TensorResponse(BaseModel):
    """
    The ``application/json`` body of every compute route.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    meta: Annotated[dict[str, Any] | None, Field(title="Meta")] = None
    tensors: Annotated[dict[str, TensorOut], Field(title="Tensors")]


class TrainSpec(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    batch_size: Annotated[int, Field(ge=1, le=4096, title="Batch Size")] = 32
    checkpoint_every: Annotated[int, Field(ge=1, le=9223372036854776000, title="Checkpoint Every")] = 100
    """
    steps between checkpoints (resume point)
    """
    compile: Annotated[Literal["auto", "on", "off"], Field(title="Compile")] = "auto"
    """
    torch.compile the model's training step (Inductor; its caches in the state directory, shared by every worker of the machine): auto: on CUDA only (on the CPU a first compile costs 10-60 s, more than most CPU runs); on; off: eager. A compile that fails falls back to eager and the run's record says why
    """
    length: Annotated[int, Field(ge=2, le=65536, title="Length")] = 128
    """
    training sequence length L
    """
    lr: Annotated[float, Field(gt=0.0, le=1.0, title="Lr")] = 0.002
    precision: Annotated[Literal["auto", "bf16", "fp32"], Field(title="Precision")] = "auto"
    """
    auto: bf16 autocast with TF32 matmuls on CUDA, float32 on the CPU; bf16: bf16 autocast on either device; fp32: float32 everywhere
    """
    steps: Annotated[int, Field(ge=1, le=10000000, title="Steps")] = 1000
    until: UntilSpec | None = None
    """
    stop once learned (checked every until.every steps on held-out data); train.steps is the cap
    """
    warmup_steps: Annotated[int, Field(ge=0, le=9223372036854776000, title="Warmup Steps")] = 50
    weight_decay: Annotated[float, Field(ge=0.0, title="Weight Decay")] = 0.01


class UntilSpec(BaseModel):
    """
    Train until learned: every ``every`` steps the model is scored on ``samples`` held-out examples of its
    training size, and training stops once the family's headline in-distribution metric reaches ``score``;
    ``train.steps`` stays the cap (and the learning-rate schedule's length).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    every: Annotated[int, Field(ge=1, le=1000000, title="Every")] = 100
    """
    training steps between checks
    """
    samples: Annotated[int, Field(ge=1, le=9223372036854776000, title="Samples")] = 50
    """
    held-out examples per check (as eval.samples; text: windows of train.length)
    """
    score: Annotated[float | None, Field(title="Score")] = None
    """
    the threshold on the headline in-distribution metric (accuracies: at least this, in [0, 1]; perplexity: at most this); default the family's own learned rule (accuracies >= 0.9; probes: every probe, the control included, >= 0.8); text has none: give a score
    """


class Window(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=1048576, title="Window")]
    """
    sliding window: query i attends to keys i − w + 1 .. i
    """


class Window1(RootModel[int]):
    root: Annotated[int, Field(ge=1, le=4096, title="Window")]
    """
    the eviction cache's recent tokens; default length/4
    """


LayerRopeOut.model_rebuild()
