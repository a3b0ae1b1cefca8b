# Hatchway's container image (docs/deploy.md). Build it with `make image`, which passes VERSION (the
# package's, from src/hatchway/__init__.py) and the OCI labels' revision and source; by hand:
#   docker build --build-arg VERSION=$(python3 -c 'import re;print(re.search(r"__version__ = \"(.+)\"", open("src/hatchway/__init__.py").read())[1])') -t hatchway .
# Two stages: the first builds the wheel and a virtualenv from pinned requirements (with pip, the
# build backend and, behind a TLS-inspecting proxy, a CA bundle from deploy/docker/ca/); the second
# copies only the virtualenv and tini onto a fresh base. Any Debian-like base with python3 and
# python3-venv works: BASE_IMAGE defaults to the official slim image, CI passes one made with
# debootstrap (.ci/image-test).
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG VERSION
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1 PIP_CERT=/tmp/pip-ca.pem
# tini forwards SIGTERM to the gateway and reaps stdio MCP servers; strip (binutils) takes the debug
# symbols out of the wheels' native libraries (~40 MB). Both from Debian when the base lacks them.
RUN test -n "${VERSION}" || { echo "build with make image, or pass --build-arg VERSION=<the package version>" >&2; exit 1; }; \
    if ! command -v tini-static >/dev/null || ! command -v strip >/dev/null; then \
      apt-get update -qq && apt-get install -y -qq --no-install-recommends tini binutils >/dev/null; fi
COPY deploy/docker/ /tmp/docker/
# Dependencies before the source: a code change rebuilds only the last layers.
RUN { cat /tmp/docker/ca/*.pem > /tmp/pip-ca.pem 2>/dev/null || cp /etc/ssl/certs/ca-certificates.crt /tmp/pip-ca.pem; } \
 && python3 -m venv /opt/build && /opt/build/bin/pip install --quiet -r /tmp/docker/build-requirements.txt \
 && python3 -m venv /opt/hatchway && /opt/hatchway/bin/pip install --quiet -r /tmp/docker/requirements.txt
COPY pyproject.toml README.md /src/
COPY src/ /src/src/
# What the final stage takes, laid out under /stage as it will be under /.
RUN /opt/build/bin/pip wheel --quiet --no-build-isolation --no-deps --wheel-dir /wheels /src \
 && { test -f "/wheels/hatchway-${VERSION}-py3-none-any.whl" \
      || { echo "VERSION=${VERSION} is not the package's version ($(ls /wheels)): build with make image" >&2; exit 1; }; } \
 && /opt/hatchway/bin/pip install --quiet --no-deps "/wheels/hatchway-${VERSION}-py3-none-any.whl" \
 && /opt/hatchway/bin/pip check \
 && /opt/hatchway/bin/pip uninstall --quiet --yes pip setuptools \
 && find /opt/hatchway -name '*.so*' -type f -exec strip --strip-unneeded {} + \
 && mkdir -p /stage/opt /stage/usr/bin /stage/etc/hatchway \
 && mv /opt/hatchway /stage/opt/hatchway \
 && cp /usr/bin/tini-static /stage/usr/bin/tini \
 && cp /tmp/docker/hatchway.yaml /stage/etc/hatchway/hatchway.yaml

FROM ${BASE_IMAGE}
ARG VERSION
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="Hatchway" \
      org.opencontainers.image.description="Self-hosted, OpenAI-compatible agent gateway" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
# The state directory's group is root (0) with the owner's rights: a runtime that assigns its own
# uid in group 0 (OpenShift's restricted SCC, `docker run --user 12345`) can still write it.
RUN groupadd --system --gid 10001 hatchway \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/hatchway --no-create-home \
      --shell /usr/sbin/nologin hatchway \
 && mkdir -p /var/lib/hatchway \
 && chown 10001:0 /var/lib/hatchway && chmod 0770 /var/lib/hatchway
COPY --from=build /stage/ /
ENV PATH=/opt/hatchway/bin:$PATH \
    HATCHWAY_CONFIG=/etc/hatchway/hatchway.yaml \
    HOME=/var/lib/hatchway \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# State (SQLite, the generated master key, the run-record spool) lives here and nowhere else: the
# root filesystem can be read-only (docker run --read-only --tmpfs /tmp).
VOLUME ["/var/lib/hatchway"]
WORKDIR /var/lib/hatchway
USER 10001:10001
EXPOSE 8080
# Ready = the database (and Redis, when configured) answer. Only `serve` answers HTTP: the same
# image running `worker` or `migrate` reports healthy while its process runs.
# HATCHWAY_HEALTHCHECK_URL when serving on another port. No proxy: an HTTP_PROXY given for the
# upstream calls would otherwise carry the probe of 127.0.0.1 to the proxy.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 CMD ["python3", "-c", "import os, sys, urllib.request\nif b'serve' not in open('/proc/1/cmdline', 'rb').read().split(b'\\0'):\n    sys.exit(0)\ntry:\n    urllib.request.build_opener(urllib.request.ProxyHandler({})).open(os.environ.get('HATCHWAY_HEALTHCHECK_URL', 'http://127.0.0.1:8080/readyz'), timeout=2)\nexcept Exception as exc:\n    sys.exit(f'not ready: {exc}')"]
# tini is PID 1: SIGTERM reaches `hatchway serve`, which drains (drain_seconds) and exits 0.
ENTRYPOINT ["tini", "--", "hatchway"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
