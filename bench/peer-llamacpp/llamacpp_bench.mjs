// llama.cpp's side of the peer benchmark, through node-llama-cpp's prebuilt CPU libraries:
// pp (one prompt of P tokens, evaluated without generating) and tg (G tokens generated one
// at a time from an empty context, greedy), in tokens/s, the llama-bench pair.
// Usage: node llamacpp_bench.mjs MODEL.gguf THREADS P G REPETITIONS VOCAB   -> one JSON line
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [modelPath, threads, P, G, reps, vocab] = [process.argv[2], ...process.argv.slice(3, 8).map(Number)];
const llama = await getLlama({ gpu: false, build: "never", logLevel: (process.env.KOI_LLAMA_LOG === "debug" ? LlamaLogLevel.debug : LlamaLogLevel.error) });
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const context = await model.createContext({ contextSize: Math.max(P, G) + 16, batchSize: P, threads, sequences: 1 });
const sequence = context.getSequence();
let seed = 1;
const token = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return 3 + (seed % (vocab - 3)); };

const pp = [], tg = [];
for (let rep = 0; rep <= reps; rep++) {  // the first repetition warms up and is dropped
  await sequence.clearHistory();
  const prompt = Array.from({ length: P }, token);
  let t0 = performance.now();
  await sequence.evaluateWithoutGeneratingNewTokens(prompt);
  const ppSecs = (performance.now() - t0) / 1000;

  await sequence.clearHistory();
  let n = 0;
  t0 = performance.now();
  for await (const _ of sequence.evaluate([token()], { temperature: 0 })) {
    if (++n >= G) break;
  }
  const tgSecs = (performance.now() - t0) / 1000;
  if (rep > 0) { pp.push(P / ppSecs); tg.push(G / tgSecs); }
}
const mean = (v) => v.reduce((a, b) => a + b, 0) / v.length;
console.log(JSON.stringify({ pp_tokens_per_s: mean(pp), tg_tokens_per_s: mean(tg), pp_runs: pp, tg_runs: tg }));
await context.dispose();
await model.dispose();
