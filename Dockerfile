# playguard in a container: the daemon runs as PID 1 (it handles SIGTERM and SIGINT itself and starts
# no child processes, so no init is needed), as a non-root user, configured by a mounted settings file
# and PLAYGUARD_* environment variables; secrets come from the environment or mounted files, never
# from the image.

# The base: Debian 12's Python 3.11, the Python CI tests on. A tag moves; for a build that can be
# repeated, pin the digest you checked:
#   docker buildx imagetools inspect python:3.11-slim-bookworm   # prints "Digest: sha256:..."
#   docker build --build-arg BASE=python:3.11-slim-bookworm@sha256:<that digest> .
# No digest is written here: one copied in unchecked would be trusted more than it deserves.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed numeric user and group: mounted keys and settings can be owned for it on the host
# (chown 10001:10001), and an orchestrator's runAsNonRoot can check a number.
RUN groupadd --system --gid 10001 playguard \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/playguard --create-home \
        --shell /usr/sbin/nologin playguard

# Dependencies first, at the versions CI tested, in a layer that changes only with them; then the
# package itself on top without resolving again. PIP_CONSTRAINT reaches pip's isolated build
# environment too.
COPY .ci/constraints.txt pyproject.toml /tmp/build/
RUN python -c "import tomllib; print(*tomllib.load(open('/tmp/build/pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" > /tmp/build/requirements.txt \
    && pip install -c /tmp/build/constraints.txt -r /tmp/build/requirements.txt
COPY README.md /tmp/build/
COPY playguard_async /tmp/build/playguard_async
RUN PIP_CONSTRAINT=/tmp/build/constraints.txt pip install --no-deps /tmp/build && rm -rf /tmp/build

USER 10001:10001
WORKDIR /var/lib/playguard

# Inside the container's own network namespace: reachable by the orchestrator and by a scraper on
# the same network, published to the host only where the compose file says so (loopback there).
# It overrides http_address from the settings file, and the health check below reads it too.
# The web view is off here: beyond loopback it needs PLAYGUARD_WEB_CREDENTIAL_FILE (mount the file,
# mode 0600 owned by 10001 and not a link, and set both it and PLAYGUARD_WEB_VIEW=true to have it).
ENV PLAYGUARD_HTTP_ADDRESS=0.0.0.0:9464 \
    PLAYGUARD_WEB_VIEW=false \
    PLAYGUARD_LOG_FORMAT=json
EXPOSE 9464

# slim has no curl: the image's own Python asks /healthz (the tick loop turns), bypassing any proxy,
# at PLAYGUARD_HTTP_ADDRESS: whatever the settings file says, that variable wins, so overriding it
# (docker run -e) moves the endpoints and the check together.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; r.build_opener(r.ProxyHandler({})).open('http://%s/healthz' % os.environ['PLAYGUARD_HTTP_ADDRESS'], timeout=4)"]

# SIGTERM drains: running cycles finish their phase within shutdown_grace (30 s by default), so give
# `docker stop` a longer timeout than that (compose: stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["playguard"]
CMD ["run", "--config", "/etc/playguard/playguard.toml"]
