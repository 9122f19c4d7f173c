"""A tiny ViT in which the positional encoding is the only variable (evaluation.md §7).

Patch embedding (Conv2d, kernel = stride = patch) -> [CLS] + patches -> L x [x + Attn(LN(x)), x + FFN(LN(x))]
-> LN -> the CLS token (or the mean over tokens without one) -> linear head. FFN ``ffn_mult``·d with GELU,
bidirectional attention, no dropout; weights as ``posenc.training.model`` (N(0, 0.02), residual outputs
scaled by 1/√(2L), drawn from a generator seeded by ``seed`` before the PE modules exist, so two models with the
same seed and different methods start from identical non-PE weights). Any resolution that is a whole number of
patches runs: the model sees the new grid, and the method decides what that means (``vit_learned`` resizes its
table; fixed and relative methods are evaluated at the new positions).

The PE enters through its kind's applier only, never by kind: ``embed`` once on the token embeddings (the
absolute methods' table; the others return the tokens unchanged), then in every layer the applier's hooks
(rotate, score_terms, normalise). Positions follow ``posenc.pe.types``: a 2D method (registry ``axes`` = 2)
gets (row, col) per patch, numbered in C order, a 1D method the raster index row·cols + col, and the CLS token
−1 on every axis. Learned methods get their parameters as ``posenc.training.model`` does (``learned_init``, one
instance per layer for ``per_layer`` methods), initialised for the training grid.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from posenc.pe import MethodParams, get_method
from posenc.pe.appliers import Applier, Layer, build_applier, grid_positions
from posenc.training.model import INIT_STD

CHANNELS = 3


@dataclass(frozen=True)
class ViTConfig:
    """Everything needed to rebuild a ViT (saved as JSON next to its weights)."""

    num_classes: int
    image_size: int  # the training resolution: learned methods are initialised for its grid
    patch_size: int
    layers: int
    dim: int
    heads: int
    method: str
    params: dict[str, Any] = field(default_factory=dict)  # the method's raw (JSON) params
    ffn_mult: int = 4
    cls_token: bool = True
    pairing: Literal["half", "interleaved"] = "half"

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def grid(self, resolution: int) -> tuple[int, int]:
        """(rows, cols) of patches at ``resolution`` px; the resolution must be a whole number of patches."""
        if resolution % self.patch_size:
            raise ValueError(f"{resolution} px is not a multiple of the patch size {self.patch_size}")
        side = resolution // self.patch_size
        return side, side

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ViTConfig:
        return cls(**data)


# ------------------------------------------------------------------------------------------------ positions
def token_positions(
    rows: int, cols: int, axes: int, *, prefix: int = 0, device: torch.device | None = None
) -> torch.Tensor:
    """Positions of ``prefix`` tokens then a rows x cols grid of patches in C order: (N, 2) (row, col) for 2D
    methods, (N,) raster indices row·cols + col for 1D ones; prefix token p is −(p + 1) (``posenc.pe.types``)."""
    if axes == 2:
        return grid_positions((rows, cols), prefix, device)  # (P + R·C, 2)
    return grid_positions((rows * cols,), prefix, device)[:, 0]  # (P + R·C,)


# ---------------------------------------------------------------------------------------------------- PE
class GridPositionalEncoding(nn.Module):
    """One instance of a registered method on the ViT: its learned parameters, and the applier built on them."""

    def __init__(self, config: ViTConfig, seed_offset: int = 0, *, learned: bool = True) -> None:
        super().__init__()
        self.spec = get_method(config.method)
        if self.spec.axes not in (1, 2):
            raise ValueError(f"{config.method!r} does not encode 1D or 2D positions; the ViT has 2D grids")
        rows, cols = config.grid(config.image_size)
        self.position_grid = (rows, cols) if self.spec.axes == 2 else (rows * cols,)
        self.params: MethodParams = self.spec.parse_params(config.params)
        self.layer = Layer(
            num_heads=config.heads,
            head_dim=config.head_dim,
            causal=False,
            model_dim=config.dim,
            pairing=config.pairing,
        )
        self.learned = nn.ParameterDict()
        self._cache: dict[Any, Any] = {}
        if self.spec.learned and learned:
            if self.spec.learned_init is None:
                raise ValueError(f"{config.method!r} is learned but has no learned_init, so it cannot be trained")
            params = self.params
            if seed_offset and "seed" in type(params).model_fields:
                # per-layer instances: layer l draws from seed + l, so the layers do not start identical
                params = params.model_copy(update={"seed": int(getattr(params, "seed", 0)) + seed_offset})
            tokens = rows * cols + int(config.cls_token)
            init_context = build_applier(self.spec, params, self.layer).init_context(tokens, self.position_grid)
            for name, tensor in self.spec.learned_init(params, init_context).items():
                self.learned[name] = nn.Parameter(torch.as_tensor(tensor, dtype=torch.float32).clone())

    def applier(self) -> Applier:
        """The applier with the current learned tensors substituted (differentiable); fixed tables cached."""
        params = self.params.model_copy(update=dict(self.learned.items())) if self.learned else self.params
        return build_applier(self.spec, params, self.layer, cache=self._cache)


# ------------------------------------------------------------------------------------------------- model
class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, pe: Applier, state: Any) -> tuple[torch.Tensor, Any]:
        batch, length, dim = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.heads, dim // self.heads)  # (B, N, 3, H, d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, N, d_head)
        attended, state = pe.layer_attend(q, k, v, x=x, state=state, pos=pos)  # (B, H, N, d_head); x feeds gates
        merged = attended.transpose(1, 2).reshape(batch, length, dim)  # (B, N, H·d_head)
        out: torch.Tensor = self.out(merged)
        return out, state


class EncoderBlock(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + FFN(LN(x)) with a GELU FFN of width ffn_mult·d."""

    def __init__(self, dim: int, heads: int, ffn_mult: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn_in = nn.Linear(dim, ffn_mult * dim)
        self.ffn_out = nn.Linear(ffn_mult * dim, dim)
        self.pe: GridPositionalEncoding | None = None  # this layer's own instance, for per-layer methods

    def forward(self, x: torch.Tensor, pos: torch.Tensor, pe: Applier, state: Any) -> tuple[torch.Tensor, Any]:
        attended, state = self.attn(self.attn_norm(x), pos, pe, state)
        x = x + attended
        ffn_input = self.ffn_norm(x)
        state = pe.update_state(ffn_input, state)  # TAPE: the state's own feed-forward update
        out: torch.Tensor = x + self.ffn_out(F.gelu(self.ffn_in(ffn_input)))
        return out, state


class VisionTransformer(nn.Module):
    """Images (B, 3, S, S) -> class logits (B, num_classes), at any S that is a whole number of patches."""

    def __init__(self, config: ViTConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        dim = config.dim
        self.patch_embedding = nn.Conv2d(CHANNELS, dim, config.patch_size, stride=config.patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if config.cls_token else None  # ViT: zeros
        self.blocks = nn.ModuleList(EncoderBlock(dim, config.heads, config.ffn_mult) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, config.num_classes)
        self._init_weights(seed)
        # after the draw: non-PE weights do not depend on the method
        per_layer = get_method(config.method).per_layer
        self.pe = GridPositionalEncoding(config, learned=not per_layer)
        if per_layer:
            for index, block in enumerate(self.blocks):
                block.pe = GridPositionalEncoding(config, seed_offset=index)

    def _init_weights(self, seed: int) -> None:
        """N(0, 0.02) weights (residual outputs scaled by 1/√(2L), GPT-2), zero biases, unit LayerNorms."""
        generator = torch.Generator().manual_seed(seed)
        residual_std = INIT_STD / math.sqrt(2 * self.config.layers)
        with torch.no_grad():
            for name, module in self.named_modules():
                if isinstance(module, nn.Linear | nn.Conv2d):
                    std = residual_std if name.endswith(("attn.out", "ffn_out")) else INIT_STD
                    module.weight.normal_(0.0, std, generator=generator)
                    if module.bias is not None:
                        module.bias.zero_()
                elif isinstance(module, nn.LayerNorm):
                    module.weight.fill_(1.0)
                    module.bias.zero_()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        rows, cols = self.config.grid(images.shape[-2])
        if images.shape[-1] != images.shape[-2]:
            raise ValueError(f"images must be square, got {tuple(images.shape[-2:])}")
        x = self.patch_embedding(images).flatten(2).transpose(1, 2)  # (B, R·C, D)
        if self.cls is not None:
            x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1)  # (B, 1 + R·C, D)
        pos = token_positions(rows, cols, self.pe.spec.axes, prefix=int(self.cls is not None), device=x.device)
        shared = self.pe.applier()
        x = shared.embed(x, pos)  # absolute methods: + P at the positions; the others: unchanged
        state = shared.initial_state(x.shape[0], x.shape[1], x.device)
        for block in self.blocks:
            assert isinstance(block, EncoderBlock)
            x, state = block(x, pos, block.pe.applier() if block.pe is not None else shared, state)
        x = self.final_norm(x)
        pooled = x[:, 0] if self.cls is not None else x.mean(dim=1)  # (B, D)
        logits: torch.Tensor = self.head(pooled)  # (B, num_classes)
        return logits
