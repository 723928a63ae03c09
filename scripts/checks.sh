#!/usr/bin/env bash
# The checks that read the source without running the lab: ruff, mypy --strict (the package,
# bench/ and the docs hook), the import-linter contracts, the docs site's strict build (a broken
# link or anchor between pages fails it; tests/unit/test_doc_links.py checks the links to the
# repository's files), and scripts/newest.sh (the unit tests and a CLI smoke at the
# newest versions our ranges allow). Each runs whatever the one before it found; exits 1 if any
# failed. scripts/test.sh runs it beside pytest.
set -uo pipefail
cd "$(dirname "$0")/.."

failed=0
.venv/bin/ruff check . || failed=1
.venv/bin/ruff format --check . || failed=1
.venv/bin/mypy || failed=1
.venv/bin/mypy bench || failed=1  # scripts beside each other, not a package: checked on their own
.venv/bin/mypy scripts/docs_hooks.py || failed=1  # the MkDocs hook, loaded by path like bench/
.venv/bin/lint-imports || failed=1
# python -m: the hook reads the code of this checkout (the working directory leads sys.path).
# Not --quiet: it hides the warnings --strict counts, and the build would pass with them.
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --site-dir "$site" || failed=1
rm -rf "$site"
bash scripts/newest.sh || failed=1
exit "$failed"
