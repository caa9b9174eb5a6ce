# crawler_node image: one image for every role (a node: `run`, the synthetic web: `testweb`).
#
#   docker build -t crawler-node:local .
#   docker run --rm -p 8080:8080 -v crawler-data:/data crawler-node:local            # a one-node cluster
#   docker run --rm crawler-node:local testweb --listen 0.0.0.0:8900 --hosts 30 --pages 50 --seed 1
#
# Every `run` option also comes from CRAWLER_* environment variables (see docker-compose.yml and
# deploy/ for a 3-node cluster). Validated without a Docker engine by .ci/validate-deploy.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# An unprivileged user with a fixed numeric uid/gid, so volume ownership is predictable and
# Kubernetes' runAsNonRoot can verify it (deploy/statefulset.yaml uses the same 10001).
RUN groupadd --system --gid 10001 crawler \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin crawler

# Only what `pip install .` needs (pyproject.toml names README.md as the readme).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crawler_node ./crawler_node
RUN pip install --no-cache-dir . \
    && rm -rf /src

# The data directory (durable frontier, warc/, crawl.log) belongs to the crawler user. WORKDIR
# creates it; it is chowned before VOLUME, so a fresh named volume starts out writable by 10001.
WORKDIR /data
RUN chown 10001:10001 /data
VOLUME ["/data"]

# Container defaults; the environment of compose/Kubernetes (or flags) override them.
ENV CRAWLER_LISTEN=0.0.0.0:8080 \
    CRAWLER_DATA_DIR=/data

USER 10001:10001
EXPOSE 8080

# SIGTERM (docker stop, Kubernetes) is a graceful stop: in-flight work is finished or returned
# to the frontier and the store is flushed, then the process exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["crawler-node"]
CMD ["run"]
