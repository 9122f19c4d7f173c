# posenc: one image for the gateway and the workers (CPU torch; the GPU worker image is the same with the CUDA
# wheel, see TORCH_INDEX below). The containers run the same commands the tests run: `posenc serve` and
# `posenc worker`.
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
# CPU wheels: ~200 MB instead of ~2.7 GB of CUDA libraries (service.md §1.9). For a GPU image build with
# --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    POSENC_STATE_DIR=/var/lib/posenc \
    POSENC_ARTIFACT_DIR=/var/lib/posenc/artifacts \
    PYTORCH_NVML_BASED_CUDA_CHECK=1

# A C++ compiler for torch.compile: Inductor builds its CPU kernels with it and Triton its GPU launchers
# (train.compile, the gateway's one-pass rotary kernel); without one both run eagerly.
RUN apt-get update && apt-get install -y --no-install-recommends g++ && rm -rf /var/lib/apt/lists/*
RUN pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"

WORKDIR /app
COPY pyproject.toml README.md ./
COPY posenc ./posenc
COPY service ./service
COPY workers ./workers
# Flower is only run by the compose `monitoring` profile; it is small, so it ships in the one image.
RUN pip install . "flower==2.2.0"

RUN useradd --create-home --uid 10001 posenc \
    && mkdir -p /var/lib/posenc/artifacts /var/lib/posenc/compile-cache \
    && chown -R posenc:posenc /var/lib/posenc
USER posenc

EXPOSE 8000
# The gateway by default; compose overrides the command for workers and Flower.
CMD ["posenc", "serve", "--host", "0.0.0.0", "--port", "8000"]
