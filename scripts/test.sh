#!/usr/bin/env bash
# Run the whole test suite: ruff, unit tests, every source notebook at profile=smoke through papermill on the
# CPU, the book build with warnings as errors, and every page of the built book in headless Chromium.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
# Lint first and fail fast: ruff's settings are in pyproject.toml ([tool.ruff]).
.venv/bin/ruff check .
# tests/test_browser.py needs Debian's chromium; it skips, saying so, where there is none.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing chromium for tests/test_browser.py"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "chromium could not be installed: tests/test_browser.py will skip"
  else
    echo "chromium not found: install Debian's chromium package (sudo apt-get install chromium), or tests/test_browser.py skips"
  fi
fi
.venv/bin/python -m pytest "$@"
# The reproducibility contract (flkit/numerics.py): results computed with other vector kernels must still pass
# the golden and regeneration tests, so they run once more under a second kernel path (ATen's scalar kernels,
# MKL's SSE2-compatible branch), which differs from every x86-64 machine's own. FLKIT_SECOND_PATH=0 skips it.
if [ "${FLKIT_SECOND_PATH:-1}" != 0 ]; then
  second=$(.venv/bin/python -c 'from flkit.numerics import SECOND_PATH as s; print(" ".join(f"{k}={v}" for k, v in s.items()))')
  echo "second kernel path: $second"
  env $second .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_golden.py tests/test_regenerate.py \
    tests/test_numerics.py
fi
