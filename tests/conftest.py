"""Fixtures every test folder can use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def _example_params(name: str, rotary_dim: int = 8) -> dict[str, Any]:
    """Values for the params a method requires (everything else keeps the paper's defaults).

    Seq lengths in the tests are a few tokens, so the "original" context is set small enough for the
    scaled methods to actually scale.
    """
    half = rotary_dim // 2
    required: dict[str, dict[str, Any]] = {
        "rope_linear": {"factor": 2.0},
        "rope_ntk": {"factor": 2.0},
        "rope_dynamic_ntk": {"factor": 2.0, "original_max_position_embeddings": 4},
        "rope_yarn": {"factor": 4.0, "original_max_position_embeddings": 4},
        "rope_longrope": {
            "short_factor": [1.0 + 0.5 * i for i in range(half)],
            "long_factor": [2.0 + i for i in range(half)],
            "original_max_position_embeddings": 4,
            "max_position_embeddings": 16,
        },
        "rope_ntk_alpha": {"alpha": 2.0},
        # the defaults are sized for 128-wide heads: sections and axis widths that fit rotary_dim
        "mrope": {"mrope_section": [half - 2 * (half // 3), half // 3, half // 3]},
        "rope_nd": {"axes_dims": [rotary_dim - 4 * (rotary_dim // 6), 2 * (rotary_dim // 6), 2 * (rotary_dim // 6)]},
        "fope": {"train_length": 64},  # rotary_dim 8: keeps 2 of the 4 pairs (ω > 2π/64)
        "swin": {"window": [4, 4]},  # grids in the tests are at most 4 x 4
        "liere": {"block_size": 4},  # the reference's 64 is a whole head; test heads are 8 to 16 wide
    }
    return required.get(name, {})


@pytest.fixture
def example_params() -> Callable[..., dict[str, Any]]:
    return _example_params
