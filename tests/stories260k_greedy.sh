#!/usr/bin/env bash
# Must show 1 of the foundation: `koi convert` of the llama2.c stories260K checkpoint, then
# `koi generate` greedy from an empty prompt for 200 steps, prints exactly the output of the
# llama2.c reference program (`run stories260K.bin -z tok512.bin -t 0.0 -n 200`), which this
# test carries below and also checks against ../shared.
set -euo pipefail
koi="$1"; shared="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
m="$shared/models/stories260K"
"$koi" convert --llama2c "$m/stories260K.bin" --tokenizer "$m/tok512.bin" -o "$work/s.gguf" >/dev/null
"$koi" generate --model "$work/s.gguf" -n 200 --temperature 0 > "$work/out.txt" 2> "$work/err.txt"
cat > "$work/expected.txt" <<'TEXT'
Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.
Lily's mom said, "Lily, let's go to the park." Lily was sad and didn't know what to do. She said, "I want to play with your ball, but I can't find it."
Lily was sad and didn't know what to do. She said, "I'm sorry, Lily. I didn't know what to do."
Lily didn't want to help her mom, so she
TEXT
diff "$work/expected.txt" "$work/out.txt"
diff "$m/reference_greedy_200.txt" "$work/out.txt"
grep -q "generation: 199 tokens\|generation: 200 tokens" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
# The same through speculative decoding: prompt lookup, and the model as its own draft.
"$koi" generate --model "$work/s.gguf" -n 200 --temperature 0 --speculative ngram 2>/dev/null |
  diff "$m/reference_greedy_200.txt" -
"$koi" generate --model "$work/s.gguf" -n 200 --temperature 0 --speculative draft --draft-model "$work/s.gguf" \
  2>/dev/null | diff "$m/reference_greedy_200.txt" -
# The same at the quantized types must still run and produce text (not checked for equality:
# stories260K is too small for its greedy path to survive 8-bit weights unchanged).
for t in f16 q8_0; do
  "$koi" convert "$work/s.gguf" --type $t -o "$work/s.$t.gguf" >/dev/null
  "$koi" generate --model "$work/s.$t.gguf" -n 50 --temperature 0 | grep -q "Once upon a time"
done
echo "stories260K greedy output identical to llama2.c"
