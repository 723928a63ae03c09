#!/usr/bin/env bash
# Installs everything, then starts a lab of real servers on loopback (Redis, two sshd + dockerd
# Marquees, a registry with auth, a git origin) and runs the daemon against it for 45 seconds:
# the first tick converges both Marquees, later ticks show the cheap "nothing to do" path.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/playguard lab --marquees 2 --duration "${DEMO_SECONDS:-45}" --tick 15 "$@"
