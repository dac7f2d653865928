// 256 concurrent streaming clients against one `koi serve` (run by serve_test.sh): every
// stream completes with exactly max_tokens tokens (counted from per-token logprobs and
// from usage) and no errors, twice over, and the server's resident memory stays bounded.
import assert from 'node:assert/strict';
import fs from 'node:fs';

const CLIENTS = 256, MAX_TOKENS = 32;

function rssMiB(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return Number(m[1]) / 1024;
}

async function stream(i) {
  const res = await fetch(process.env.URL + '/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'stories', prompt: `Story ${i}: Once upon a time`, max_tokens: MAX_TOKENS,
      ignore_eos: true, seed: i, logprobs: 0, stream: true, stream_options: { include_usage: true } }),
  });
  assert.equal(res.status, 200, `client ${i}: status ${res.status}`);
  const text = await res.text();
  const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]', `client ${i}: no [DONE]`);
  let tokens = 0, usage = null, finish = null;
  for (const e of events.slice(0, -1)) {
    const chunk = JSON.parse(e);
    assert.ok(!chunk.error, `client ${i}: ${e}`);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      tokens += c.logprobs ? c.logprobs.tokens.length : 0;
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(tokens, MAX_TOKENS, `client ${i}: streamed tokens`);
  assert.equal(usage.completion_tokens, MAX_TOKENS, `client ${i}: usage`);
  assert.equal(finish, 'length', `client ${i}: finish_reason`);
}

const pid = Number(process.env.SERVER_PID);
await stream(-1);  // warm up
const before = rssMiB(pid);
const rounds = [];
for (let round = 0; round < 2; round++) {
  const t0 = Date.now();
  const results = await Promise.allSettled(Array.from({ length: CLIENTS }, (_, i) => stream(i)));
  const errors = results.filter((r) => r.status === 'rejected');
  for (const e of errors.slice(0, 5)) console.log(String(e.reason));
  assert.equal(errors.length, 0, `${errors.length} of ${CLIENTS} streams failed`);
  rounds.push({ seconds: (Date.now() - t0) / 1000, rss: rssMiB(pid) });
}
console.log(`rss before ${before.toFixed(1)} MiB; rounds ${JSON.stringify(rounds)}`);
// Bounded: the second round does not grow the server beyond the first by more than noise,
// and 256 streams cost well under 256 MiB in all.
assert.ok(rounds[1].rss - rounds[0].rss < 16, 'memory grew between identical rounds');
assert.ok(rounds[1].rss - before < 256, 'memory grew by more than 256 MiB');
const metrics = await (await fetch(process.env.URL + '/metrics')).text();
assert.match(metrics, /koi:request_success_total\{model_name="stories",finished_reason="length"\} 513\n/);
console.log('256-client checks passed');
