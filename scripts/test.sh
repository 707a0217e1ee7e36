#!/usr/bin/env bash
# Set up everything the tests need (scripts/setup.sh --dev), then run every test.
# Extra arguments go to pytest, e.g. scripts/test.sh -k browser
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
exec .venv/bin/python -m pytest -q tests "$@"
