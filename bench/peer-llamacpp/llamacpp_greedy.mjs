// llama.cpp's greedy continuation of a token-id prompt, through node-llama-cpp's prebuilt CPU
// libraries, for kquant_exactness. Usage: node llamacpp_greedy.mjs MODEL.gguf N ID,ID,...
// -> one JSON line {"pieces": [text of each generated token], "logprobs": [log p of each]}
// Env: KOI_PEER_KV=f32 runs llama.cpp with an f32 KV cache and without flash attention (the
// arithmetic of Koi's default f32 cache: no f16 rounding of K, V, Q or the probabilities);
// unset, llama.cpp's defaults (f16 cache, flash attention "auto").
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [modelPath, n, prompt] = [process.argv[2], Number(process.argv[3]), process.argv[4].split(",").map(Number)];
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const f32Kv = process.env.KOI_PEER_KV === "f32";
const context = await model.createContext({
  contextSize: prompt.length + n + 16, threads: 2, sequences: 1,
  ...(f32Kv ? { experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", flashAttention: false } : {}),
});
const sequence = context.getSequence();
const pieces = [], logprobs = [];
for await (const out of sequence.evaluateWithMetadata(prompt, { confidence: true }, { temperature: 0 })) {
  pieces.push(model.detokenize([out.token]));
  logprobs.push(Math.log(out.confidence));
  if (pieces.length >= n) break;
}
console.log(JSON.stringify({ pieces, logprobs }));
await context.dispose();
await model.dispose();
