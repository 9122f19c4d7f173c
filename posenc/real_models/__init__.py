"""Real models' RoPE: what published configs say and what they mean.

- ``config_fields``    a config read as typed, bounded data (every key the resolver uses; errors at the key)
- ``configs``          a config (or a preset) resolved into one setup per layer, the doctor's warnings, and the
                       conversion between config spellings (``resolve_config``, ``config_layer``, ``convert_config``)
- ``presets``          the rope-relevant fields of widely used models' published configs
- ``diagnostics``      one layer's rotation examined: frequencies and bands, precision, two setups compared, the
                       decode probe, pairing permutations
- ``mrope_positions``  multimodal (M-RoPE) position ids as the models build them

The per-method facts these read (config spellings and keys, length dependence, bands) are the registry's
(``posenc.pe``); nothing here keeps a table of its own.
"""
