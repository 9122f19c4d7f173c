"""A small pre-LN decoder-only transformer in which the positional encoding is the only variable.

Token embedding -> L x [x + Attn(LN(x)), x + FFN(LN(x))] -> LN -> untied head; FFN 4d with GELU, no dropout,
biases in the block projections, none in the head (2 layers, d=128, 65 symbols: 413,440 parameters, the
LM-X model of the text benchmark). The PE enters through its kind's applier (``posenc.pe.appliers``): the
model calls ``fast_embed`` on the token embeddings and ``layer_attend`` in every attention layer, and never looks
at the kind. A method the registry marks ``per_layer`` (XL's W_R, FoX's gate projection, Shaw's tables) gets one
instance of its learned parameters per layer; every other method one shared instance (``pe``).

A method's raw params become its training params through ``MethodSpec.training_params``: the registry's
``training_defaults`` (posenc's choice for training, e.g. FoX's decay-time gate init) fill in the keys the
job's params leave out; ``MethodSpec.training_params_note`` says when they did.

Fixed PE tensors are cached per (length, device) and never saved; learned ones (``MethodSpec.learned``) are
``nn.Parameter``s initialised by ``spec.learned_init`` and handed to the method through
``params.model_copy(update=...)`` (once; the applier is rebuilt only if the Parameter objects change), so each
forward runs the method's own formula on them and gradients flow through it.

Every draw follows the model's ``seed`` (the run seed). The non-PE weights are drawn from a private generator
seeded by ``seed`` before the PE modules exist, so two models with the same seed and different methods start
from identical non-PE weights. Each learned PE instance is initialised from ``pe_init_seed(seed, params.seed,
layer)``, so the run seed, the method's own ``seed`` param and the layer each change its tables.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from posenc.patterns import LayerSetup
from posenc.pe import MethodParams, get_method
from posenc.pe.appliers import Applier, Layer, build_applier
from posenc.real_models.configs import query_temperature
from posenc.schemas.tensors import INT64_MAX

INIT_STD = 0.02  # GPT-2 / nanoGPT initialisation of every linear and embedding weight


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild a model (saved as JSON next to its weights)."""

    vocab_size: int
    layers: int
    dim: int
    heads: int
    method: str
    params: dict[str, Any] = field(default_factory=dict)  # the method's raw (JSON) params
    ffn_mult: int = 4
    train_length: int = 128  # the context learned methods are initialised for
    pairing: Literal["half", "interleaved"] | None = None  # rotary methods: the pairs q, k rotate (None: the method's)
    # a layer pattern: every layer's resolved setup (``posenc.patterns.LayerSetup.to_json``); None: ``method``
    # and ``params`` in every layer
    layer_setups: list[dict[str, Any]] | None = None

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelConfig:
        return cls(**data)


# ---------------------------------------------------------------------------------------------------- PE
def pe_init_seed(run_seed: int, params_seed: int, layer: int) -> int:
    """The seed a learned PE instance draws its initial tensors from: the first 8 bytes of
    BLAKE2b("posenc-pe-init:{run_seed}:{params_seed}:{layer}") as an integer, masked to [0, 2^63 − 1] (a
    ``Seed``). Any change of the run seed, the method's ``params.seed`` or the layer index gives an unrelated
    seed, without the collisions of a sum (run 0 at params.seed 1 is not run 1 at params.seed 0)."""
    text = f"posenc-pe-init:{run_seed}:{params_seed}:{layer}".encode()
    digest = hashlib.blake2b(text, digest_size=8).digest()
    return int.from_bytes(digest, "little") & INT64_MAX


class PositionalEncoding(nn.Module):
    """One instance of a registered method in a model: its learned parameters, and the applier built on them.

    ``raw_params`` become ``spec.training_params(raw_params)`` (the registry's training defaults filled in).
    Learned methods are initialised for ``init_tokens`` tokens (on ``init_grid`` for multi-axis methods) by the
    method's ``learned_init``, from ``pe_init_seed(run_seed, params.seed, layer_index)``: the run's seed, the
    method's seed and the layer (per-layer instances do not start identical) each change the initial tensors.
    ``learned=False`` holds no weights (the shared instance of a per-layer method).
    """

    def __init__(
        self,
        method: str,
        raw_params: dict[str, Any],
        layer: Layer,
        *,
        init_tokens: int,
        init_grid: tuple[int, ...] | None = None,
        run_seed: int = 0,
        layer_index: int = 0,
        learned: bool = True,
    ) -> None:
        super().__init__()
        self.spec = get_method(method)
        self.params: MethodParams = self.spec.parse_params(self.spec.training_params(raw_params))
        self.layer = layer
        self.learned = nn.ParameterDict()
        self._listed: dict[str, int] = {}  # a list-valued init (axial's tables): its name -> its length
        self._cache: dict[Any, Any] = {}
        self._applier: tuple[tuple[torch.Tensor, ...], Applier] | None = None  # see ``applier``
        if self.spec.learned and learned:
            if self.spec.learned_init is None:
                raise ValueError(f"{method!r} is learned but has no learned_init, so it cannot be trained")
            if "seed" in type(self.params).model_fields:  # every draw from the method's seed follows the run's
                seed = pe_init_seed(run_seed, int(getattr(self.params, "seed", 0)), layer_index)
                self.params = self.params.model_copy(update={"seed": seed})
            init_context = build_applier(self.spec, self.params, layer).init_context(init_tokens, init_grid)
            for name, value in self.spec.learned_init(self.params, init_context).items():
                tensors = value if isinstance(value, list | tuple) else [value]
                if isinstance(value, list | tuple):
                    self._listed[name] = len(value)  # one parameter per element: name__0, name__1, ...
                for index, tensor in enumerate(tensors):
                    key = f"{name}__{index}" if name in self._listed else name
                    self.learned[key] = nn.Parameter(torch.as_tensor(tensor, dtype=torch.float32).clone())

    def applier(self, layer: Layer | None = None) -> Applier:
        """The applier with the current learned tensors substituted (differentiable); fixed tables cached.
        ``layer`` replaces the model's layer for one call (a graph model's layer carries each example's graph),
        uncached: the cache keys omit the graph."""
        if layer is not None:
            return build_applier(self.spec, self._current_params(), layer)
        # Built once, not every forward: the learned tensors go into the params as the nn.Parameter objects
        # themselves, which the optimizer and load_state_dict update in place, and the method runs its formula
        # on them at each call, so gradients still flow. Rebuilt if the objects are swapped (by identity).
        tensors = tuple(self.learned.values())
        built = self._applier
        if (
            built is None
            or len(built[0]) != len(tensors)
            or any(a is not b for a, b in zip(built[0], tensors, strict=True))
        ):
            built = (tensors, build_applier(self.spec, self._current_params(), self.layer, cache=self._cache))
            self._applier = built
        return built[1]

    @torch.no_grad()
    def keep_in_bounds(self) -> None:
        """Clamp each learned parameter into its method's ``learned_bounds`` (in place; after an optimizer step)."""
        for name, (low, high) in self.spec.learned_bounds.items():
            if name in self.learned:
                self.learned[name].clamp_(min=low, max=high)

    def _current_params(self) -> MethodParams:
        """The params with the learned tensors in (a list-valued one put back together as its list)."""
        if not self.learned:
            return self.params
        listed = {f"{name}__{index}" for name, count in self._listed.items() for index in range(count)}
        update: dict[str, Any] = {name: tensor for name, tensor in self.learned.items() if name not in listed}
        for name, count in self._listed.items():
            update[name] = [self.learned[f"{name}__{index}"] for index in range(count)]
        return self.params.model_copy(update=update)


def attach_positional_encodings(
    blocks: nn.ModuleList,
    method: str,
    raw_params: dict[str, Any],
    layer: Layer,
    *,
    seed: int | None = None,
    **init: Any,
) -> PositionalEncoding:
    """The model's shared instance of ``method``, and each block's own (``block.pe``) when the registry marks it
    ``per_layer``; then the shared one holds no weights and only embeds and starts the position state. Call it
    after the non-PE weights are drawn, so they do not depend on the method. ``seed`` is the run seed the learned
    tables follow; None takes the one ``init_weights`` recorded on the blocks."""
    run_seed = seed if seed is not None else _recorded_seed(blocks)
    per_layer = get_method(method).per_layer
    shared = PositionalEncoding(method, raw_params, layer, learned=not per_layer, run_seed=run_seed, **init)
    if per_layer:
        for index, block in enumerate(blocks):
            block.pe = PositionalEncoding(method, raw_params, layer, run_seed=run_seed, layer_index=index, **init)
    return shared


def _recorded_seed(blocks: nn.ModuleList) -> int:
    """The run seed ``init_weights`` drew the blocks' weights from (the same for every block)."""
    seeds = {block.run_seed for block in blocks if isinstance(block, Block)}
    if len(seeds) != 1 or None in seeds:
        raise ValueError("draw the blocks' weights with init_weights (or pass seed) before attaching the PE")
    recorded = seeds.pop()
    assert recorded is not None
    return recorded


def init_weights(model: nn.Module, seed: int, layers: int) -> None:
    """N(0, 0.02) weights (residual outputs scaled by 1/√(2L), GPT-2), zero biases, unit LayerNorms, drawn in
    module order from a generator seeded by ``seed``; ``seed`` is recorded on every ``Block`` (``run_seed``), for
    ``attach_positional_encodings``."""
    generator = torch.Generator().manual_seed(seed)
    residual_std = INIT_STD / math.sqrt(2 * layers)
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, Block):
                module.run_seed = seed
            if isinstance(module, nn.Linear | nn.Embedding | nn.Conv2d):
                std = residual_std if name.endswith(("attn.out", "ffn_out")) else INIT_STD
                module.weight.normal_(0.0, std, generator=generator)
                if isinstance(module, nn.Linear | nn.Conv2d) and module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()


# ------------------------------------------------------------------------------------------------- model
class LayerPE(Protocol):
    """What a block needs of its positional encoding: an ``Applier``, or a graph model's one applier per
    example (``posenc.training.graph_task.ExampleAppliers``)."""

    def layer_attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        x: torch.Tensor | None = None,
        state: Any = None,
        pos: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]: ...

    def update_state(self, x: torch.Tensor, state: Any) -> Any:
        """The state after the feed-forward sublayer; ``x`` (B, T, D) is that sublayer's output FFN(LN(x)),
        before the residual add."""


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(
        self,
        x: torch.Tensor,
        pe: LayerPE,
        state: Any,
        pos: torch.Tensor | None = None,
        q_scale: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """``q_scale`` (T, 1): a per-position factor on the queries (Llama 4's temperature), else None."""
        batch, length, dim = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.heads, dim // self.heads)  # (B, T, 3, H, d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, T, d_head)
        if q_scale is not None:
            q = q * q_scale  # (B, H, T, d_head) · (T, 1)
        attended, state = pe.layer_attend(q, k, v, x=x, state=state, pos=pos)  # (B, H, T, d_head); x feeds gates
        merged = attended.transpose(1, 2).reshape(batch, length, dim)  # (B, T, H·d_head)
        out: torch.Tensor = self.out(merged)
        return out, state


class Block(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + FFN(LN(x)) with a GELU FFN of width ffn_mult·d; causal or not as
    the applier's layer is, at positions ``pos`` (default arange(T))."""

    def __init__(self, dim: int, heads: int, ffn_mult: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn_in = nn.Linear(dim, ffn_mult * dim)
        self.ffn_out = nn.Linear(ffn_mult * dim, dim)
        self.pe: PositionalEncoding | None = None  # this layer's own instance, for per-layer methods
        # a pattern's (floor_scale, attn_scale, position_offset) on the queries
        self.temperature: tuple[float, float, float] | None = None
        self.run_seed: int | None = None  # the seed init_weights drew the weights from

    def forward(
        self, x: torch.Tensor, pe: LayerPE, state: Any, pos: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, Any]:
        """The block's output, and the position state of a model-coupled method (None for the others). ``pe``
        is this layer's applier: built on ``self.pe`` for a ``per_layer`` method, else the model's shared one
        (``block_pe``).

        A model-coupled method's state is updated from the feed-forward sublayer's output FFN(LN(x)) before the
        residual add, as TAPE's code does (``VITA-Group/TAPE``, ``models/llama/adape.py``,
        ``LlamaDecoderLayer.forward``: ``h = mlp(post_attention_layernorm(h))``, then ``pe(h, E)``, marked "this
        order is important"; the residuals of h and E are added after)."""
        scale = None
        if self.temperature is not None:  # Llama 4: τ(n) at positions arange(T), (T,) -> (T, 1)
            index = torch.arange(x.shape[1], device=x.device)
            scale = query_temperature(index, *self.temperature).to(x.dtype)[:, None]
        attended, state = self.attn(self.attn_norm(x), pe, state, pos, scale)
        x = x + attended
        ffn = self.ffn_out(F.gelu(self.ffn_in(self.ffn_norm(x))))  # (B, T, D): FFN(LN(x)), before the residual add
        state = pe.update_state(ffn, state)  # TAPE: E ← E + W_down(SiLU(FFN W_x) ⊙ W_up E)
        out: torch.Tensor = x + ffn
        return out, state


def attach_layer_pattern(
    blocks: nn.ModuleList, setups: list[LayerSetup], base: Layer, *, seed: int, init_tokens: int
) -> PositionalEncoding:
    """A layer pattern: each block its own instance of its layer's method, on a layer that rotates its share
    of the head (rounded down to whole pairs) and attends over its span; queries of a layer with a temperature
    are scaled by it. The shared instance is NoPE: nothing is added to the embeddings, no state starts. The
    patterns' methods act inside attention only (``posenc.tasks`` refuses absolute and model-coupled ones)."""
    if len(setups) != len(blocks):
        raise ValueError(f"{len(setups)} layer setups for {len(blocks)} layers")
    for index, (block, setup) in enumerate(zip(blocks, setups, strict=True)):
        assert isinstance(block, Block)
        rotary_dim = None
        if setup.rotary_fraction < 1.0:
            rotary_dim = 2 * int(setup.rotary_fraction * base.head_dim / 2)  # whole pairs, as HF's int(d·f)
        layer = replace(base, rotary_dim=rotary_dim, window=setup.window, chunk=setup.chunk)
        block.pe = PositionalEncoding(
            setup.method, setup.params, layer, run_seed=seed, layer_index=index, init_tokens=init_tokens
        )
        block.temperature = setup.temperature
    return PositionalEncoding("nope", {}, base, learned=False, run_seed=seed, init_tokens=init_tokens)


def block_pe(block: Block, shared: Applier) -> Applier:
    """The applier a block attends with: its own instance's (per-layer methods), else the shared one."""
    return block.pe.applier() if block.pe is not None else shared


class TinyTransformer(nn.Module):
    """Decoder-only LM: ids (B, T) -> logits (B, T, V), at any T the PE method supports."""

    def __init__(self, config: ModelConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config.dim, config.heads, config.ffn_mult) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        init_weights(self, seed, config.layers)
        layer = Layer(
            num_heads=config.heads, head_dim=config.head_dim, causal=True, model_dim=config.dim, pairing=config.pairing
        )
        if config.layer_setups is not None:
            setups = [LayerSetup.from_json(setup) for setup in config.layer_setups]
            self.pe = attach_layer_pattern(self.blocks, setups, layer, seed=seed, init_tokens=config.train_length)
        else:
            self.pe = attach_positional_encodings(
                self.blocks, config.method, config.params, layer, seed=seed, init_tokens=config.train_length
            )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        shared = self.pe.applier()
        x = shared.fast_embed(self.token_embedding(ids))  # (B, T, D), P at positions arange(T)
        state = shared.initial_state(ids.shape[0], length, ids.device)
        for block in self.blocks:
            assert isinstance(block, Block)
            x, state = block(x, block_pe(block, shared), state)
        logits: torch.Tensor = self.head(self.final_norm(x))  # (B, T, V)
        return logits

    def attention_paths(self, length: int, device: torch.device) -> list[str]:
        """The attention path each layer takes at T = ``length`` on ``device`` (``posenc.pe.paths``)."""
        shared = self.pe.applier()
        return [block_pe(block, shared).training_path(length, device) for block in self.blocks]  # type: ignore[arg-type]


def attention_paths_of(model: nn.Module, device: str) -> list[str] | None:
    """Each layer's attention path at the model's training length on ``device``: the decoders' (the ViT and graph
    models attend at explicit positions and record none)."""
    if not isinstance(model, TinyTransformer):
        return None
    return model.attention_paths(model.config.train_length, torch.device(device))


def bounded_encodings(model: nn.Module) -> list[PositionalEncoding]:
    """The position encodings of ``model`` whose methods keep learned parameters in bounds (what a trainer
    clamps after every step, ``PositionalEncoding.keep_in_bounds``)."""
    return [m for m in model.modules() if isinstance(m, PositionalEncoding) and m.spec.learned_bounds]


def count_parameters(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())
