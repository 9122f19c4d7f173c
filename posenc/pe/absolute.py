"""absolute family (being written)."""
