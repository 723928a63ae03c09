#!/usr/bin/env bash
# Installs everything playguard_async and its lab need on Debian 12, as root: the real servers the
# demo starts (redis-server, sshd, dockerd, docker-registry with htpasswd, docker-compose, git,
# busybox-static for the lab's image) and, for the tests, those only they start (redis-tools for
# redis-cli --cluster create, openssl for the lab's TLS certificate, postgresql for the PostgreSQL
# desired state, chromium and chromium-driver for the web view's browser tests, prometheus (and
# its promtool) and prometheus-alertmanager, which check and prove the shipped alerting rules,
# systemd-analyze to check the unit file, curl for the lab guide), and a virtual environment in
# .venv with the package, its tracing, test, dev and docs extras (docs: MkDocs, which checks.sh
# builds the site with), at the versions CI tested. With --runtime (the demo): the demo's servers
# and the package with its runtime dependencies only, no test, dev or docs extras.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  redis-server openssh-server openssh-client docker.io docker-registry docker-compose
  busybox-static apache2-utils iptables git ca-certificates python3 python3-venv python3-pip
)
extras="[tracing,test,dev,docs]"
case "${1:-}" in
  "") packages+=(
        redis-tools openssl systemd postgresql chromium chromium-driver prometheus
        prometheus-alertmanager curl
      ) ;;
  --runtime) extras="" ;;
  *) echo "usage: $0 [--runtime]" >&2; exit 2 ;;
esac
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  # No service may start while packages install (prometheus would listen on :9090 and scrape;
  # the tests start their own servers on loopback). A policy the machine has already is kept.
  policy=/usr/sbin/policy-rc.d
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  # The tests start their own, on loopback: the packages' services are not to start at the next
  # boot either.
  for service in prometheus prometheus-alertmanager; do
    if [[ " ${missing[*]} " == *" $service "* ]]; then
      systemctl disable --quiet "$service.service" || echo "install.sh: $service.service not disabled" >&2
    fi
  done
fi
# Debian starts redis-server and dockerd as services where systemd runs; the lab starts its own on
# ephemeral ports and sockets, so those are neither needed nor in the way.

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c .ci/constraints.txt -e ".${extras}"
