#!/bin/bash
# Pre-training with an existing tokenizer (data.tokenizer: PATH) and token shards on disk.
# tinyshakespeare (1.1 MB, two tokenization chunks) with stories260K's llama2.c tokenizer:
# the model's vocabulary is the tokenizer's, the shard holds exactly what `koi tokenize`
# gives for the whole text, a resumed run reuses the shard, and a truncated shard fails the
# run with a message naming the file.
# Usage: train_data.sh KOI SHARED_DIR
set -euo pipefail
KOI=$1
SHARED=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
TEXT=$SHARED/data/tinyshakespeare.txt
TOK=$SHARED/models/stories260K/tok512.bin
cat > "$WORK/r.yaml" <<YAML
model: {dim: 32, layers: 1, heads: 2, ffn_dim: 64, context: 32}
data: {text: $TEXT, tokenizer: $TOK}
train: {batch_size: 4, steps: 3, log_interval: 0, eval_iters: 1, threads: 1, checkpoint_interval: 3, out: $WORK/run}
YAML

"$KOI" train --config "$WORK/r.yaml" > /dev/null 2> "$WORK/first.txt" || fail "$(cat "$WORK/first.txt")"
grep -q "^tokenizing: 100% of 1.1 MB" "$WORK/first.txt" || fail "no progress: $(cat "$WORK/first.txt")"
grep -q "^tokenized 1.1 MB into [0-9]* tokens: 1 shard of uint16 in $WORK/run/data" "$WORK/first.txt" ||
  fail "no shard: $(cat "$WORK/first.txt")"
grep -q "vocabulary 512;" "$WORK/first.txt" || fail "the vocabulary is not the tokenizer's"

/usr/bin/python3 -c "import json, sys; json.dump([open(sys.argv[1]).read()], open(sys.argv[2], 'w'))" \
  "$TEXT" "$WORK/batch.json"
"$KOI" tokenize --tokenizer "$TOK" --batch "$WORK/batch.json" > "$WORK/ids.json"
/usr/bin/python3 - "$WORK/ids.json" "$WORK/run/data/tokens-00000.bin" <<'PY'
import json, struct, sys
ids = json.load(open(sys.argv[1]))[0]["ids"]
shard = open(sys.argv[2], "rb").read()
magic, version, width, key, count = struct.unpack_from("<8sIIQQ", shard)
assert magic == b"KOITOK01" and version == 1 and width == 2, (magic, version, width)
tokens = list(struct.unpack_from("<%dH" % count, shard, 48))
assert tokens == ids, "the shard differs from one encode of the whole text"
print("shard: %d tokens, identical to koi tokenize" % count)
PY

"$KOI" train --config "$WORK/r.yaml" --steps 6 --resume > /dev/null 2> "$WORK/second.txt" ||
  fail "$(cat "$WORK/second.txt")"
if grep -q "^tokeniz" "$WORK/second.txt"; then fail "the resumed run tokenized the corpus again"; fi
[ -f "$WORK/run/ckpt-00000006/tokenizer.gguf" ] || fail "the checkpoint carries no tokenizer"

truncate -s 1000 "$WORK/run/data/tokens-00000.bin"
if "$KOI" train --config "$WORK/r.yaml" > /dev/null 2> "$WORK/third.txt"; then fail "trained on a damaged shard"; fi
grep -q "$WORK/run/data/tokens-00000.bin: truncated or damaged token shard: the header says [0-9]* tokens ([0-9]* bytes) but the file has 1000 bytes; delete it (or its directory) to tokenize the corpus again" \
  "$WORK/third.txt" || fail "$(cat "$WORK/third.txt")"
echo "PASS"
