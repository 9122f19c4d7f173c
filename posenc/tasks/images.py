"""Image tasks on a ViT: procedural images drawn at any resolution (``posenc.training.vision``), top-1 accuracy by
evaluation resolution.

Unit: pixels (a side of the square image). The training resolution is ``data.image_size`` (default 32) with
patches of ``data.patch_size`` (default 4); the evaluation resolutions are ``eval.resolutions``, default the
multiples of the patch among S/2, 3S/4, S, 3S/2, 2S. Tasks: ``shapes`` (10 shape classes), ``quadrant`` (which
quadrant holds the red dot), ``above_left`` (is the red dot above-left of the blue one), ``same_diagonal`` (are
the two dots on one diagonal). 2D methods get (row, col) patch positions, 1D methods the raster index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch

from posenc.errors import InvalidInput, Loc
from posenc.pe import get_method
from posenc.pe.appliers import Applier, Layer, build_applier, grid_positions
from posenc.pe.types import Extent, LayerInputs
from posenc.schemas.jobs import JobKind, MethodRef
from posenc.tasks.base import SPEC, Family, cannot_run, check_trainable, parse_params

IMAGE_TASKS = ("shapes", "quadrant", "above_left", "same_diagonal")
CLASSES = {"shapes": 10, "quadrant": 4, "above_left": 2, "same_diagonal": 2}
ABOUT = {
    "shapes": "which of 10 shapes (content only)",
    "quadrant": "which quadrant holds the red dot",
    "above_left": "is the red dot above-left of the blue one",
    "same_diagonal": "are the two dots on one diagonal",
}
DEFAULT_IMAGE_SIZE = 32
DEFAULT_PATCH_SIZE = 4
MAX_IMAGE_PATCHES = 1024  # patches per image at any resolution (a 32 x 32 grid): the ViT's attention is dense
RESOLUTION_FACTORS = (0.5, 0.75, 1.0, 1.5, 2.0)  # of the training resolution


class Images(Family):
    name = "images"
    unit = "pixels"
    model = "images"
    metric = "accuracy"
    metrics = ("accuracy",)
    train_field = ("data", "image_size")
    eval_field = ("eval", "resolutions")
    data_fields = ("image_size", "patch_size")
    eval_fields = ("resolutions", "samples")

    @classmethod
    def task_names(cls) -> tuple[str, ...]:
        return IMAGE_TASKS

    @classmethod
    def about(cls, task: str) -> str:
        return f"procedural images on a ViT: {ABOUT[task]}"

    @property
    def patch(self) -> int:
        return self.spec.data.patch_size if self.spec.data.patch_size is not None else DEFAULT_PATCH_SIZE

    def train_size(self) -> int:
        return self.spec.data.image_size if self.spec.data.image_size is not None else DEFAULT_IMAGE_SIZE

    def default_eval_sizes(self) -> list[int]:
        size, patch = self.train_size(), self.patch
        scaled = (round(size * factor) for factor in RESOLUTION_FACTORS)
        return sorted({s for s in scaled if s >= patch and s % patch == 0} | {size})

    def given_eval_sizes(self) -> list[int] | None:
        return None if self.spec.eval.resolutions is None else list(self.spec.eval.resolutions)

    def tokens(self, size: int) -> int:
        """Patches of one image at ``size`` px, and the CLS token if any."""
        return (size // self.patch) ** 2 + int(self.spec.model.cls_token)

    def eval_tokens(self, size: int) -> int:
        return self.spec.eval.samples * self.tokens(size)

    def output_classes(self) -> int:
        return CLASSES[self.task]

    def input_parameters(self, dim: int) -> int:
        """The patch projection (3·p² RGB values to ``dim``, with its bias) and the class token."""
        return 3 * self.patch * self.patch * dim + 2 * dim

    def validate(self, kind: JobKind, data_dirs: Sequence[Path] | None = None) -> None:
        """Every resolution a whole number of patches, at most ``MAX_IMAGE_PATCHES`` of them."""
        super().validate(kind, data_dirs)
        checked: list[tuple[Loc, int]] = [((*SPEC, "data", "image_size"), self.train_size())]
        checked += [((*SPEC, "eval", "resolutions", i), r) for i, r in enumerate(self.given_eval_sizes() or [])]
        for loc, resolution in checked:
            if resolution % self.patch:
                raise InvalidInput(loc, f"{resolution} px is not a multiple of data.patch_size = {self.patch}")
            if (resolution // self.patch) ** 2 > MAX_IMAGE_PATCHES:
                side = math.isqrt(MAX_IMAGE_PATCHES)
                raise InvalidInput(
                    loc,
                    f"{resolution} px is {resolution // self.patch}² patches of {self.patch} px; "
                    f"at most {side}² are allowed",
                )

    def validate_method(self, ref: MethodRef, loc: Loc) -> None:
        """A method on the ViT: 2D methods get (row, col) patch positions, 1D methods the raster index; every
        resolution is dry-run as the model applies the method, with at most ``MAX_IMAGE_PATCHES`` + 1 tokens."""
        if ref.patterned:
            raise InvalidInput(
                (*loc, ref.unit_field),
                "layer patterns and configs are for the decoders (text, sequence tasks, probes); "
                "the ViT has one setup for all",
            )
        method = get_method(ref.method_name)
        params = parse_params(method, method.training_params(ref.params), loc)
        if method.axes not in (1, 2) or "graph" in method.needs:
            what = "graph nodes" if method.axes == 0 or "graph" in method.needs else f"{method.axes}D positions"
            raise InvalidInput((*loc, "method"), f"{method.name!r} encodes {what}; the ViT takes 2D grids of patches")
        check_trainable(method, loc)
        model = self.spec.model
        layer = Layer(
            num_heads=model.heads, head_dim=model.dim // model.heads, causal=False, model_dim=model.dim,
            pairing=model.pairing,
        )  # fmt: skip
        head_dim = model.dim // model.heads
        for resolution in self.eval_sizes():
            tokens = (resolution // self.patch) ** 2 + int(model.cls_token)
            self.charge_method(method, params, loc, Extent(tokens, tokens, model.heads, head_dim, 1, model.dim))
        try:
            applier = build_applier(method, params, layer)
            applier.check()
            for resolution in self.eval_sizes():
                side = resolution // self.patch
                pos = patch_positions(side, side, method.axes, prefix=int(model.cls_token))  # (N, A) or (N,)
                dry_run_tokens(applier, pos, model.dim)
        except InvalidInput as exc:
            raise cannot_run(method, loc, exc) from None

    def protocol(self) -> str:
        return "top1_accuracy"

    def title(self) -> str:
        return f"{self.task}: accuracy vs resolution (pixels; ViT, patch {self.patch}), trained at {self.train_size()}"

    def chance(self) -> float | None:
        return 1 / CLASSES[self.task]


def patch_positions(rows: int, cols: int, axes: int, *, prefix: int = 0) -> torch.Tensor:
    """The ViT's token positions: (N, 2) (row, col) for 2D methods, (N,) raster indices for 1D ones, prefix tokens
    first (``posenc.training.vit.token_positions`` builds the same)."""
    if axes == 2:
        return grid_positions((rows, cols), prefix)  # (P + R·C, 2)
    return grid_positions((rows * cols,), prefix)[:, 0]  # (P + R·C,)


def dry_run_tokens(applier: Applier, pos: torch.Tensor, dim: int) -> None:
    """The encoding on (1, N, D) zero embeddings, then the last token's query against every key."""
    layer = applier.layer
    length = pos.shape[0]
    applier.embed(torch.zeros(1, length, dim), pos)
    q = torch.zeros(1, layer.num_heads, 1, layer.head_dim)  # (1, H, 1, d)
    k = torch.zeros(1, layer.num_heads, length, layer.head_dim)  # (1, H, N, d)
    q, k = applier.rotate(q, k, pos[-1:], pos)
    mask = torch.zeros(1, 1, 1, length, dtype=torch.bool)  # (1, 1, 1, N): bidirectional
    x = torch.zeros(1, length, dim)  # (1, N, D)
    state = applier.initial_state(1, length, torch.device("cpu"))
    applier.score_terms(LayerInputs(q=q, k=k, q_pos=pos[-1:], k_pos=pos, mask=mask, x=x, state=state), 1.0)
