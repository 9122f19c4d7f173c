"""A small pre-LN decoder-only transformer in which the positional encoding is the only variable.

Token embedding -> L x [x + Attn(LN(x)), x + FFN(LN(x))] -> LN -> untied head; FFN 4d with GELU, no dropout,
biases in the block projections, none in the head (2 layers, d=128, 65 symbols: 413,440 parameters, the
LM-X model of evaluation.md §1.4). The PE is applied by its kind, through the registry and
``posenc.pe.kinds``:

    absolute  P (T, D) from ``posenc.pe.encoding`` added to the token embeddings
    bias      B (H, T, T) from ``posenc.pe.bias_dense`` (causal −inf included) added to the scaled scores
    rotary    q and k rotated by ``posenc.pe.apply_rotary``; xPos scales q by ζ^(n/λ) and k by its reciprocal

Fixed PE tensors are cached per (length, device) and never saved; learned ones (``MethodSpec.learned``) are
``nn.Parameter``s initialised by ``spec.learned_init`` and passed back to the method each forward through
``params.model_copy(update=...)``, so gradients flow through the method's own formula.

The non-PE weights are drawn from a private generator seeded by ``seed`` before the PE module exists, so two
models with the same seed and different methods start from identical non-PE weights.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posenc.pe import (
    AbsoluteContext,
    BiasContext,
    MethodParams,
    RotaryContext,
    apply_rotary,
    bias_dense,
    encoding,
    get_method,
    rotary_frequencies,
    rotary_tables,
    xpos_scale,
)
from posenc.pe.ops import Pairing
from posenc.schemas.methods import Kind

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

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelConfig:
        return cls(**data)


# ---------------------------------------------------------------------------------------------------- PE
class PositionalEncoding(nn.Module):
    """One registered method applied by its kind; holds the learned parameters and caches fixed tensors."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.spec = get_method(config.method)
        self.params: MethodParams = self.spec.parse_params(config.params)
        self.kind = self.spec.kind
        self.dim = config.dim
        self.heads = config.heads
        self.head_dim = config.head_dim
        self.pairing: Pairing = "interleaved" if getattr(self.params, "pairing", "half") == "interleaved" else "half"
        self.learned = nn.ParameterDict()
        if self.spec.learned:
            if self.spec.learned_init is None:
                raise ValueError(f"{config.method!r} is learned but has no learned_init, so it cannot be trained")
            initial = self.spec.learned_init(self.params, self._init_context(config.train_length))
            for name, tensor in initial.items():
                self.learned[name] = nn.Parameter(torch.as_tensor(tensor, dtype=torch.float32).clone())
        self._cache: dict[tuple[str, int, str], Any] = {}

    def _init_context(self, length: int) -> AbsoluteContext | BiasContext | RotaryContext:
        """The context ``learned_init`` gets: the training length and the model's widths."""
        if self.kind is Kind.ABSOLUTE:
            return AbsoluteContext(grid=(length,), dim=self.dim)
        if self.kind is Kind.BIAS:
            return BiasContext(num_heads=self.heads, query_length=length, key_length=length, causal=True)
        return RotaryContext(rotary_dim=self.head_dim, seq_len=length)

    def _current_params(self) -> MethodParams:
        """The method's params with the learned tensors substituted (differentiable)."""
        if not self.spec.learned:
            return self.params
        return self.params.model_copy(update=dict(self.learned.items()))

    def _cached(self, what: str, length: int, device: torch.device, build: Any) -> Any:
        """Fixed tensors are built once per (what, length, device); learned ones every call."""
        if self.spec.learned:
            return build()
        key = (what, length, str(device))
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def embedding_offset(self, length: int, device: torch.device) -> torch.Tensor | None:
        """P (T, D) to add to the token embeddings, or None for bias and rotary methods."""
        if self.kind is not Kind.ABSOLUTE:
            return None
        ctx = AbsoluteContext(grid=(length,), dim=self.dim, device=device)
        table: torch.Tensor = self._cached(
            "absolute", length, device, lambda: encoding(self.spec, self._current_params(), ctx).to(device)
        )
        return table

    def attention_mask(self, length: int, device: torch.device) -> torch.Tensor | None:
        """The float additive mask (H, T, T): bias + causal −inf; None when attention is plain causal."""
        if self.kind is not Kind.BIAS:
            return None
        ctx = BiasContext(num_heads=self.heads, query_length=length, key_length=length, causal=True, device=device)
        mask: torch.Tensor = self._cached(
            "bias", length, device, lambda: bias_dense(self.spec, self._current_params(), ctx).to(device)
        )
        return mask

    def _rotary(self, length: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        """(cos, sin, q_scale, k_scale), each (T, d_head/2); scales are ones unless the method is xPos."""

        def build() -> tuple[torch.Tensor, ...]:
            ctx = RotaryContext(rotary_dim=self.head_dim, seq_len=length, device=device)
            freqs = rotary_frequencies(self.spec, self._current_params(), ctx)
            positions = torch.arange(length, dtype=torch.int64, device=device)  # (T,)
            cos, sin = rotary_tables(freqs, positions, torch.float32)  # (T, d/2) each
            scale = xpos_scale(freqs, positions, torch.float32)  # (T, d/2) or None
            if scale is None:
                return cos.to(device), sin.to(device)
            return cos.to(device), sin.to(device), scale.to(device), scale.reciprocal().to(device)

        tables: tuple[torch.Tensor, ...] = self._cached("rotary", length, device, build)
        return tables

    def rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q and k (B, H, T, d_head) for rotary methods; identity otherwise."""
        if self.kind is not Kind.ROTARY:
            return q, k
        tables = self._rotary(q.shape[-2], q.device)
        cos, sin = tables[0], tables[1]
        q_scale, k_scale = (tables[2], tables[3]) if len(tables) == 4 else (None, None)
        return (
            apply_rotary(q, cos, sin, pairing=self.pairing, scale=q_scale),
            apply_rotary(k, cos, sin, pairing=self.pairing, scale=k_scale),
        )


# ------------------------------------------------------------------------------------------------- model
class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, pe: PositionalEncoding, mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, dim = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.heads, dim // self.heads)  # (B, T, 3, H, d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, T, d_head)
        q, k = pe.rotate(q, k)
        if mask is None:
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, d_head)
        else:
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # mask (H, T, T) broadcasts
        merged = attended.transpose(1, 2).reshape(batch, length, dim)  # (B, T, H·d_head)
        out: torch.Tensor = self.out(merged)
        return out


class Block(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + FFN(LN(x)) with a GELU FFN of width ffn_mult·d."""

    def __init__(self, dim: int, heads: int, ffn_mult: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn_in = nn.Linear(dim, ffn_mult * dim)
        self.ffn_out = nn.Linear(ffn_mult * dim, dim)

    def forward(self, x: torch.Tensor, pe: PositionalEncoding, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), pe, mask)
        out: torch.Tensor = x + self.ffn_out(F.gelu(self.ffn_in(self.ffn_norm(x))))
        return out


class TinyTransformer(nn.Module):
    """Decoder-only LM: ids (B, T) -> logits (B, T, V), at any T the PE method supports."""

    def __init__(self, config: ModelConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config.dim, config.heads, config.ffn_mult) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        self._init_weights(seed)
        self.pe = PositionalEncoding(config)  # after the draw: non-PE weights do not depend on the method

    def _init_weights(self, seed: int) -> None:
        """N(0, 0.02) weights (residual outputs scaled by 1/√(2L), GPT-2), zero biases, unit LayerNorms."""
        generator = torch.Generator().manual_seed(seed)
        residual_std = INIT_STD / math.sqrt(2 * self.config.layers)
        with torch.no_grad():
            for name, module in self.named_modules():
                if isinstance(module, nn.Linear | nn.Embedding):
                    std = residual_std if name.endswith(("attn.out", "ffn_out")) else INIT_STD
                    module.weight.normal_(0.0, std, generator=generator)
                    if isinstance(module, nn.Linear) and module.bias is not None:
                        module.bias.zero_()
                elif isinstance(module, nn.LayerNorm):
                    module.weight.fill_(1.0)
                    module.bias.zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        x = self.token_embedding(ids)  # (B, T, D)
        offset = self.pe.embedding_offset(length, ids.device)
        if offset is not None:
            x = x + offset.to(x.dtype)  # (T, D) broadcasts over the batch
        mask = self.pe.attention_mask(length, ids.device)
        for block in self.blocks:
            x = block(x, self.pe, mask)
        logits: torch.Tensor = self.head(self.final_norm(x))  # (B, T, V)
        return logits


def count_parameters(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())
