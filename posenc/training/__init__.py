"""Tiny-transformer training and length-extrapolation evaluation, with the PE as the only variable.

The job entry point is :func:`run_job` (see ``posenc.training.jobs``); Celery tasks call it and nothing else.
"""
