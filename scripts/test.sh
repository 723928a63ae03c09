#!/usr/bin/env bash
# Installs everything, then runs the checks CI runs: ruff, mypy --strict, the import-linter
# contracts, the unit tests and a CLI smoke test at the newest versions our ranges allow
# (scripts/newest.sh), the whole test suite, and a 5-minute soak (3 replicas x 10 Marquees under
# random network and process faults; bench/soak.py, exits non-zero on a violated check).
# Tests start their own real servers on loopback; under CI=true a missing one fails, never skips.
#
# Only pytest runs in the foreground; the rest runs beside it from the start and shares nothing
# with it (bench/README.md, "Beside the tests (CI)"), so none of it adds its length to the run:
# - the soak starts its own redis-server and sshd on ephemeral ports and its replicas in network
#   namespaces of its own;
# - scripts/checks.sh (ruff, mypy, lint-imports, scripts/newest.sh) reads the source and writes
#   only its caches and .venv-newest, a virtual environment of its own;
# - with no arguments, pytest's unit tests (tests/unit: no lab server; a program such as promtool
#   runs on files in the test's own temporary directory) run in a pytest of their own, while the
#   integration tests run in the foreground. Arguments (a path, -k) run one pytest as given.
# Those two run at a lower priority (nice): on a machine of two cores they take the CPU that the
# integration tests' waits for servers and timeouts leave idle, not the CPU those tests use.
# Each one's lines are kept and printed once it and pytest are done, then pytest's result line
# again, last.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
.venv/bin/python bench/soak.py --minutes 5 >"$logs/soak" 2>&1 &
soak=$!

nice -n 10 bash scripts/checks.sh >"$logs/checks" 2>&1 &
checks_job=$!

pytest=(.venv/bin/python -m pytest -ra --durations=30)
if (($#)); then
  foreground=("$@")
else
  foreground=(tests/integration)
  # Its own --basetemp (scripts/newest.sh says why): not the integration run's directories.
  nice -n 10 "${pytest[@]}" -p no:cacheprovider --basetemp "$logs/unit-tmp" tests/unit \
    >"$logs/unit" 2>&1 &
  unit_job=$!
fi

tests=0
"${pytest[@]}" "${foreground[@]}" 2>&1 | tee "$logs/pytest" || tests=$?

if [[ -v unit_job ]]; then
  unit=0
  wait "$unit_job" || unit=$?
  echo "--- pytest tests/unit (ran beside the integration tests), exit status $unit:"
  cat "$logs/unit"
  ((unit == 0)) || tests=$unit
fi
checks=0
wait "$checks_job" || checks=$?
echo "--- scripts/checks.sh (ran beside the tests), exit status $checks:"
cat "$logs/checks"
soaked=0
wait "$soak" || soaked=$?
echo "--- bench/soak.py --minutes 5 (ran beside the tests), exit status $soaked:"
cat "$logs/soak"
echo "--- pytest's result, again:"
[[ ! -v unit_job ]] || echo "tests/unit: $(tail -n 1 "$logs/unit")"
tail -n 1 "$logs/pytest"
if ((checks || tests || soaked)); then
  echo "failed: static checks $checks, pytest $tests, soak $soaked" >&2
  exit 1
fi
