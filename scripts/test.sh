#!/usr/bin/env bash
# Run the whole test suite: unit tests, every source notebook at profile=smoke through papermill on the
# CPU, the book build with warnings as errors, and every page of the built book in headless Chromium.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
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
