"""Generate tests/data/huang_hf_golden.safetensors: Hugging Face BERT's relative_key_query attention (Huang et al.
2020, method 4) in float64, the reference the ``huang`` method's m4 variant is tested against.

transformers 5.x removed ``position_embedding_type`` from BERT; 4.57.6 is the last release with it, and it cannot
share the project's environment. Run this with a throwaway venv outside the repository:

    python3 -m venv /tmp/hfvenv
    /tmp/hfvenv/bin/pip install torch==2.13.0 transformers==4.57.6 safetensors
    /tmp/hfvenv/bin/python tests/data/generate_huang_golden.py

It builds BertSelfAttention(BertConfig(hidden_size=16, num_attention_heads=2,
position_embedding_type="relative_key_query", max_position_embeddings=8, attention_probs_dropout_prob=0)) in
float64 under torch.manual_seed(SEED), runs it on a fixed input (B = 2, N = 6, every |i − j| <= 5 < 8), and saves:

    q, k             (B, H, N, d) float64  the per-head query and key, after the projections (d = 8)
    distance_weight  (2·8 − 1, d) float64  distance_embedding.weight (row (i − j) + 7)
    probs            (B, H, N, N) float64  HF's attention probabilities (output_attentions=True)

The test (tests/unit/pe/test_huang.py) feeds q, k and the table to ``huang`` (variant m4, max_position 8) and
compares softmax of its logits with ``probs`` to 1e-12.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers  # type: ignore[import-not-found]  # only in the throwaway 4.57.6 venv
from safetensors.torch import save_file
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertSelfAttention  # type: ignore[import-not-found]

SEED = 20200928  # the paper's arXiv date
BATCH, LENGTH = 2, 6
HIDDEN, HEADS, MAX_POSITION = 16, 2, 8
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "huang_hf_golden.safetensors"


def split_heads(t: torch.Tensor) -> torch.Tensor:
    """(B, N, H·d) -> (B, H, N, d), as BertSelfAttention reshapes its projections."""
    batch, length, _ = t.shape
    return t.view(batch, length, HEADS, HIDDEN // HEADS).transpose(1, 2)


def main() -> None:
    if transformers.__version__ != "4.57.6":
        sys.exit(f"needs transformers 4.57.6 (the last with position_embedding_type), found {transformers.__version__}")
    torch.manual_seed(SEED)
    config = BertConfig(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        position_embedding_type="relative_key_query",
        max_position_embeddings=MAX_POSITION,
        attention_probs_dropout_prob=0.0,
    )
    attention = BertSelfAttention(config).to(torch.float64).eval()
    # nn.Embedding's N(0, 1) init makes the position terms as large as the content terms: a sharp test
    hidden = torch.randn(BATCH, LENGTH, HIDDEN, dtype=torch.float64)  # (B, N, D)
    with torch.no_grad():
        _, probs = attention(hidden, output_attentions=True)  # (B, H, N, N)
        q = split_heads(attention.query(hidden))  # (B, H, N, d)
        k = split_heads(attention.key(hidden))  # (B, H, N, d)
    tensors = {
        "q": q.contiguous(),
        "k": k.contiguous(),
        "distance_weight": attention.distance_embedding.weight.detach().clone(),
        "probs": probs.contiguous(),
    }
    metadata = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "max_position_embeddings": str(MAX_POSITION),
        "seed": str(SEED),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT), metadata=metadata)
    sys.stderr.write(f"wrote {OUT} ({OUT.stat().st_size} bytes)\n")


if __name__ == "__main__":
    main()
