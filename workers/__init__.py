"""Celery workers that run posenc jobs. Import-light: no torch at import time."""
