"""t5 family (being written)."""
