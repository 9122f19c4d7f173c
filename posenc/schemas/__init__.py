"""Wire contract of the posenc API: pydantic and the standard library only, never torch.

Imported by the gateway, the workers and the ``posenc-client`` SDK alike.
"""

from posenc.schemas.compute import (
    AttentionRequest,
    BiasRequest,
    EncodingRequest,
    RotaryRequest,
)
from posenc.schemas.errors import FieldError, Problem
from posenc.schemas.jobs import (
    ComputeJobSpec,
    Job,
    JobCreate,
    JobList,
    JobProgress,
    JobSpec,
    JobStatus,
)
from posenc.schemas.methods import Kind, MethodInfo, MethodList
from posenc.schemas.tensors import (
    TENSOR_DTYPES,
    RandomTensor,
    TensorData,
    TensorIn,
    TensorOut,
    TensorResponse,
)

__all__ = [
    "TENSOR_DTYPES",
    "AttentionRequest",
    "BiasRequest",
    "ComputeJobSpec",
    "EncodingRequest",
    "FieldError",
    "Job",
    "JobCreate",
    "JobList",
    "JobProgress",
    "JobSpec",
    "JobStatus",
    "Kind",
    "MethodInfo",
    "MethodList",
    "Problem",
    "RandomTensor",
    "RotaryRequest",
    "TensorData",
    "TensorIn",
    "TensorOut",
    "TensorResponse",
]
