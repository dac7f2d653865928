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
# llama.rope.dimension_count (a uint32, type 4) set to 999.
key = b'llama.rope.dimension_count'
at = d.index(len(key).to_bytes(8, 'little') + key) + 8 + len(key)
assert int.from_bytes(d[at:at + 4], 'little') == 4
b = bytearray(d); b[at + 4:at + 8] = (999).to_bytes(4, 'little'); open('ropedim.gguf', 'wb').write(b)
PY
mk() { rm -rf "$1"; cp -r tiny/llama_gqa "$1"; }
mk hf_notok; rm hf_notok/tokenizer.json
mk hf_badcfg; echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64,' > hf_badcfg/config.json
mk hf_arch; sed -i 's/LlamaForCausalLM/GPTNeoXForCausalLM/' hf_arch/config.json
mk hf_mismatch; sed -i 's/"hidden_size": 64/"hidden_size": 128/' hf_mismatch/config.json
mk hf_truncst; head -c 20000 tiny/llama_gqa/model.safetensors > hf_truncst/model.safetensors
mk hf_badtok; echo '{"model": {"type": "WordPiece"}}' > hf_badtok/tokenizer.json
mk hf_noweights; rm hf_noweights/model.safetensors
mk hf_nfkc; sed -i 's/"normalizer": null/"normalizer": {"type": "NFKC"}/' hf_nfkc/tokenizer.json
mk hf_bigdim; sed -i 's/"hidden_size": 64/"hidden_size": 1099511627776/' hf_bigdim/config.json
mk hf_ropefactor; /usr/bin/python3 - <<'PY'
import json
c = json.load(open('hf_ropefactor/config.json'))
c['rope_scaling'] = {'rope_type': 'llama3', 'factor': -1}
json.dump(c, open('hf_ropefactor/config.json', 'w'))
PY
echo "hello" > notamodel.txt
cat > gw.yaml <<'YAML'
models: [{name: m, versions: [{name: v1, replicas: ["http://127.0.0.1:9"]}]}]
tenants:
  - {name: a, rpm: 5}
  - {name: b, rpmm: 5}
YAML
sed 's/rpmm/rpm/' gw.yaml > gw_ok.yaml
# A server with two models, for `koi bench serve` without --model.
/usr/bin/python3 - > two_models.port <<'PY' &
import http.server, json, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "a"}, {"id": "b"}]}).encode()
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = socketserver.TCPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
two_models_pid=$!
trap 'kill $two_models_pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do [[ -s two_models.port ]] && break; sleep 0.1; done
two_models_url="http://127.0.0.1:$(cat two_models.port)"

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
expect "error: --type must be one of auto, f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q4_k, q5_k, q6_k; got 'q3'" convert good.gguf --type q3 -o x.gguf
expect "error: --type must be one of auto, f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q4_k, q5_k, q6_k; got 'q3_k'" convert good.gguf --type q3_k -o x.gguf
expect "error: --llama2c needs --tokenizer FILE" convert --llama2c "$m/stories260K.bin" -o x.gguf
expect "error: trunc.gguf: file ends at byte 5000" convert trunc.gguf -o x.gguf
expect "error: the prompt is" generate -m good.gguf -p "$(head -c 4000 "$shared/data/tinyshakespeare.txt")"
expect "error: -n must be zero or more" generate -m good.gguf -n -5
expect "error: --port must be 0-65535 (0 picks a free one); got 70000" serve -m good.gguf --port 70000
expect "error: --port must be 0-65535 (0 picks a free one); got -1" serve -m good.gguf --port -1
expect "error: --kv-port applies to --role prefill only" serve -m good.gguf --kv-port 9000
expect "error: --kv-transfer-timeout applies to --role decode only" serve -m good.gguf --role prefill --kv-transfer-timeout 5
expect "error: --kv-port must be 0-65535 (0 picks a free one); got 70000" serve -m good.gguf --role prefill --kv-port 70000
expect "error: --port must be 0-65535 (0 picks a free one); got 70000" gateway --config gw_ok.yaml --port 70000
expect "error: --admin-port must be 0-65535 (0 picks a free one); got -1" gateway --config gw_ok.yaml --admin-port -1
expect "error: gw.yaml: tenants[1].rpmm: unknown key; did you mean rpm?" gateway --config gw.yaml
expect "error: ropedim.gguf: llama.rope.dimension_count must be even, positive and at most the head dimension (8), got 999" \
  generate -m ropedim.gguf
expect "error: hf_bigdim/config.json: hidden_size must be an integer from 1 to 16777216, got 1099511627776" generate -m hf_bigdim
expect "error: hf_ropefactor/config.json: rope_scaling.factor must be a positive number, got -1" generate -m hf_ropefactor
expect "error: $two_models_url serves 2 models (a, b); pick one with --model" bench serve --url "$two_models_url" --num-prompts 1
expect "error: data.text: fortunes.txt: cannot open: No such file or directory; a relative path in a recipe is resolved from the current directory ($work)" \
  train --config "$src/recipes/fortunes.yaml"
# A tokenizer pipeline llama.cpp's GGUF keys cannot hold: Koi's keys carry it whole (the GGUF
# encodes as the folder does in Koi), and the warning names the component llama.cpp would miss.
"$koi" convert hf_nfkc -o nfkc.gguf > out.txt 2> err.txt ||
  { echo "FAIL: convert hf_nfkc"; cat err.txt; failures=$((failures + 1)); }
grep -qF "nfkc.gguf: Koi reads the whole tokenizer from the file (koi.tokenizer.json); llama.cpp reads only its tokenizer.ggml keys: the tokenizer's normalizer 'NFKC' (step 1)" err.txt ||
  { echo "FAIL: no warning naming NFKC"; cat err.txt; failures=$((failures + 1)); }
lig=$(printf 'ab \xef\xac\x81 \xe2\x91\xa0')  # the ligature "fi" and a circled 1, which NFKC rewrites
if [[ "$("$koi" tokenize --tokenizer nfkc.gguf --text "$lig" 2>&1)" != "$("$koi" tokenize --tokenizer hf_nfkc --text "$lig" 2>&1)" ]]; then
  echo "FAIL: nfkc.gguf encodes differently from hf_nfkc"; failures=$((failures + 1))
fi
# A usage report only reads the ledger: a mistyped --store is an error, not a new empty file.
expect "error: usage ledger typo.db: no such database file; check the path" gateway usage --store typo.db
[[ -e typo.db ]] && { echo "FAIL: koi gateway usage created typo.db"; failures=$((failures + 1)); }
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
expect "error: --lora must be NAME=DIR (the name requests give as \"model\", a PEFT adapter directory), got 'bad'" serve -m good.gguf --lora bad
expect "error: --lora: the name 'a' is given twice" serve -m good.gguf --lora a=/x --lora a=/y
expect "error: --lora a=/nonexistent: /nonexistent/adapter_config.json: cannot open" serve -m good.gguf --lora a=/nonexistent
expect "error: --max-loras must be between 1 and 4096, got 0" serve -m good.gguf --max-loras 0
expect "error: --adapters counts must be between 0 and the number of --lora adapters (0), got 2" bench offline -m good.gguf --adapters 0,2
expect "error: --prompt and --gen must be below the model's context of 512 tokens" bench model -m good.gguf -p 512
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
