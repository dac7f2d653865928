#!/bin/bash
# Runs a `koi serve` test whose body needs npm packages: installs the pinned ones into
# $KOI_NPM_CACHE (default $HOME/.cache/koi-npm, outside the tree) when missing, then hands
# over to serve_test.sh with KOI_NPM_DIR set.
#   tests/serve_npm.sh <koi> <shared dir> <body.mjs> [koi serve flags...]
set -euo pipefail
export KOI_NPM_DIR=${KOI_NPM_CACHE:-$HOME/.cache/koi-npm}
pin=openai@7.59.0
if ! grep -q '"version": "7.59.0"' "$KOI_NPM_DIR/node_modules/openai/package.json" 2>/dev/null; then
  mkdir -p "$KOI_NPM_DIR"
  npm i --prefix "$KOI_NPM_DIR" --no-audit --no-fund "$pin" >/dev/null
fi
exec bash "$(dirname "$0")/serve_test.sh" "$@"
