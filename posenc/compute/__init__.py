"""The compute routes' library side: each request is *prepared* (validated and costed from the request alone,
nothing allocated or decoded), then *run*. The gateway checks the cost against its budgets and takes a compute
slot in between; a ``compute`` job (``run_compute_job``, on a worker) runs the same request without the gateway's
output budget.

One module per route (``bias``, ``rotary``, ``encodings``, ``attention``; ``rope`` and ``models`` for the real-model
routes), ``cost`` for the one cost model every route reports, ``inputs`` for declared and decoded input tensors,
``jobs`` for compute jobs.

Errors: an unknown method raises ``UnknownMethodError`` (404), a bad value ``InvalidInput`` and bad params
``FieldErrors`` (422). Everything here and in the math names fields relative to the request; :func:`prepare`
adds ``("body",)``, and a job ``("body", "spec", "request")``.
"""

from __future__ import annotations

from posenc.compute.attention import prepare_attention
from posenc.compute.bias import prepare_bias
from posenc.compute.common import (
    ARTIFACT_NAME,
    ATTENTION_TENSOR_FIELDS,
    RESULT_NAME,
    ROTARY_TENSOR_FIELDS,
    OutputSpec,
    Prepared,
    TensorResult,
)
from posenc.compute.dispatch import prepare
from posenc.compute.encodings import prepare_encoding
from posenc.compute.jobs import check_job_budget, prepare_job, run_compute_job, safetensors_metadata
from posenc.compute.rotary import prepare_rotary

__all__ = [
    "ARTIFACT_NAME",
    "ATTENTION_TENSOR_FIELDS",
    "RESULT_NAME",
    "ROTARY_TENSOR_FIELDS",
    "OutputSpec",
    "Prepared",
    "TensorResult",
    "check_job_budget",
    "prepare",
    "prepare_attention",
    "prepare_bias",
    "prepare_encoding",
    "prepare_job",
    "prepare_rotary",
    "run_compute_job",
    "safetensors_metadata",
]
