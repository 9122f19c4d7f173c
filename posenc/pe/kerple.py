"""kerple family (being written)."""
