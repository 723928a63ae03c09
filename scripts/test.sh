#!/usr/bin/env bash
# Installs everything, then runs the checks CI runs: ruff, mypy --strict, the import-linter
# contracts, the whole test suite, then a 5-minute soak (3 replicas x 10 Marquees under random
# network and process faults; bench/soak.py, exits non-zero on a violated check).
# Tests start their own real servers on loopback; under CI=true a missing one fails, never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/mypy bench  # scripts beside each other, not a package: checked on their own
.venv/bin/lint-imports
.venv/bin/python -m pytest -ra "$@"
.venv/bin/python bench/soak.py --minutes 5
