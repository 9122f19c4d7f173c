"""One module per API area; each has a sync class and an async twin built from the same request builders."""
