"""The posenc HTTP gateway (FastAPI). The ASGI app is ``service.main:app``."""
