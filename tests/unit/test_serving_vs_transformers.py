"""The serving simulator's transformers variants against transformers' own forward and ``generate()`` (a test-only
dependency), on a tiny random LlamaForCausalLM with dynamic NTK scaling (``rope_type="dynamic"``).

A hook on the model's rotary embedding records, for every forward transformers runs, the position ids and the cos
and sin tables it returned (what every layer's ``apply_rotary_pos_emb`` rotates q and k with). The simulator's seeded
q and k are then rotated with those tables by transformers' own ``apply_rotary_pos_emb``, in float64, and their
logits compared with full recomputation (a fresh rotary embedding called once on the tokens the query sees, as a
fresh model's forward would): that difference is the one transformers shows, and it must equal the error the
simulator reports for the same variant, row or request. transformers' tables are float32 (its frequencies and the
angles are float32 products), so the two agree to float32 rounding of angles up to ``LENGTH`` radians; where
transformers' tables carry the same bits as the recomputation's, its difference is exactly 0, and so is ours.

Llama 4's query temperature on its NoPE layers is read the same way from a one-layer Llama4ForCausalLM: the query
its eager attention receives over the query its projection gave, per token of a left-padded batch and of each row
alone.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import transformers.models.llama4.modeling_llama4 as llama4_modeling
from transformers import Llama4ForCausalLM, Llama4TextConfig, LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import DynamicCache
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from posenc.real_models.presets import get_preset
from posenc.real_models.serving import (
    Schedules,
    ServeReport,
    ServingLayer,
    VariantResult,
    seeded_pool,
    serve_check,
    serving_layer,
)

ORIGINAL = 16  # max_position_embeddings: dynamic NTK scales past it
FACTOR = 2.0
HEADS, HEAD_DIM = 2, 16
LENGTH = 40
PREFILL = 20  # at least ORIGINAL: the prefill forward keeps the state a longer request left
# chunk ends 12 (below ORIGINAL: a reset of the state), 24, 36, 40; or 16, 32, 40 (at or above it: none)
CHUNKS = [12, ORIGINAL]
BATCH = [LENGTH, 25, 9]  # the longest row sets the batch's length; 25 > ORIGINAL scales alone, 9 does not
# growth to 40; 30 keeps 40's frequencies (no reset at or above ORIGINAL); 10 resets; 24 grows from the original
REQUESTS = [LENGTH, 30, 10, 24]
SEED = 5
# float32 tables: a float32 angle p·ω at p < LENGTH is off by at most about ulp(LENGTH) = 4e-6 rad (and cos, sin
# by their own rounding, 6e-8), so a logit of unit vectors (Cauchy-Schwarz over the pairs) by less than 1e-5
FLOAT32_LOGITS = 1e-5


def _config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=64,
        hidden_size=HEADS * HEAD_DIM,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=ORIGINAL,
        rope_parameters={"rope_type": "dynamic", "factor": FACTOR, "rope_theta": 10000.0},
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


def _layer() -> ServingLayer:
    params = {"factor": FACTOR, "original_max_position_embeddings": ORIGINAL}
    return serving_layer("rope_dynamic_ntk", params, HEAD_DIM, "half", heads=HEADS)  # HF rotates half-split pairs


@dataclass(frozen=True)
class Call:
    """One forward's rotary tables: position ids (B, N) and cos, sin (B, N, d), as the model's layers got them."""

    position_ids: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor


class Recorded:
    """A tiny seeded Llama whose rotary embedding's every call is recorded in ``calls``."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = LlamaForCausalLM(_config()).eval()
        self.calls: list[Call] = []
        self.model.model.rotary_emb.register_forward_hook(self._record, with_kwargs=True)

    def _record(self, module: Any, args: Any, kwargs: dict[str, Any], out: tuple[torch.Tensor, torch.Tensor]) -> None:
        position_ids = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
        self.calls.append(Call(position_ids.clone(), out[0].clone(), out[1].clone()))

    def forward(self, count: int) -> None:
        """A forward of ``count`` tokens from a fresh cache: one request."""
        with torch.no_grad():
            self.model(input_ids=_tokens(1, count))


def _tokens(rows: int, count: int) -> torch.Tensor:
    return torch.randint(3, 64, (rows, count), generator=torch.Generator().manual_seed(count))


def _fresh(count: int) -> Call:
    """Full recomputation's tables: a fresh rotary embedding called once on positions 0 … count − 1."""
    fresh = LlamaRotaryEmbedding(_config())
    position_ids = torch.arange(count)[None]  # (1, N)
    cos, sin = fresh(torch.zeros(1, dtype=torch.float32), position_ids)
    return Call(position_ids, cos, sin)


def _rotated(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """t (H, N, d) float64 rotated by transformers' own apply_rotary_pos_emb with tables (N, d)."""
    rotated, _ = apply_rotary_pos_emb(t[None], t[None], cos[None].double(), sin[None].double())
    return rotated[0]


def _causal_logits(q: torch.Tensor, k: torch.Tensor, start: int) -> torch.Tensor:
    """Logits (H, r, m) of queries at positions start … start + r − 1 over keys 0 … m − 1, −inf in the future."""
    logits = torch.matmul(q, k.transpose(-1, -2))
    future = torch.arange(k.shape[1])[None, :] > torch.arange(start, start + q.shape[1])[:, None]  # (r, m)
    return logits.masked_fill(future[None], float("-inf"))


def _difference(have: torch.Tensor, want: torch.Tensor) -> float:
    seen = torch.isfinite(want)
    return float((have - want)[seen].abs().max())


def _report(**sizes: Any) -> tuple[ServeReport, torch.Tensor, torch.Tensor]:
    layer = _layer()
    schedules = Schedules.build(LENGTH, **sizes)
    q, k = seeded_pool(layer, schedules, SEED)
    return serve_check(layer, schedules, seed=SEED), q, k


def _variant(report: ServeReport, label: str) -> VariantResult:
    found = [variant for variant in report.variants if variant.label == label]
    assert len(found) == 1, [variant.label for variant in report.variants]
    return found[0]


def _cached_error(calls: list[Call], q: torch.Tensor, k: torch.Tensor) -> float:
    """transformers' KV cache of one sequence over ``calls``: each call's keys rotated with its tables and kept,
    its queries rotated with its tables over every key so far, against the fresh recomputation of tokens
    0 … end − 1 of the call; the largest |logit difference| over all calls."""
    keys: list[torch.Tensor] = []
    worst = 0.0
    for call in calls:
        positions = call.position_ids[0]
        start, stop = int(positions[0]), int(positions[-1]) + 1
        assert positions.tolist() == list(range(start, stop))
        queries = _rotated(q[:, start:stop], call.cos[0], call.sin[0])
        keys.append(_rotated(k[:, start:stop], call.cos[0], call.sin[0]))
        have = _causal_logits(queries, torch.cat(keys, dim=1), start)
        fresh = _fresh(stop)
        want_q = _rotated(q[:, start:stop], fresh.cos[0, start:], fresh.sin[0, start:])
        want = _causal_logits(want_q, _rotated(k[:, :stop], fresh.cos[0], fresh.sin[0]), start)
        worst = max(worst, _difference(have, want))
    return worst


# ------------------------------------------------------------------------------------------------ padded batch
def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's token ids and attention mask, left-padded to the longest row."""
    width = max(BATCH)
    ids = _tokens(len(BATCH), width)
    mask = torch.zeros(len(BATCH), width, dtype=torch.long)
    for row, count in enumerate(BATCH):
        mask[row, width - count :] = 1
        ids[row, : width - count] = 0
    return ids, mask


@pytest.mark.parametrize("entry", ["generate", "forward"])
def test_left_padded_batch_row_errors_are_the_differences_transformers_shows(entry: str) -> None:
    report, q, k = _report(batch_lengths=BATCH, requests=REQUESTS)
    variant = _variant(report, "transformers_left_padded_batch")
    model = Recorded()
    ids, mask = _padded_batch()
    with torch.no_grad():
        if entry == "generate":
            model.model.generate(ids, attention_mask=mask, max_new_tokens=2, min_new_tokens=2, do_sample=False)
        else:  # a forward given the position ids generate() takes from the mask
            position_ids = (mask.cumsum(-1) - 1).clamp_min(0)
            model.model(input_ids=ids, attention_mask=mask, position_ids=position_ids)
    batch = model.calls[0]  # the prefill: one call for every row
    width = max(BATCH)
    assert int(batch.position_ids.max()) + 1 == width
    shown = []
    for row, count in enumerate(BATCH):
        real = slice(width - count, width)
        assert batch.position_ids[row, real].tolist() == list(range(count))
        have_q = _rotated(q[:, :count], batch.cos[row, real], batch.sin[row, real])
        have_k = _rotated(k[:, :count], batch.cos[row, real], batch.sin[row, real])
        alone = _fresh(count)  # the row recomputed alone
        want_q = _rotated(q[:, :count], alone.cos[0], alone.sin[0])
        want_k = _rotated(k[:, :count], alone.cos[0], alone.sin[0])
        shown.append(_difference(_causal_logits(have_q, have_k, 0), _causal_logits(want_q, want_k, 0)))
    assert variant.sequence_errors == pytest.approx(shown, abs=FLOAT32_LOGITS)
    # the longest row is its own recomputation; the shorter ones are rotated for the longest row's length
    assert shown[0] == variant.sequence_errors[0] == 0.0
    assert min(shown[1:]) > 100 * FLOAT32_LOGITS
    assert variant.verdict == "differs"
    assert variant.first_wrong is not None
    assert variant.first_wrong.sequence == 1
    assert _variant(report, "left_padded_batch").verdict == "exact"


# ------------------------------------------------------------------------------------------------ state
def test_requests_carry_the_dynamic_state_as_transformers_forward_does() -> None:
    report, q, k = _report(requests=REQUESTS)
    variant = _variant(report, "transformers_requests")
    model = Recorded()
    for count in REQUESTS:
        model.forward(count)
    shown = [_cached_error([call], q, k) for call in model.calls]
    assert variant.sequence_errors == pytest.approx(shown, abs=FLOAT32_LOGITS)
    # only the request that came after a longer one without falling below ORIGINAL differs (30 after 40)
    assert [error == 0.0 for error in shown] == [error == 0.0 for error in variant.sequence_errors]
    assert [error > 100 * FLOAT32_LOGITS for error in shown] == [False, True, False, False]
    assert variant.first_wrong is not None
    assert variant.first_wrong.sequence == 1


def _chunked_prefill(model: Recorded, chunk: int) -> list[Call]:
    """transformers' chunked prefill of LENGTH tokens: a forward per chunk into one DynamicCache; its calls."""
    served = len(model.calls)
    cache, ids = DynamicCache(config=model.model.config), _tokens(1, LENGTH)
    with torch.no_grad():
        for start in range(0, LENGTH, chunk):
            stop = min(start + chunk, LENGTH)
            position_ids = torch.arange(start, stop)[None]
            model.model(input_ids=ids[:, start:stop], past_key_values=cache, position_ids=position_ids, use_cache=True)
    return model.calls[served:]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_chunked_prefill_after_the_requests_is_transformers_cached_forward(chunk: int) -> None:
    report, q, k = _report(chunk_sizes=[chunk], requests=REQUESTS[:2])
    variant = _variant(report, f"transformers_chunked_prefill[chunk={chunk}]")
    model = Recorded()
    for count in REQUESTS[:2]:
        model.forward(count)
    shown = _cached_error(_chunked_prefill(model, chunk), q, k)
    assert variant.max_error == pytest.approx(shown, abs=FLOAT32_LOGITS)
    assert shown > 100 * FLOAT32_LOGITS
    # the same chunks from a fresh model: the stale keys alone (the simulator's stale_cached_keys)
    fresh = _cached_error(_chunked_prefill(Recorded(), chunk), q, k)
    stale = _variant(report, f"stale_cached_keys[chunk={chunk}]")
    assert stale.max_error == pytest.approx(fresh, abs=FLOAT32_LOGITS)
    if chunk < ORIGINAL:  # the first chunk resets the state the requests left: as from a fresh model
        assert shown == pytest.approx(fresh, abs=FLOAT32_LOGITS)
    else:  # every chunk keeps the 40-token frequencies of the first request
        assert abs(shown - fresh) > 100 * FLOAT32_LOGITS


@pytest.mark.parametrize("requests", [REQUESTS[:2], [10]])
def test_generate_after_the_requests_is_transformers_decode(requests: list[int]) -> None:
    report, q, k = _report(prefill=PREFILL, requests=requests)
    variant = _variant(report, f"transformers_decode[prefill={PREFILL}]")
    model = Recorded()
    for count in requests:
        model.forward(count)
    served = len(model.calls)
    with torch.no_grad():  # the last token generated is never fed back: LENGTH tokens pass through the model
        new = LENGTH - PREFILL + 1
        model.model.generate(_tokens(1, PREFILL), max_new_tokens=new, min_new_tokens=new, do_sample=False)
    calls = model.calls[served:]
    assert [int(call.position_ids.max()) + 1 for call in calls] == [PREFILL, *range(PREFILL + 1, LENGTH + 1)]
    shown = _cached_error(calls, q, k)
    assert variant.max_error == pytest.approx(shown, abs=FLOAT32_LOGITS)
    if max(requests) > PREFILL:  # the prefill and every step keep the longer request's frequencies
        stale = _variant(report, f"stale_cached_keys_decode[prefill={PREFILL}]")
        assert abs(variant.max_error - stale.max_error) > 100 * FLOAT32_LOGITS
    else:  # nothing longer came before: transformers' generate() is the stale cache of a fresh model
        assert variant.max_error == _variant(report, f"stale_cached_keys_decode[prefill={PREFILL}]").max_error


# ------------------------------------------------------------------------------------------------ Llama 4's τ
FLOOR_SCALE, ATTN_SCALE = 4, 0.1  # Llama 4's τ steps every floor_scale positions (8192 in the model)


def _llama4_layer() -> ServingLayer:
    config = copy.deepcopy(get_preset("llama-4-scout-17b-16e"))
    config["text_config"]["floor_scale"] = FLOOR_SCALE
    layer = serving_layer(None, {}, 0, "half", config, 3, heads=HEADS)
    assert layer.temperature == (FLOOR_SCALE, ATTN_SCALE, 1.0)  # layer 3 is a NoPE layer with the temperature
    return layer


@pytest.fixture
def llama4_queries(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """The queries transformers' eager attention receives, recorded while the test runs (transformers'
    eager_attention_forward of modeling_llama4 wrapped: it records, then runs unchanged)."""
    recorded: list[torch.Tensor] = []
    original = llama4_modeling.eager_attention_forward

    def record(module: Any, query: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        recorded.append(query.clone())
        return original(module, query, *args, **kwargs)

    monkeypatch.setattr(llama4_modeling, "eager_attention_forward", record)
    return recorded


def _llama4_temperatures(recorded: list[torch.Tensor], ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """τ per (row, slot) of a one-layer Llama 4 NoPE model's forward: the query it attends with over the query
    its projection gave (a least-squares ratio per token)."""
    config = Llama4TextConfig(
        vocab_size=64,
        hidden_size=HEADS * HEAD_DIM,
        intermediate_size=32,
        intermediate_size_mlp=32,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HEAD_DIM,
        no_rope_layers=[0],  # 0: the layer does not rotate (Llama4TextAttention: use_rope = no_rope_layers[i])
        num_local_experts=1,
        moe_layers=[],
        attn_temperature_tuning=True,
        floor_scale=FLOOR_SCALE,
        attn_scale=ATTN_SCALE,
        attention_chunk_size=4 * LENGTH,
        use_qk_norm=False,
        pad_token_id=0,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Llama4ForCausalLM(config).eval()
    projected: list[torch.Tensor] = []
    model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, a, out: projected.append(out.clone()))
    recorded.clear()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0))
    rows, tokens = ids.shape
    raw = projected[0].view(rows, tokens, HEADS, HEAD_DIM).transpose(1, 2).double()  # (B, H, N, D)
    scaled = recorded[0].double()
    return (scaled * raw).sum(dim=(1, 3)) / (raw * raw).sum(dim=(1, 3))  # (B, N)


def test_llama4_padded_batch_takes_the_temperature_at_the_slots_as_transformers(
    llama4_queries: list[torch.Tensor],
) -> None:
    layer = _llama4_layer()
    schedules = Schedules.build(LENGTH, batch_lengths=BATCH)
    q, k = seeded_pool(layer, schedules, SEED)
    variant = _variant(serve_check(layer, schedules, seed=SEED), "transformers_left_padded_batch")
    ids, mask = _padded_batch()
    batch = _llama4_temperatures(llama4_queries, ids, mask)  # (B, W)
    width, shown = max(BATCH), []
    for row, count in enumerate(BATCH):
        alone = _llama4_temperatures(llama4_queries, ids[row : row + 1, width - count :], mask[row : row + 1, :count])
        logits = _causal_logits(q[:, :count], k[:, :count], 0)  # (H, n, n) before τ
        have = logits * batch[row, width - count :][None, :, None]
        want = logits * alone[0][None, :, None]
        shown.append(_difference(have, want))
    assert variant.sequence_errors == pytest.approx(shown, abs=FLOAT32_LOGITS)
    # the longest row has no padding: its slots are its positions; the shorter ones have τ a step ahead somewhere
    assert shown[0] == variant.sequence_errors[0] == 0.0
    assert min(shown[1:]) > 100 * FLOAT32_LOGITS
