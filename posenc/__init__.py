"""posenc: compute and evaluate transformer positional encodings.

This package is torch-free at import time so that ``posenc.schemas`` can be used by light clients;
the math lives in ``posenc.pe`` (imports torch), the reference attention in ``posenc.attention`` and
the tiny-model evaluation harness in ``posenc.training``.
"""

__version__ = "0.1.0"
