# playguard in a container: the daemon runs as PID 1 (it handles SIGTERM and SIGINT itself and starts
# no child processes, so no init is needed), as a non-root user, configured by a mounted settings file
# and PLAYGUARD_* environment variables; secrets come from the environment or mounted files, never
# from the image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --system playguard \
    && useradd --system --gid playguard --home-dir /var/lib/playguard --create-home \
        --shell /usr/sbin/nologin playguard

# The versions CI tested; PIP_CONSTRAINT reaches pip's isolated build environment too.
COPY .ci/constraints.txt /tmp/build/constraints.txt
COPY pyproject.toml README.md /tmp/build/
COPY playguard_async /tmp/build/playguard_async
RUN PIP_CONSTRAINT=/tmp/build/constraints.txt pip install /tmp/build && rm -rf /tmp/build

USER playguard
WORKDIR /var/lib/playguard

# Inside the container's own network namespace: reachable by the orchestrator and by a scraper on
# the same network, published to the host only where the compose file says so (loopback there).
# It overrides http_address from the settings file, and the health check below reads it too.
ENV PLAYGUARD_HTTP_ADDRESS=0.0.0.0:9464 \
    PLAYGUARD_LOG_FORMAT=json
EXPOSE 9464

# slim has no curl: the image's own Python asks /healthz (the tick loop turns), bypassing any proxy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; r.build_opener(r.ProxyHandler({})).open('http://%s/healthz' % os.environ['PLAYGUARD_HTTP_ADDRESS'], timeout=4)"]

# SIGTERM drains: running cycles finish their phase within shutdown_grace (30 s by default), so give
# `docker stop` a longer timeout than that (compose: stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["playguard"]
CMD ["run", "--config", "/etc/playguard/playguard.toml"]
