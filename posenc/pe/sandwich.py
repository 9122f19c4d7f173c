"""sandwich family (being written)."""
