// Constant load through `koi gateway` from the official openai npm client, for the
// deployment tests (tests/cluster_deploy_*.py): WORKERS loops of completions (every other one
// streamed), no client retries, until the file STOP exists. Prints one JSON line at the end:
// {ok, failed, failures: [first few messages]}.
//   node cluster_deploy_load.mjs URL KEY MODEL WORKERS STOP [MAX_TOKENS (default 24)]
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(path.join(process.env.KOI_NPM_DIR, 'node_modules') + '/');
const OpenAI = require('openai');
const [url, key, model, workers, stop, maxTokens = '24'] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url + '/v1', apiKey: key, maxRetries: 0, timeout: 30000 });
let ok = 0, failed = 0;
const failures = [];

async function one(i) {
  const body = { model, prompt: 'Once upon a time', max_tokens: Number(maxTokens), temperature: 0 };
  if (i % 2 === 0) {
    const r = await client.completions.create(body);
    if (!r.choices[0].text) throw new Error('empty completion');
    return;
  }
  let text = '';
  for await (const c of await client.completions.create({ ...body, stream: true })) {
    for (const ch of c.choices) text += ch.text;
  }
  if (!text) throw new Error('empty stream');
}

async function worker() {
  for (let i = 0; !fs.existsSync(stop); ++i) {
    try {
      await one(i);
      ++ok;
    } catch (e) {
      ++failed;
      if (failures.length < 5) failures.push(String(e.status || '') + ' ' + e.message);
    }
  }
}

await Promise.all(Array.from({ length: Number(workers) }, worker));
console.log(JSON.stringify({ ok, failed, failures }));
