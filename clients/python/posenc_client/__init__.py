"""posenc-client: the Python SDK of the posenc positional-encoding service.

    from posenc_client import Client

    with Client() as client:  # base URL and key from POSENC_BASE_URL / POSENC_API_KEY, or pass them
        bias = client.bias.compute("alibi", num_heads=8, query_length=128).bias

Importing this package loads httpx and pydantic only; numpy, torch, tqdm and matplotlib are imported when a
call needs them.
"""

from posenc_client._client import AsyncClient, Client
from posenc_client._exceptions import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    FieldError,
    JobCancelledError,
    JobError,
    JobFailedError,
    JobWaitTimeoutError,
    NotAcceptableError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ProblemDetails,
    RateLimitError,
    ServerError,
    ServiceUnavailableError,
    ValidationError,
)
from posenc_client._models import (
    Artifact,
    ComputeJobSpec,
    GraphIn,
    Job,
    JobProgress,
    JobSpec,
    JobSummary,
    MethodInfo,
)
from posenc_client._results import AttentionResult, BiasResult, EncodingResult, RotaryResult, TensorResult
from posenc_client._retry import RetryEvent, RetryPolicy
from posenc_client._tensors import BFloat16BitsWarning, bfloat16_bits_to_float32
from posenc_client._version import __version__

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "Artifact",
    "AsyncClient",
    "AttentionResult",
    "AuthenticationError",
    "BFloat16BitsWarning",
    "BadRequestError",
    "BiasResult",
    "Client",
    "ComputeJobSpec",
    "ConflictError",
    "EncodingResult",
    "FieldError",
    "GraphIn",
    "Job",
    "JobCancelledError",
    "JobError",
    "JobFailedError",
    "JobProgress",
    "JobSpec",
    "JobSummary",
    "JobWaitTimeoutError",
    "MethodInfo",
    "NotAcceptableError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "ProblemDetails",
    "RateLimitError",
    "RetryEvent",
    "RetryPolicy",
    "RotaryResult",
    "ServerError",
    "ServiceUnavailableError",
    "TensorResult",
    "ValidationError",
    "__version__",
    "bfloat16_bits_to_float32",
]
