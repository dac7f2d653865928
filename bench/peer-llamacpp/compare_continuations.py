"""kquant_exactness's comparison of one prompt's greedy continuations: Koi's (from a running
`koi serve`, with the log-probability of each token) and llama.cpp's (llamacpp_greedy.mjs's JSON
on stdin). Prints one line: identical or where they part, Koi's top two tokens there and their
gap, and the largest |log p(Koi) - log p(llama.cpp)| of the chosen tokens over the common
prefix (how far the two engines' numbers are apart while they agree). Exit status 1 if they
differ. Usage: compare_continuations.py PORT MODEL_ID PROMPT N < llama.json"""
import json
import sys
import urllib.request

port, model, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def complete(text, max_tokens, logprobs):
    body = {"model": model, "prompt": text, "max_tokens": max_tokens, "temperature": 0, "logprobs": logprobs}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode())
    return json.load(urllib.request.urlopen(request))["choices"][0]["logprobs"]


llama = json.load(sys.stdin)
koi = complete(prompt, n, 1)
koi_pieces, koi_logprobs = koi["tokens"], koi["token_logprobs"]
common = 0
while common < min(len(koi_pieces), len(llama["pieces"])) and koi_pieces[common] == llama["pieces"][common]:
    common += 1
delta = max((abs(a - b) for a, b in zip(koi_logprobs[:common], llama["logprobs"][:common])), default=0.0)
if common == n:
    print(f"identical, {n} tokens; max |delta log p| {delta:.5f}")
    sys.exit(0)
top = complete(prompt + "".join(koi_pieces[:common]), 1, 2)["top_logprobs"][0]
(a, la), (b, lb) = sorted(top.items(), key=lambda kv: -kv[1])[:2]
print(f"part at token {common} (Koi {koi_pieces[common]!r}, llama.cpp {llama['pieces'][common]!r}); "
      f"Koi's top two there {a!r} {la:.4f}, {b!r} {lb:.4f}: gap {la - lb:.4f}; "
      f"max |delta log p| before {delta:.5f}")
sys.exit(1)
