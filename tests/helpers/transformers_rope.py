"""Hugging Face transformers' own reading of a model config's rotary setup, layer by layer (test-only: transformers
is a test dependency, never imported by the product).

A config.json dict becomes transformers' config object (``CONFIG_MAPPING``; the text config of a multimodal one),
and that object the model's *own* rotary embedding class from its modeling module, so that per-model overrides
count: Qwen2-VL's and Qwen3-VL's M-RoPE sections, Gemma 3's and Olmo 3's buffers per layer type, Gemma 4's per-layer
head sizes, Llama 4's complex rotation, DeepSeek-V4's buffers per rope regime. ``HfRope`` then answers, per decoder
layer, what transformers' forward pass rotates with: the inverse frequencies and the attention scaling (at init, or
after its length-dependent update for dynamic NTK and LongRoPE), whether the layer rotates at all (NoPE), and the
M-RoPE sections. Anything transformers raises while building it (config class, rotary init, a first forward pass)
propagates, and ``CannotRun`` where the cos and sin it builds do not fit the heads the model's attention applies
them to (a shape error in transformers' forward): the caller decides what a refusal means.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

# Kimi K2's config.json says model_type "kimi_k2", for which transformers has no config class: its Kimi K2.5 class
# reads the same fields as its text config (DeepseekV3Config). configuration_kimi_k25.py, KimiK25Config.
KIMI_K2, KIMI_K2_HOST = "kimi_k2", "kimi_k25"
LINEAR_ATTENTION = "linear_attention"  # Qwen3-Next's Gated DeltaNet and Kimi Linear's KDA layers: no rotary at all
# Llama 4's and SmolLM3's attention: ``self.use_rope = config.no_rope_layers[layer_idx]`` (modeling_llama4.py,
# Llama4TextAttention.__init__; modeling_smollm3.py, SmolLM3Attention.__init__); 0 there is a NoPE layer
NO_ROPE_READ = "config.no_rope_layers[layer_idx]"
# apply functions that rotate the first cos.shape[-1] features of a head and pass the rest (partial rotation:
# modeling_glm4_moe.py apply_rotary_pos_emb, ``rotary_dim = cos.shape[-1]``; modeling_phi.py PhiAttention,
# ``self.rotary_ndims``); elsewhere q · cos needs cos as wide as the head
PARTIAL_APPLY = ("cos.shape[-1]", "rotary_ndims")
SMOKE_POSITIONS = 4  # the first forward pass: short, below every original length (no dynamic update happens)


def hf_text_config(config: dict[str, Any]) -> Any:
    """The config object transformers builds from ``config`` (a config.json), its text part for multimodal ones.
    Raises whatever the config class raises (KeyError, ValueError, TypeError from its validation)."""
    fields = copy.deepcopy(config)
    model_type = fields.pop("model_type")
    if model_type == KIMI_K2:
        host: Any = CONFIG_MAPPING[KIMI_K2_HOST]
        return host(text_config=copy.deepcopy(config)).get_text_config()
    return CONFIG_MAPPING[model_type](**fields).get_text_config()


@functools.cache
def modeling_module(config_module: str) -> ModuleType:
    """The modeling module beside a configuration module (imported once per model type)."""
    return importlib.import_module(config_module.replace("configuration_", "modeling_"))


@functools.cache
def _rotary_class(module: ModuleType) -> type[torch.nn.Module] | None:
    """The text model's rotary embedding class, or None where the model's attention rotates nothing (Kimi Linear)."""
    names = [name for name in dir(module) if name.endswith("RotaryEmbedding") and "Vision" not in name]
    if not names:
        return None
    [name] = names
    cls: type[torch.nn.Module] = getattr(module, name)
    return cls


@functools.cache
def _reads_no_rope_layers(module: ModuleType) -> bool:
    return NO_ROPE_READ in inspect.getsource(module)


@functools.cache
def _applies_partially(module: ModuleType) -> bool:
    return any(marker in inspect.getsource(module) for marker in PARTIAL_APPLY)


class CannotRun(Exception):
    """transformers builds the rotary embedding, but the model's attention cannot apply it to its heads."""


@functools.cache
def _attention_class(module: ModuleType) -> Any:
    """The decoder's (softmax) attention class: the one whose name ends in Attention and is not a vision, audio,
    linear (Delta) or compressor part."""
    [name] = [
        name
        for name in dir(module)
        if name.endswith("Attention") and not any(other in name for other in ("Vision", "Audio", "Delta", "Pretrained"))
    ]
    return getattr(module, name)


@dataclass
class HfRope:
    """transformers' rotary embedding for one config, read layer by layer."""

    text: Any  # the (text) config object
    module: ModuleType
    rotary: torch.nn.Module | None  # None: no rotary embedding in the model's code
    labels: dict[int, str | None] = field(default_factory=dict)  # label() per layer, once

    @property
    def num_layers(self) -> int:
        return int(self.text.num_hidden_layers)

    def _layer_type(self, layer: int) -> str | None:
        types = getattr(self.text, "layer_types", None)
        return None if types is None else str(types[layer])

    def label(self, layer: int) -> str | None:
        """The buffer set a layer's attention reads: its layer type (Gemma 3, Olmo 3, Gemma 4), its rope regime
        (DeepSeek-V4's attention picks "main" or "compress": DeepseekV4Attention.rope_layer_type), or None where
        the rotary embedding has one set for all layers."""
        assert self.rotary is not None
        if layer not in self.labels:
            self.labels[layer] = self._label(layer)
        return self.labels[layer]

    def _label(self, layer: int) -> str | None:
        assert self.rotary is not None
        layer_type = self._layer_type(layer)
        if layer_type is not None and hasattr(self.rotary, f"{layer_type}_inv_freq"):
            return layer_type
        per_type = getattr(self.rotary, "rope_type", None)
        if not isinstance(per_type, dict):
            return None
        with torch.device("meta"), warnings.catch_warnings():  # the attention's projections are not allocated
            warnings.simplefilter("ignore")
            attention = _attention_class(self.module)(self.text, layer_idx=layer)
        return str(attention.rope_layer_type)

    def rotates(self, layer: int) -> bool:
        """Whether transformers rotates q and k on this layer."""
        if self.rotary is None or self._layer_type(layer) == LINEAR_ATTENTION:
            return False
        if _reads_no_rope_layers(self.module):
            return bool(self.text.no_rope_layers[layer])
        return True

    def rope_type(self, layer: int) -> str:
        assert self.rotary is not None
        label = self.label(layer)
        rope_type: Any = self.rotary.rope_type
        return str(rope_type if label is None else rope_type[label])

    def rope_parameters(self, layer: int) -> dict[str, Any]:
        """The rope dict the layer's buffers were built from (its label's, or the one flat dict)."""
        label = self.label(layer)
        parameters = self.text.rope_parameters
        return dict(parameters if label is None else parameters[label])

    def forward(self, label: str | None, last_position: int) -> None:
        """One forward pass at positions 0 ... last_position (only the last is passed: the length-dependent
        update reads max(position_ids) + 1), which updates dynamic NTK's and LongRoPE's buffers as in a model."""
        assert self.rotary is not None
        x = torch.zeros(1)
        positions = torch.tensor([[0, last_position]])
        with warnings.catch_warnings():  # notices, not refusals
            warnings.simplefilter("ignore")
            if label is None:
                self.rotary(x, positions)
            else:
                self.rotary(x, positions, layer_type=label)

    def frequencies(self, layer: int, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        """(inv_freq, attention scaling) the layer rotates with: as built (``seq_len`` None) or after a forward pass
        over ``seq_len`` positions (dynamic NTK grows its base past max_position_embeddings; LongRoPE switches to
        its long factors past original_max_position_embeddings)."""
        assert self.rotary is not None
        label = self.label(layer)
        if seq_len is not None:
            self.forward(label, seq_len - 1)
        prefix = "" if label is None else f"{label}_"
        inv_freq = getattr(self.rotary, f"{prefix}inv_freq")
        return inv_freq.detach().clone(), float(getattr(self.rotary, f"{prefix}attention_scaling"))

    def rotated_width(self, layer: int) -> tuple[int, bool]:
        """(features, exact) the layer's attention hands to the apply function: MLA's qk_rope_head_dim, else the
        head (Gemma 4: the layer's own, per_layer_config); exact: the apply function needs cos exactly that wide
        (False: it rotates the first cos.shape[-1] features and passes the rest)."""
        rope_dim = getattr(self.text, "qk_rope_head_dim", None)
        if rope_dim:
            return int(rope_dim), True
        per_layer = getattr(self.text, "per_layer_config", None)
        source = self.text if per_layer is None else per_layer[layer]
        head = getattr(source, "head_dim", None) or source.hidden_size // source.num_attention_heads
        return int(head), not _applies_partially(self.module)

    @property
    def mrope_section(self) -> list[int] | None:
        """The M-RoPE sections the rotary embedding recomposes its frequencies with (Qwen2.5-VL, Qwen3-VL)."""
        sections = getattr(self.rotary, "mrope_section", None)
        return None if sections is None else [int(s) for s in sections]

    def pair_axis(self, layer: int) -> torch.Tensor | None:
        """M-RoPE: the axis (0 t, 1 h, 2 w) each rotated pair turns by, as the rotary's own recomposition places
        them (Qwen2.5-VL's chunks, Qwen3-VL's interleaving, sections that do not fit the pairs included), read by
        recomposing a table whose entries are their axis; None for a one-axis rotary. (pairs,) int64"""
        recompose = getattr(self.rotary, "recomposition_frequencies", None)
        if recompose is None:
            return None
        pairs = self.frequencies(layer)[0].numel()
        tagged = torch.arange(3, dtype=torch.float32).view(3, 1, 1, 1).expand(3, 1, 1, pairs).clone()
        placed: torch.Tensor = recompose(tagged)[..., :pairs]  # (the table, then the same again: cos(emb))
        return placed.reshape(-1).long()


def hf_rope(config: dict[str, Any]) -> HfRope:
    """transformers' config object and the model's own rotary embedding for ``config``, after one short forward
    pass per buffer set (a pass that cannot run, such as M-RoPE sections that do not split the frequencies, is a
    config transformers cannot run). Raises whatever transformers raises."""
    with warnings.catch_warnings():  # its deprecation notices (rope_scaling) are not refusals
        warnings.simplefilter("ignore")
        text = hf_text_config(config)
        module = modeling_module(type(text).__module__)
        cls = _rotary_class(module)
        if cls is None:
            return HfRope(text, module, None)
        found = HfRope(text, module, cls(text))
        rotating = [layer for layer in range(found.num_layers) if found.rotates(layer)]
        for label in {found.label(layer) for layer in rotating}:
            found.forward(label, SMOKE_POSITIONS - 1)
    for layer in rotating:
        inv_freq, _ = found.frequencies(layer)
        width, exact = found.rotated_width(layer)
        if 2 * inv_freq.numel() > width or (exact and 2 * inv_freq.numel() != width):
            raise CannotRun(f"layer {layer}: cos and sin {2 * inv_freq.numel()} wide, its heads rotate {width}")
    return found
