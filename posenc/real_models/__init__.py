"""Real models' RoPE: what published configs say and what they mean.

- ``config_fields``    a config read as typed, bounded data (every key the resolver uses; errors at the key)
- ``configs``          a config (or a preset) resolved into one setup per layer, the doctor's warnings, and the
                       conversion between config spellings (``resolve_config``, ``config_layer``, ``convert_config``)
- ``model_types``      one record per model type, read from transformers' own config classes: class defaults,
                       rope dicts per layer type, the keys its rotary code reads, NoPE layers, its llama.cpp
                       architecture (``model_type_record``: the one lookup)
- ``presets``          the rope-relevant fields of widely used models' published configs
- ``gguf_files``       a GGUF's metadata mapped back to a config as llama.cpp's loader reads it
                       (``gguf_llama_cpp``: the loader's rules; ``gguf_compare``: against the source config)
- ``diagnostics``      one layer's rotation examined: two setups compared, the decode probe (``rotary_setup``: one
                       layer's rotation; ``rotary_pairs``: frequencies and bands, precision, pairing permutations)
- ``serving``          the serving simulator (``serving_layer``, ``serving_layouts``), transformers' own schedules
- ``mrope_positions``  multimodal (M-RoPE) position ids as the models build them

The per-method facts these read (config spellings and keys, length dependence, bands) are the registry's
(``posenc.pe``); nothing here keeps a table of its own.
"""
