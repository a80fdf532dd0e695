# chokaq worker image: Python 3.11 + Microsoft ODBC Driver 18 for SQL Server.
#
#   docker build -t chokaq-worker .
#   docker run --rm -e CHOKAQ_STORAGE_URL=... -e CHOKAQ_APP=jobs:app chokaq-worker
#
# ENTRYPOINT is the chokaq CLI, so the container's arguments are chokaq arguments:
# `--app module:app worker`, `db upgrade`, `health`. The exec form does not expand variables,
# so `$CHOKAQ_APP` is never written into CMD: the CLI reads CHOKAQ_APP itself as the default of
# its group option --app. `docker run -e CHOKAQ_APP=jobs:app image` therefore runs a worker;
# the Container App (infra/bicep/modules/worker.bicep) also passes --app explicitly.
FROM python:3.11-slim-bookworm

ARG CHOKAQ_EXTRAS=mssql,otel

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Microsoft ODBC Driver 18 from Microsoft's Debian 12 repository (msodbcsql18 needs ACCEPT_EULA).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl gnupg \
    && curl -fsSL https://packages.microsoft.com/keys/microsoft.asc \
        | gpg --dearmor -o /usr/share/keyrings/microsoft-prod.gpg \
    && curl -fsSL https://packages.microsoft.com/config/debian/12/prod.list \
        -o /etc/apt/sources.list.d/mssql-release.list \
    && apt-get update \
    && ACCEPT_EULA=Y apt-get install -y --no-install-recommends msodbcsql18 unixodbc \
    && apt-get purge -y --auto-remove curl gnupg \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# The project, including the handler modules that CHOKAQ_APP / --app points at.
COPY . /app
RUN pip install ".[${CHOKAQ_EXTRAS}]"

RUN groupadd --system --gid 10001 chokaq \
    && useradd --system --uid 10001 --gid chokaq --home-dir /app --shell /usr/sbin/nologin chokaq
USER 10001:10001

# The worker keeps its health in this file: healthy while it rides out a database outage, unhealthy
# past Storage.OutageTolerance. Without the file (other commands) `chokaq health` pings the database.
# Docker and docker compose use this; Azure Container Apps ignores HEALTHCHECK (HTTP/TCP probes only).
ENV CHOKAQ_EXECUTION__HEALTH_FILE=/tmp/chokaq-worker.health
HEALTHCHECK --interval=30s --timeout=10s --start-period=20s --retries=3 CMD ["chokaq", "health"]

ENTRYPOINT ["chokaq"]
CMD ["worker"]
