"""Procedural image tasks for the tiny ViT: scenes drawn in continuous coordinates, rendered at any resolution.

A scene is a background colour and K objects, each a shape id, a centre (row, col) in the unit square
(0 = top/left, 1 = bottom/right), a half-extent, a rotation and an RGB colour. ``render`` rasterises it at S x S
pixels: pixel (i, j) samples the point ((i + ½)/S, (j + ½)/S); each shape has a signed distance d (< 0 inside)
and covers a pixel by clamp(½ − d·S, 0, 1) (a one-pixel ramp, close to its area coverage), objects composited
in order over the background; then Gaussian noise (σ = ``NOISE_STD``). So a scene rendered at 64 px and
box-downsampled 2 x 2 is close to its 32 px render (tested), and the content scales with the image
(as in ImageNet up-resolution tests). Everything is drawn from a ``torch.Generator``: scenes first, then noise,
so the scenes of a draw do not depend on the resolution.

Tasks (classes, labels uniform):
    shapes         10: one shape of ``SHAPES`` (Shapes-10), size 15-45 % of the side, any position and rotation
    quadrant       4: which quadrant (top-left, top-right, bottom-left, bottom-right) holds the red dot, with
                   three distractor dots (green, blue, white) anywhere
    above_left     2: is the red dot above-left of the blue dot (both coordinates smaller), |Δrow|, |Δcol| ≥ 0.12
    same_diagonal  2: are the red and blue dots on one diagonal (|Δrow| = |Δcol|); otherwise the two offsets differ
                   by at least 0.15
The last three need positions: a model without a positional encoding cannot tell the classes apart (its
output is invariant to permuting the patches; ``quadrant`` not even with a CLS token).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

SHAPES = ("disk", "square", "triangle", "cross", "ring", "star", "ellipse", "diamond", "L", "bar")
TASK_CLASSES: dict[str, tuple[str, ...]] = {
    "shapes": SHAPES,
    "quadrant": ("top_left", "top_right", "bottom_left", "bottom_right"),
    "above_left": ("no", "yes"),
    "same_diagonal": ("no", "yes"),
}
NOISE_STD = 0.05
SHAPE_SIZE = (0.15, 0.45)  # extent as a fraction of the image side (Shapes-10)
DOT_RADIUS = 0.07
MIN_OFFSET = 0.12  # above_left: the least |Δrow| and |Δcol| between the dots
DIAGONAL_GAP = 0.15  # same_diagonal, class 0: the least ||Δrow| − |Δcol||
RED, GREEN, BLUE, WHITE = (0.95, 0.1, 0.1), (0.1, 0.85, 0.2), (0.2, 0.35, 1.0), (0.95, 0.95, 0.95)
DISK = SHAPES.index("disk")


def task_classes(task: str) -> tuple[str, ...]:
    """The class names of a task, in label order."""
    return TASK_CLASSES[task]


@dataclass(frozen=True)
class Scenes:
    """B scenes of K objects each, in continuous coordinates (any resolution renders them)."""

    labels: torch.Tensor  # (B,) int64
    background: torch.Tensor  # (B, 3) RGB in [0, 1]
    shape: torch.Tensor  # (B, K) int64 index into SHAPES
    centre: torch.Tensor  # (B, K, 2) (row, col) in [0, 1]
    half_size: torch.Tensor  # (B, K): half the object's extent, in image sides
    angle: torch.Tensor  # (B, K) radians, counter-clockwise
    colour: torch.Tensor  # (B, K, 3) RGB

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def select(self, index: slice) -> Scenes:
        """The scenes ``index`` selects (every field indexed along the batch)."""
        return Scenes(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


# --------------------------------------------------------------------------------------------------- draw
def _uniform(
    generator: torch.Generator, low: float | torch.Tensor, high: float | torch.Tensor, *shape: int
) -> torch.Tensor:
    return low + (high - low) * torch.rand(*shape, generator=generator, dtype=torch.float64)


def _signs(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(0, 2, shape, generator=generator).to(torch.float64) * 2 - 1


def _dot_scenes(
    labels: torch.Tensor, centres: torch.Tensor, colours: list[tuple[float, ...]], generator: torch.Generator
) -> Scenes:
    """Scenes of dots (disks of ``DOT_RADIUS``) at ``centres`` (B, K, 2) with these K colours, unrotated."""
    count, objects = centres.shape[0], centres.shape[1]
    return Scenes(
        labels=labels,
        background=_uniform(generator, 0.0, 0.3, count, 3),
        shape=torch.full((count, objects), DISK, dtype=torch.int64),
        centre=centres,
        half_size=torch.full((count, objects), DOT_RADIUS, dtype=torch.float64),
        angle=torch.zeros(count, objects, dtype=torch.float64),
        colour=torch.tensor(colours, dtype=torch.float64).expand(count, objects, 3),
    )


def _draw_shapes(n: int, generator: torch.Generator) -> Scenes:
    labels = torch.randint(0, len(SHAPES), (n,), generator=generator)
    half = _uniform(generator, SHAPE_SIZE[0] / 2, SHAPE_SIZE[1] / 2, n, 1)  # (B, 1)
    return Scenes(
        labels=labels,
        background=_uniform(generator, 0.0, 0.35, n, 3),
        shape=labels[:, None],  # (B, 1)
        centre=_uniform(generator, half[..., None], 1 - half[..., None], n, 1, 2),  # (B, 1, 2): inside the image
        half_size=half,
        angle=_uniform(generator, 0.0, 2 * math.pi, n, 1),
        colour=_uniform(generator, 0.45, 1.0, n, 1, 3),
    )


def _draw_quadrant(n: int, generator: torch.Generator) -> Scenes:
    labels = torch.randint(0, 4, (n,), generator=generator)
    halves = torch.stack((labels // 2, labels % 2), dim=-1).to(torch.float64)  # (B, 2): (row half, col half)
    margin = DOT_RADIUS + 0.02  # the red dot lies wholly inside its quadrant
    red = halves * 0.5 + _uniform(generator, margin, 0.5 - margin, n, 2)  # (B, 2)
    distractors = _uniform(generator, DOT_RADIUS, 1 - DOT_RADIUS, n, 3, 2)  # (B, 3, 2)
    centres = torch.cat((distractors, red[:, None]), dim=1)  # (B, 4, 2): red drawn last, on top
    return _dot_scenes(labels, centres, [GREEN, BLUE, WHITE, RED], generator)


def _draw_above_left(n: int, generator: torch.Generator) -> Scenes:
    labels = torch.randint(0, 2, (n,), generator=generator)
    low = _uniform(generator, DOT_RADIUS, 1 - DOT_RADIUS - MIN_OFFSET, n, 2)  # (B, 2): the smaller row and col
    high = _uniform(generator, low + MIN_OFFSET, 1 - DOT_RADIUS, n, 2)  # (B, 2): the larger ones
    # which coordinates of the red dot are the smaller: both for class 1; for class 0 one of the other three
    other = torch.randint(0, 3, (n,), generator=generator)  # 0: red right of blue, 1: below, 2: both
    red_row_low = (labels == 1) | (other == 0)
    red_col_low = (labels == 1) | (other == 1)
    red_low = torch.stack((red_row_low, red_col_low), dim=-1)  # (B, 2) bool
    red = torch.where(red_low, low, high)
    blue = torch.where(red_low, high, low)
    return _dot_scenes(labels, torch.stack((red, blue), dim=1), [RED, BLUE], generator)  # centres (B, 2, 2)


def _draw_same_diagonal(n: int, generator: torch.Generator) -> Scenes:
    labels = torch.randint(0, 2, (n,), generator=generator)
    on_diagonal = _uniform(generator, DIAGONAL_GAP, 0.7, n)  # (B,): |Δ| on both axes
    small = _uniform(generator, 0.0, 0.6, n)  # (B,): class 0, the smaller offset
    large = torch.clamp(small + _uniform(generator, DIAGONAL_GAP, 0.7, n), max=0.8)  # (B,)
    swap = torch.rand(n, generator=generator) < 0.5
    off_row, off_col = torch.where(swap, large, small), torch.where(swap, small, large)
    offset = torch.where(
        (labels == 1)[:, None],
        on_diagonal[:, None].expand(n, 2),
        torch.stack((off_row, off_col), dim=-1),
    ) * _signs(generator, n, 2)  # (B, 2): blue − red
    span = 1 - 2 * DOT_RADIUS - offset.abs()  # (B, 2): room left for the red dot on each axis
    red = DOT_RADIUS + torch.clamp(-offset, min=0) + span * torch.rand(n, 2, generator=generator, dtype=torch.float64)
    return _dot_scenes(labels, torch.stack((red, red + offset), dim=1), [RED, BLUE], generator)


_DRAW: dict[str, Callable[[int, torch.Generator], Scenes]] = {
    "shapes": _draw_shapes,
    "quadrant": _draw_quadrant,
    "above_left": _draw_above_left,
    "same_diagonal": _draw_same_diagonal,
}


def draw_scenes(task: str, n: int, generator: torch.Generator) -> Scenes:
    """n scenes of ``task``, deterministic given the generator's state."""
    return _DRAW[task](n, generator)


# ------------------------------------------------------------------------------------------------- render
def _box(x: torch.Tensor, y: torch.Tensor, cx: float, cy: float, hx: float, hy: float) -> torch.Tensor:
    """Chebyshev distance to an axis-aligned box (exact inside and on the sides, a bound at the corners)."""
    return torch.maximum((x - cx).abs() - hx, (y - cy).abs() - hy)


def _triangle(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Equilateral, circumradius 1, a vertex up (y grows downwards): the largest of its three edge distances."""
    edges = [
        (math.cos(a), math.sin(a)) for a in (math.pi / 2, math.pi / 2 + 2 * math.pi / 3, math.pi / 2 + 4 * math.pi / 3)
    ]
    return torch.stack([nx * x + ny * y for nx, ny in edges]).amax(0) - 0.5


def _star(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Five rounded points: radius 0.6 + 0.35·cos(5φ) (the radial gap, scaled to about a distance)."""
    return (torch.hypot(x, y) - (0.6 + 0.35 * torch.cos(5 * torch.atan2(y, x)))) * 0.5


# Signed distances in the object's own frame (unit half-extent, y down), negative inside; all within radius ~1.
_SHAPE_DISTANCE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "disk": lambda x, y: torch.hypot(x, y) - 1,
    "square": lambda x, y: _box(x, y, 0, 0, 0.72, 0.72),
    "triangle": _triangle,
    "cross": lambda x, y: torch.minimum(_box(x, y, 0, 0, 1.0, 0.28), _box(x, y, 0, 0, 0.28, 1.0)),
    "ring": lambda x, y: (torch.hypot(x, y) - 0.72).abs() - 0.24,
    "star": _star,
    "ellipse": lambda x, y: (torch.hypot(x, y / 0.55) - 1) * 0.55,
    # a 1 x 0.6 rhombus, so that no rotation makes it the square
    "diamond": lambda x, y: (0.6 * x.abs() + y.abs() - 0.6) / math.sqrt(1.36),
    "L": lambda x, y: torch.minimum(_box(x, y, -0.55, 0, 0.25, 0.8), _box(x, y, 0, 0.55, 0.8, 0.25)),
    "bar": lambda x, y: _box(x, y, 0, 0, 1.0, 0.3),
}


def render(scenes: Scenes, size: int, noise: torch.Generator | None = None) -> torch.Tensor:
    """The scenes at ``size`` x ``size`` pixels: (B, 3, S, S) float32; Gaussian noise from ``noise`` if given.

    Drawn in float64 (the labels' geometry), rendered in float32."""
    count, objects = scenes.shape.shape
    work = torch.float32
    coords = (torch.arange(size, dtype=work) + 0.5) / size  # (S,): pixel centres
    centre, angle, half_size = scenes.centre.to(work), scenes.angle.to(work), scenes.half_size.to(work)
    image = scenes.background.to(work)[:, :, None, None].expand(count, 3, size, size)  # (B, 3, S, S)
    for k in range(objects):
        row = coords[None, :, None] - centre[:, k, 0, None, None]  # (B, S, 1)
        col = coords[None, None, :] - centre[:, k, 1, None, None]  # (B, 1, S)
        cos = torch.cos(angle[:, k])[:, None, None]  # (B, 1, 1)
        sin = torch.sin(angle[:, k])[:, None, None]
        half = half_size[:, k, None, None]  # (B, 1, 1)
        x = (cos * col + sin * row) / half  # (B, S, S): the object's own frame, R(−angle)·offset / half
        y = (cos * row - sin * col) / half
        distance = torch.empty(count, size, size, dtype=work)  # (B, S, S) in image sides
        for index in sorted(set(scenes.shape[:, k].tolist())):
            chosen = scenes.shape[:, k] == index  # (B,)
            distance[chosen] = _SHAPE_DISTANCE[SHAPES[index]](x[chosen], y[chosen]) * half[chosen]
        cover = torch.clamp(0.5 - distance * size, 0.0, 1.0)[:, None]  # (B, 1, S, S)
        image = image * (1 - cover) + scenes.colour[:, k, :, None, None].to(work) * cover
    if noise is not None:
        image = image + NOISE_STD * torch.randn(image.shape, generator=noise, dtype=work)
    return image


def image_batch(task: str, n: int, image_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n fresh images of ``task`` at ``image_size`` px and their labels: ((B, 3, S, S) float32, (B,) int64).

    The scenes are drawn first, then the noise, from the same generator."""
    scenes = draw_scenes(task, n, generator)
    return render(scenes, image_size, generator), scenes.labels
