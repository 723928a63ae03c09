#!/usr/bin/env bash
# Installs the lab's servers and the package with its runtime dependencies only (no test or dev
# extras), then starts a lab of real servers on loopback (Redis, two sshd + dockerd Marquees, a
# registry with auth, a git origin) with `playguard lab up` and runs the daemon against it for 45
# seconds: the first tick converges both Marquees, later ticks show the cheap "nothing to
# do" path. Then it prints what each Marquee's cycles did, stops the lab (`playguard lab down`, also
# on Ctrl-C or an error) and says how to try it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --runtime
playguard=.venv/bin/playguard
lab_dir=$(mktemp -d "${TMPDIR:-/tmp}/pg-demo-XXXXXX")
trap '"$playguard" lab down --dir "$lab_dir"' EXIT
eval "$("$playguard" lab up --dir "$lab_dir" --marquees 2 --tick 15 "$@")"
# SIGTERM at the end: the daemon drains (running cycles finish their phase) and exits 0.
timeout --signal=TERM --preserve-status "${DEMO_SECONDS:-45}" "$playguard" run
echo
echo "What happened:"
"$playguard" status
.venv/bin/python -m playguard_lab.summary
cat <<'NEXT'

Try it by hand (the lab keeps running until `playguard lab down`):
  eval "$(.venv/bin/playguard lab up)"
  .venv/bin/playguard cycle marquee-0
  .venv/bin/playguard status
  .venv/bin/playguard describe marquee-0
  .venv/bin/playguard run            # Ctrl-C to stop
  .venv/bin/playguard lab down
NEXT
