"""Which kernel a training layer's attention runs on: the measured table, and the one function that reads it.

A decoder layer at positions arange(T) (``Applier.fast_attend``, and ``span_attend`` for windows and chunks) can
reach its output by four paths, which give the same output (tests/unit/pe/test_attention_paths.py):

    sdpa_causal   ``scaled_dot_product_attention`` with ``is_causal``: nothing added to the scores (absolute
                  and rotary methods; NoPE)
    sdpa_mask     ``scaled_dot_product_attention`` with the method's additive term as a dense mask, the causal
                  −inf (and a window's or chunk's) folded in: a bias (H, T, T), built once when it is fixed, or
                  a content method's logits less scale·q·kᵀ (B, H, T, T)
    flex          ``flex_attention`` with the method's term as its score_mod and the layer's reach (causal,
                  window, chunk) as its block mask: no (T, T) tensor, and blocks out of reach skipped. CUDA only
                  (this torch has no FlexAttention backward on the CPU); compiled per shape
    materialised  posenc's own attention: the logits, the softmax (or the method's weights), the output

``PATH_TABLE`` chooses one per (device, kind, reach, length): the first row that matches. Each row says what it
was chosen on. The GPU check (``bench/gpu_check.py``, its ``flex`` part) times the paths against each other and
flags a row that a measured alternative beats; a row marked "not measured" is a choice made on memory alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from posenc.schemas.methods import Kind

AttentionPath = Literal["sdpa_causal", "sdpa_mask", "flex", "materialised"]
PATHS: tuple[AttentionPath, ...] = ("sdpa_causal", "sdpa_mask", "flex", "materialised")

# Past this length a dense mask costs more memory than it saves time: (H, T, T) float32 at 8 heads is 512 MiB at
# T = 4096 (a content method's (B, H, T, T) B times that), and FlexAttention needs none.
DENSE_MASK_MAX_LENGTH = 4096


@dataclass(frozen=True)
class PathRow:
    device: Literal["cuda", "cpu"]
    kinds: frozenset[Kind]
    reach: Literal["causal", "span", "any"]  # span: a sliding window or chunks
    up_to: int | None  # the longest T the row covers; None: every length
    path: AttentionPath
    evidence: str


_PLAIN = frozenset({Kind.ABSOLUTE, Kind.ROTARY})
_BIAS = frozenset({Kind.BIAS})
_CONTENT = frozenset({Kind.SCORE_MOD})
_WEIGHTS = frozenset({Kind.ATTENTION})
_FIXED_TERMS = _PLAIN | _BIAS  # what is added to the scores depends on positions only

PATH_TABLE: tuple[PathRow, ...] = (
    # CUDA
    PathRow("cuda", _WEIGHTS, "any", None, "materialised", "the method returns the weights: no kernel takes them"),
    PathRow("cuda", _PLAIN, "causal", None, "sdpa_causal", "nothing added to the scores: the flash kernel"),
    PathRow(
        "cuda",
        _CONTENT,
        "any",
        None,
        "sdpa_mask",
        "H100, T=1024, fwd+bwd: flex 1.3-2.4x the dense term (cape, cope, fox, huang, tape, tener, transformer_xl); "
        "the term is (B, H, T, T) on every path, so flex saves no memory",
    ),
    PathRow(
        "cuda",
        _FIXED_TERMS,
        "any",
        DENSE_MASK_MAX_LENGTH,
        "sdpa_mask",
        "H100, T=1024, fwd+bwd: flex 3.9-4.2x the dense bias built once (alibi, sandwich), 2.0-2.4x the bias built "
        "per call (t5, fire, kerple); windows and chunks not measured",
    ),
    PathRow("cuda", _FIXED_TERMS, "any", None, "flex", "not measured: past the dense mask's length, for memory"),
    # CPU
    PathRow("cpu", _WEIGHTS, "any", None, "materialised", "the method returns the weights: no kernel takes them"),
    PathRow("cpu", _PLAIN, "causal", None, "sdpa_causal", "nothing added to the scores: the fused kernel"),
    PathRow("cpu", _FIXED_TERMS, "any", None, "sdpa_mask", "no FlexAttention backward on the CPU"),
    PathRow(
        "cpu",
        _CONTENT,
        "any",
        None,
        "materialised",
        "2 cores, B=8 H=4 T=128 d=32, fwd+bwd: the dense term through SDPA 1.18-1.38x materialised (fox, "
        "transformer_xl, cape): it computes q·kᵀ twice",
    ),
)


def attention_path(kind: Kind, device: str, length: int, *, span: bool, additive: bool = True) -> AttentionPath:
    """The path of a decoder layer of ``kind`` on ``device`` ("cuda"; anything else as the CPU) at T = ``length``,
    over a window or chunks when ``span``. ``additive``: whether the method's effect is a term added to the
    scores; one that is not (Shaw's value-side table) always takes ``materialised``."""
    return path_choice(kind, device, length, span=span, additive=additive)[0]


def path_choice(
    kind: Kind, device: str, length: int, *, span: bool, additive: bool = True
) -> tuple[AttentionPath, str]:
    """``attention_path`` and what it was chosen on (its row's evidence)."""
    where = "cuda" if device == "cuda" else "cpu"
    for row in PATH_TABLE:
        if row.device != where or kind not in row.kinds:
            continue
        if row.reach != "any" and row.reach != ("span" if span else "causal"):
            continue
        if row.up_to is not None and length > row.up_to:
            continue
        if not additive and row.path in ("sdpa_mask", "flex"):
            return "materialised", "a value-side term: no kernel that takes an additive score mask runs it"
        return row.path, row.evidence
    raise LookupError(f"no attention path for {kind} on {device} at T={length} (span: {span})")
