"""fire family (being written)."""
