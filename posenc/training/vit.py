"""A tiny ViT in which the positional encoding is the only variable.

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

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from posenc.pe import get_method
from posenc.pe.appliers import Layer, grid_positions
from posenc.training.model import Block, attach_positional_encodings, block_pe, init_weights

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
    pairing: Literal["half", "interleaved"] | None = None  # None: the method's own

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


class VisionTransformer(nn.Module):
    """Images (B, 3, S, S) -> class logits (B, num_classes), at any S that is a whole number of patches."""

    def __init__(self, config: ViTConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        dim = config.dim
        self.patch_embedding = nn.Conv2d(CHANNELS, dim, config.patch_size, stride=config.patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if config.cls_token else None  # ViT: zeros
        self.blocks = nn.ModuleList(Block(dim, config.heads, config.ffn_mult) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, config.num_classes)
        init_weights(self, seed, config.layers)  # before the PE exists: non-PE weights do not depend on it
        spec = get_method(config.method)
        if spec.axes not in (1, 2):
            raise ValueError(f"{config.method!r} does not encode 1D or 2D positions; the ViT has 2D grids")
        rows, cols = config.grid(config.image_size)
        layer = Layer(
            num_heads=config.heads, head_dim=config.head_dim, causal=False, model_dim=dim, pairing=config.pairing
        )
        self.pe = attach_positional_encodings(
            self.blocks,
            config.method,
            config.params,
            layer,
            init_tokens=rows * cols + int(config.cls_token),
            init_grid=(rows, cols) if spec.axes == 2 else (rows * cols,),
        )

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
            assert isinstance(block, Block)
            x, state = block(x, block_pe(block, shared), state, pos)
        x = self.final_norm(x)
        pooled = x[:, 0] if self.cls is not None else x.mean(dim=1)  # (B, D)
        logits: torch.Tensor = self.head(pooled)  # (B, num_classes)
        return logits
