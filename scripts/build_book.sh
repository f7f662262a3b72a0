#!/usr/bin/env bash
# Build the book into _build/html from the committed executed notebooks (no experiment is re-run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
.venv/bin/jupyter-book build . --warningiserror --keep-going --path-output . "$@"
echo "book: $(pwd)/_build/html/index.html"
