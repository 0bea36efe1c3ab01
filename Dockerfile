# syntax=docker/dockerfile:1
# The SOLARIS serving image: pipeline worker, FM worker and ranker, all through `solaris ...`.
#
#   docker build -t solaris:cpu .                              # onnxruntime (CPU)
#   docker build --build-arg EXTRAS=gpu -t solaris:gpu .       # onnxruntime-gpu, FM workers on GPU hosts
#
# The `cpu` and `gpu` extras each bring one onnxruntime wheel (both install the `onnxruntime`
# module, so an image has exactly one). No torch here: training runs elsewhere and the trained
# bundle is mounted read-only at /models (SOLARIS_MODEL_DIR). Faust's RocksDB tables live under
# /data (SOLARIS_CACHE_DIR): one volume per worker, never shared.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ARG EXTRAS=cpu
# HNSWLIB_NO_NATIVE: hnswlib would build with -march=native, tying the image to the build CPU.
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HNSWLIB_NO_NATIVE=1
# hnswlib (and any dependency without a wheel for this platform) compiles here, not at runtime.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY deploy/requirements-cpu.lock deploy/requirements-gpu.lock deploy/
COPY schemas schemas
COPY models models
COPY store store
COPY streams streams
COPY bench bench
# One hashed lock per extra (infra/lock.sh, resolved under the versions CI tested): every wheel
# is hash-checked and nothing unpinned comes in; the project itself goes in without dependencies.
RUN pip install --upgrade pip setuptools wheel \
 && pip install --require-hashes --no-deps -r "deploy/requirements-${EXTRAS}.lock" \
 && pip install --no-deps . \
 && pip check \
 && solaris --version

FROM ${PYTHON_IMAGE} AS runtime
ARG EXTRAS=cpu
LABEL org.opencontainers.image.title="solaris" \
      org.opencontainers.image.description="SOLARIS streaming workers and ranker (extras: ${EXTRAS})" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 solaris \
 && useradd --system --uid 10001 --gid solaris --create-home --home-dir /home/solaris solaris \
 && mkdir -p /data /models \
 && chown solaris:solaris /data /models
COPY --from=builder /opt/venv /opt/venv
COPY deploy/docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    SOLARIS_CACHE_DIR=/data \
    SOLARIS_MODEL_DIR=/models \
    SOLARIS_BIND_HOST=0.0.0.0
USER 10001:10001
WORKDIR /home/solaris
VOLUME ["/data"]
# Faust web (/healthz, /readyz of workers), ranker health, Prometheus metrics
EXPOSE 6066 8080 9101 9102 9103
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["--help"]
