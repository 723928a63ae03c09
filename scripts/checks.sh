#!/usr/bin/env bash
# The checks that read the source without running the lab: ruff, mypy --strict (the package and
# bench/), the import-linter contracts, and scripts/newest.sh (the unit tests and a CLI smoke at the
# newest versions our ranges allow). Each runs whatever the one before it found; exits 1 if any
# failed. scripts/test.sh runs it beside pytest.
set -uo pipefail
cd "$(dirname "$0")/.."

failed=0
.venv/bin/ruff check . || failed=1
.venv/bin/ruff format --check . || failed=1
.venv/bin/mypy || failed=1
.venv/bin/mypy bench || failed=1  # scripts beside each other, not a package: checked on their own
.venv/bin/lint-imports || failed=1
bash scripts/newest.sh || failed=1
exit "$failed"
