#!/bin/bash
# Integration test: `koi tokenizer train` on tinyshakespeare. The tokenizer must compress the
# text (tokens per byte below a bound) and @lenml/tokenizers must encode a varied corpus
# with the tokenizer.json it wrote exactly as Koi does. The npm package goes to
# $KOI_NPM_CACHE (default $HOME/.cache/koi-npm), as in tokenizer_compat.sh.
# Usage: tokenizer_train.sh KOI SHARED_DIR
set -euo pipefail
KOI=$1
SHARED=$2
cache=${KOI_NPM_CACHE:-$HOME/.cache/koi-npm}
[ -f "$cache/node_modules/@lenml/tokenizers/package.json" ] ||
  npm i --prefix "$cache" --no-audit --no-fund @lenml/tokenizers
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
text="$SHARED/data/tinyshakespeare.txt"
head -c 1000000 "$text" > "$WORK/train.txt"
tail -c +1000001 "$text" > "$WORK/heldout.txt"

"$KOI" tokenizer train --input "$WORK/train.txt" --vocab-size 1024 --special "<|eot_id|>" -o "$WORK/tok"

# Held-out Shakespeare (one text per paragraph) and text the trainer never saw.
/usr/bin/python3 - "$WORK/heldout.txt" > "$WORK/corpus.json" <<'PY'
import json, sys
held = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
extra = [
    "", " ", "Hello world", "  leading and trailing  ", "tabs\tand\n\nnewlines\r\nCRLF\n",
    "numbers 1234567890 3.14159 -42 1e10", "I'm sure you'll see they've done it, didn't they? JOHN'S",
    "Unicode: café naïve Straße ĳ 中文测试 日本語 한국어 Ελληνικά русский עברית العربية",
    "Emoji 🙂😀🎉 👍🏽 👨‍👩‍👧‍👦 🇫🇷 and math ∑∫∂√∞ ≤ ≥ and box ▁ char",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
    "<|begin_of_text|>ROMEO: hi<|eot_id|><|end_of_text|> <|begin_of_text|",
    "mixed\u00a0nbsp and em—dash and ellipsis… “quotes”, ideographic\u3000space",
]
print(json.dumps(extra + held))
PY
out=$(node "$(dirname "$0")/tokenizer_train.js" "$KOI" "$cache" "$WORK/tok" "$WORK/corpus.json")
echo "$out"
echo "$out" | grep -q "checks passed" || exit 1
# Bytes alone are 1 token per byte; the 765 merges learned on Shakespeare bring the corpus
# (mostly held-out Shakespeare) to 0.42.
tpb=$(echo "$out" | sed -n 's/^tokens_per_byte //p')
awk -v t="$tpb" 'BEGIN { exit !(t > 0 && t < 0.45) }' || { echo "FAIL: $tpb tokens per byte"; exit 1; }

if "$KOI" tokenizer train --input "$WORK/train.txt" --vocab-size 100 -o "$WORK/bad" 2> "$WORK/err.txt"; then
  echo "FAIL: vocab size 100 accepted"; exit 1
fi
grep -q "vocab size 100 leaves no room for merges: the 256 byte tokens and 2 special tokens need 258" "$WORK/err.txt" ||
  { cat "$WORK/err.txt"; exit 1; }
echo "PASS: trained, $tpb tokens per byte, identical to @lenml/tokenizers"
