#!/usr/bin/env bash
# Installs everything, then runs the checks CI runs: ruff, mypy --strict, the import-linter
# contracts, the unit tests and a CLI smoke test at the newest versions our ranges allow
# (scripts/newest.sh), the whole test suite, and a 5-minute soak (3 replicas x 10 Marquees under
# random network and process faults; bench/soak.py, exits non-zero on a violated check).
# Tests start their own real servers on loopback; under CI=true a missing one fails, never skips.
#
# The soak runs beside the rest from the start: it starts its own redis-server and sshd on
# ephemeral ports, its replicas in network namespaces of its own, and shares nothing with the
# tests, so running it alongside saves its whole length from the run (bench/README.md, "CI").
# Its lines are kept and printed once it ends, then pytest's result line again, last.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
.venv/bin/python bench/soak.py --minutes 5 >"$logs/soak" 2>&1 &
soak=$!

checks=0
.venv/bin/ruff check . || checks=1
.venv/bin/ruff format --check . || checks=1
.venv/bin/mypy || checks=1
.venv/bin/mypy bench || checks=1  # scripts beside each other, not a package: checked on their own
.venv/bin/lint-imports || checks=1
bash scripts/newest.sh || checks=1  # unit tests and a CLI smoke at the newest allowed versions

tests=0
.venv/bin/python -m pytest -ra --durations=30 "$@" 2>&1 | tee "$logs/pytest" || tests=$?

soaked=0
wait "$soak" || soaked=$?
echo "--- bench/soak.py --minutes 5 (ran beside the tests), exit status $soaked:"
cat "$logs/soak"
echo "--- pytest's result, again:"
tail -n 1 "$logs/pytest"
if ((checks || tests || soaked)); then
  echo "failed: static checks $checks, pytest $tests, soak $soaked" >&2
  exit 1
fi
