#!/usr/bin/env bash
# Install Tessera with its test dependencies and run the test suite, with coverage of every
# package (tessera, tessera.transpile, tessera.runtime; see [tool.coverage] in pyproject.toml), measured on
# the first examples of each Hypothesis test and on a sample of the cases of the long loops that ask for it
# (tests/conftest.py: the tracer made them 2-3x slower; every case still runs). The longest tests run first.
# Tests run in parallel on every core (pytest-xdist, `-n auto`; `--dist worksteal`: a worker that runs out
# of tests takes queued ones from the others, so that they finish together); pass `-n 0` to run them in
# one process.
# pytest's exit 5 ("no tests ran") is turned into a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[test]" || exit 1
python -m pytest -q -n auto --dist worksteal --cov "$@"
code=$?
if [ "$code" -eq 5 ]; then
    echo "error: no tests ran" >&2
    exit 1
fi
exit "$code"
