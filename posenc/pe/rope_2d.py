"""rope_2d family (being written)."""
