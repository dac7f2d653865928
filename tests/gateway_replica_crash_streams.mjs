// Run by gateway_replica_crash_streams.py: 20 concurrent streaming completions through the
// gateway with the official `openai` npm client (from $KOI_NPM_DIR), 500 tokens each with
// ignore_eos. Once every stream has at least KILL_AFTER content chunks it prints "KILL" (the
// driver then kill -9s one replica) and reads on. Every stream must either end with [DONE]
// and a finish_reason or raise from the client's async iterator (APIError for the gateway's
// error event); none may end quietly looking complete. Prints one "RESULT <json>" line per
// stream for the driver to check against the ledger. The streams ask for continuous usage, so
// that the client sees what the replica reported in the last chunk it received: koi serve
// does not send exactly one chunk per token (a token with no text of its own, such as EOS
// under ignore_eos, rides with the next chunk), so chunks alone undercount.
import assert from 'node:assert/strict';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(path.join(process.env.KOI_NPM_DIR, 'node_modules') + '/');
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.env.URL + '/v1', apiKey: process.env.KEY, maxRetries: 0, timeout: 60000 });
const N = 20, KILL_AFTER = 10, MAX_TOKENS = 500;

let killed = false;
const progress = new Array(N).fill(0);
function maybe_kill() {
  if (!killed && progress.every((c) => c >= KILL_AFTER)) {
    killed = true;
    console.log('KILL');
  }
}

async function one(i) {
  const rid = `crash-${i}-${process.pid}`;
  const stream_options = { include_usage: true, continuous_usage_stats: true };
  const r = { rid, chunks: 0, finish_reason: null, usage: null, last_usage: null, error: null, after_kill: 0 };
  try {
    const stream = await client.completions.create(
      { model: 'stories', prompt: 'Once upon a time', max_tokens: MAX_TOKENS, temperature: 0, stream: true, stream_options,
        ignore_eos: true },
      { headers: { 'x-request-id': rid } });
    for await (const c of stream) {
      if (c.choices.length) {
        r.chunks++;
        if (killed) r.after_kill++;
        if (c.choices[0].finish_reason) r.finish_reason = c.choices[0].finish_reason;
        if (c.usage) r.last_usage = c.usage;
        progress[i] = r.chunks;
        maybe_kill();
      } else if (c.usage) {
        r.usage = c.usage;
      }
    }
  } catch (e) {
    r.error = { name: e.constructor.name, is_api_error: e instanceof OpenAI.APIError, message: String(e.message) };
  }
  progress[i] = Infinity;  // a stream that ended does not hold the kill back
  maybe_kill();
  return r;
}

const results = await Promise.all(Array.from({ length: N }, (_, i) => one(i)));
assert.ok(killed, 'the replica was killed while the streams ran');
for (const r of results) {
  console.log('RESULT ' + JSON.stringify(r));
  // Complete, or raised: never a quiet end without a finish_reason.
  if (!r.error) {
    assert.equal(r.finish_reason, 'length', `${r.rid} ended without an exception and without finish_reason`);
    assert.equal(r.usage?.completion_tokens, MAX_TOKENS, `${r.rid}: final usage ${JSON.stringify(r.usage)}`);
    assert.equal(r.last_usage?.completion_tokens, MAX_TOKENS, `${r.rid}: last chunk's usage ${JSON.stringify(r.last_usage)}`);
    assert.ok(r.chunks <= MAX_TOKENS && r.chunks >= MAX_TOKENS - 20, `${r.rid}: ${r.chunks} chunks for ${MAX_TOKENS} tokens`);
  } else {
    assert.equal(r.finish_reason, null, `${r.rid} raised after its finish_reason: ${r.error.message}`);
    assert.ok(r.error.is_api_error, `${r.rid}: the gateway's error event raises an APIError (${r.error.name}: ${r.error.message})`);
    assert.match(r.error.message, /broke off the stream/);
    assert.ok(r.chunks > 0 && r.last_usage && r.chunks <= r.last_usage.completion_tokens,
      `${r.rid}: ${r.chunks} chunks, the last reporting ${JSON.stringify(r.last_usage)}`);
  }
}
const cut = results.filter((r) => r.error).length;
assert.ok(cut > 0 && cut < N, `some streams were cut (${cut}) and some completed (${N - cut})`);
console.log(`${N - cut} streams completed, ${cut} raised an APIError`);
