#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv and the local dataset cache.
# Sourced by build_book.sh and test.sh; safe to run again (does nothing when up to date).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
stamp=.venv/.flkit-stamp
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setting up .venv (first run installs torch: several minutes)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[book,test,cluster]"
  echo "$want" > "$stamp"
fi
# Real MNIST / Fashion-MNIST from the machine's shared folder, when there is one (see data/README.md).
shared=${FLKIT_SHARED_DATA:-../shared/data}
if [ -d "$shared/mnist" ]; then
  .venv/bin/python -m flkit.datasets import "$shared" >/dev/null
fi
