"""xpos family (being written)."""
