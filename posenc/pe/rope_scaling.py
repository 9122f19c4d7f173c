"""rope_scaling family (being written)."""
