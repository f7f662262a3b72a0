#!/usr/bin/env bash
# Run the whole test suite: unit tests, every source notebook at profile=smoke through papermill on the
# CPU, and the book build with warnings as errors.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
.venv/bin/python -m pytest "$@"
