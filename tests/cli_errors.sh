#!/usr/bin/env bash
# Must show 4 of the foundation: corrupt, truncated or mismatched GGUF / safetensors / config
# files, an unsupported architecture, a missing tokenizer, wrong flags (every engine flag out of
# its range, the retired --kv-cache-gb): each gives one clear
# line on stderr naming the file and what is wrong, exit status 1, never a crash (a signal
# would give 128+N), and nothing on stdout.
set -uo pipefail
koi="$1"; shared="$2"; src="$3"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
m="$shared/models/stories260K"
"$koi" convert --llama2c "$m/stories260K.bin" --tokenizer "$m/tok512.bin" -o good.gguf >/dev/null 2>&1 || exit 1
/usr/bin/python3 "$src/tests/reference/tiny_models.py" tiny >/dev/null || exit 1
/usr/bin/python3 - <<'PY'
d = bytearray(open('good.gguf', 'rb').read())
open('trunc.gguf', 'wb').write(d[:5000])
open('trunc_header.gguf', 'wb').write(d[:100])
b = bytearray(d); b[8:16] = (10**12).to_bytes(8, 'little'); open('badcount.gguf', 'wb').write(b)
b = bytearray(d); b[4:8] = (1).to_bytes(4, 'little'); open('v1.gguf', 'wb').write(b)
b = bytearray(d); b[0:4] = b'GGUX'; open('magic.gguf', 'wb').write(b)
PY
mk() { rm -rf "$1"; cp -r tiny/llama_gqa "$1"; }
mk hf_notok; rm hf_notok/tokenizer.json
mk hf_badcfg; echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64,' > hf_badcfg/config.json
mk hf_arch; sed -i 's/LlamaForCausalLM/GPTNeoXForCausalLM/' hf_arch/config.json
mk hf_mismatch; sed -i 's/"hidden_size": 64/"hidden_size": 128/' hf_mismatch/config.json
mk hf_truncst; head -c 20000 tiny/llama_gqa/model.safetensors > hf_truncst/model.safetensors
mk hf_badtok; echo '{"model": {"type": "WordPiece"}}' > hf_badtok/tokenizer.json
mk hf_noweights; rm hf_noweights/model.safetensors
echo "hello" > notamodel.txt

failures=0
# expect <substring of the one error line> <koi args...>
expect() {
  local want="$1"; shift
  timeout 60 "$koi" "$@" > out.txt 2> err.txt  # a serve that wrongly starts must not hang the test
  local rc=$?
  local lines; lines=$(wc -l < err.txt)
  if [[ $rc -ne 1 || $lines -ne 1 || -s out.txt ]] || ! grep -qF -- "$want" err.txt; then
    echo "FAIL: koi $* -> rc=$rc, stderr:"; cat err.txt; echo "  (wanted: $want)"
    failures=$((failures + 1))
  fi
}
expect "error: nonexist.gguf: no such file or directory" generate -m nonexist.gguf
expect "error: trunc.gguf: file ends at byte 5000 inside metadata key 'tokenizer.ggml.tokens'" generate -m trunc.gguf
expect "error: trunc_header.gguf: header claims 23 metadata entries and 47 tensors, more than the file's 100 bytes can hold" generate -m trunc_header.gguf
expect "error: badcount.gguf: header claims 23 metadata entries and 1000000000000 tensors" generate -m badcount.gguf
expect "error: v1.gguf: GGUF v1 is not supported; re-export with a current converter" generate -m v1.gguf
expect "error: magic.gguf: not a model file Koi recognises" generate -m magic.gguf
expect "error: hf_notok: tokenizer.json is missing" generate -m hf_notok
expect "error: hf_badcfg/config.json: not valid JSON" generate -m hf_badcfg
expect "error: hf_arch/config.json: architecture 'GPTNeoXForCausalLM' is not supported" generate -m hf_arch
expect "error: hf_mismatch: tensor token_embd has shape [64, 320] but the config implies [128, 320]" generate -m hf_mismatch
expect "error: hf_truncst/model.safetensors: tensor 'model.embed_tokens.weight' data_offsets [0, 81920] run past the end" generate -m hf_truncst
expect "error: hf_badtok/tokenizer.json: model type 'WordPiece' is not supported" generate -m hf_badtok
expect "hf_noweights" generate -m hf_noweights
expect "error: notamodel.txt: not a model file Koi recognises" generate -m notamodel.txt
expect "import it first: koi convert --llama2c" generate -m "$m/stories260K.bin"
expect "error: --type must be one of auto, f32, f16, bf16, q8_0, q4_0; got 'q3'" convert good.gguf --type q3 -o x.gguf
expect "error: --llama2c needs --tokenizer FILE" convert --llama2c "$m/stories260K.bin" -o x.gguf
expect "error: trunc.gguf: file ends at byte 5000" convert trunc.gguf -o x.gguf
expect "error: the prompt is" generate -m good.gguf -p "$(head -c 4000 "$shared/data/tinyshakespeare.txt")"
expect "error: -n must be zero or more" generate -m good.gguf -n -5
# Engine flags are range-checked with one line naming the flag (no KOI_CHECK abort, exit 134).
expect "error: --max-num-seqs must be at least 1, got 0" serve -m good.gguf --max-num-seqs 0
expect "error: --max-num-batched-tokens must be at least 1, got 0" serve -m good.gguf --max-num-batched-tokens 0
expect "error: --block-size must be between 1 and 1024, got 0" serve -m good.gguf --block-size 0
expect "error: --threads must be between 0 and 1024, got -1" serve -m good.gguf --threads -1
expect "error: --max-waiting must be at least 1, got 0" serve -m good.gguf --max-waiting 0
expect "error: --kv-cache-memory 'lots' is not a size" serve -m good.gguf --kv-cache-memory lots
expect "of RAM; give --kv-cache-memory a smaller size or lower --max-num-seqs" serve -m good.gguf --kv-cache-memory 100TiB
expect "error: --kv-cache-gb is gone; use --kv-cache-memory 2GiB" serve -m good.gguf --kv-cache-gb 2
expect "error: --speculative draft needs --draft-model PATH" serve -m good.gguf --speculative draft
expect "error: --speculative: unknown speculative method 'magic'" serve -m good.gguf --speculative magic
expect "error: --num-speculative-tokens must be between 1 and 64, got 0" serve -m good.gguf --speculative ngram --num-speculative-tokens 0
expect "error: --draft-model is used only with --speculative draft" serve -m good.gguf --draft-model good.gguf
expect "error: --max-num-batched-tokens must be at least 1, got 0" generate -m good.gguf --max-num-batched-tokens 0
expect "error: --max-num-batched-tokens must be at least 1, got 0" bench offline -m good.gguf --max-num-batched-tokens 0
expect "error: --prompt and --gen must be below the model's context of 512 tokens" bench model -m good.gguf -p 512
[[ -e x.gguf ]] && { echo "FAIL: a failed convert left x.gguf behind"; failures=$((failures + 1)); }
# A model directory given with a trailing slash is served under its name, not "".
"$koi" serve -m tiny/llama_gqa/ --port 0 > serve.out 2> serve.err &
server=$!
for _ in $(seq 100); do grep -q "listening on" serve.out 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' serve.out)
name=$(curl -sS "$url/v1/models" | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')
kill -TERM $server; wait $server
if [[ "$name" != llama_gqa ]]; then
  echo "FAIL: koi serve -m tiny/llama_gqa/ serves the model as '$name'"; cat serve.err; failures=$((failures + 1))
fi
if [[ $failures -ne 0 ]]; then echo "$failures failures"; exit 1; fi
echo "all error cases give one clear line and exit 1"
