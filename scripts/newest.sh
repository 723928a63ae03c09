#!/usr/bin/env bash
# The package at the newest versions its dependency ranges allow (pyproject.toml), as a plain
# `pip install` gives a user today, not at the versions .ci/constraints.txt pins: installs them in a
# virtual environment of its own (.venv-newest), prints the versions that matter, runs the unit
# tests and a smoke test of the command with DeprecationWarning an error. A dependency release
# that breaks us, or makes every command print warnings, fails CI here instead of being found by
# a user (cryptography 51 under asyncssh did: five warnings, ten lines, before every command's
# output).
# Runs from scripts/test.sh; about two and a half minutes from scratch: a minute installing, the
# rest the unit tests.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-newest
# Our constraints file is never passed; PIP_CONSTRAINT is cleared in case a caller exported it.
# The machine's own pip configuration (its indexes, its caps) still applies.
unset PIP_CONSTRAINT
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
# The dev extra too: a unit test runs mypy on the phases' typing; the docs extra: a unit test
# builds the docs site.
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q --upgrade --upgrade-strategy eager -e ".[tracing,test,dev,docs]"
echo "--- newest allowed versions:"
"$venv/bin/python" -m pip list --format freeze 2>/dev/null \
  | grep -iE '^(asyncssh|cryptography|redis|aiohttp|aiodocker|pydantic|pydantic-settings|click|structlog|asyncpg|pytest)==' \
  | tr '\n' ' '
echo

failed=0
# pytest already turns every warning into an error (pyproject.toml); -W makes it so for whatever
# runs before pytest's own filters apply, imports included.
# Its own --basetemp: pytest's numbered directories under /tmp/pytest-of-$USER are shared by
# every pytest of the user, and one cleaning them while another walks them left an unclosed
# scandir iterator that ended a whole run with a ResourceWarning (pytest 9.2, seen in CI).
basetemp=$(mktemp -d)
"$venv/bin/python" -W error::DeprecationWarning -m pytest -q -p no:cacheprovider \
  --basetemp "$basetemp/pytest" tests/unit || failed=1
rm -rf "$basetemp"

# The command as a user runs it: --version and --help print nothing on stderr; an error a person
# can fix is one line on stderr and exit status 1, with no warning before it.
export PYTHONWARNINGS=error::DeprecationWarning
smoke() {  # expected status, expected stderr lines, arguments...
  local status=$1 lines=$2
  shift 2
  local out err got
  out=$(mktemp) err=$(mktemp)
  got=0
  "$venv/bin/playguard" "$@" >"$out" 2>"$err" || got=$?
  if [[ $got -ne $status || $(wc -l <"$err") -ne $lines ]]; then
    echo "newest: playguard $* exited $got (want $status) with $(wc -l <"$err") lines on stderr" \
      "(want $lines):" >&2
    cat "$err" >&2
    failed=1
  else
    echo "newest: playguard $* ok"
  fi
  rm -f "$out" "$err"
}
smoke 0 0 --version
smoke 0 0 --help
smoke 1 1 status --config /nonexistent/playguard.toml
smoke 1 1 describe some-marquee --config /nonexistent/playguard.toml

if ((failed)); then
  echo "newest: failed at the newest allowed versions" >&2
  exit 1
fi
