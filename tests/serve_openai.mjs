// `koi serve` driven by the official `openai` npm client (run by serve_test.sh; the package
// comes from $KOI_NPM_CACHE via NODE_PATH-free import by path). Covers completions and
// chat, non-streaming and streaming, n > 1, stop, seed and logprobs.
import assert from 'node:assert/strict';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(path.join(process.env.KOI_NPM_DIR, 'node_modules') + '/');
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.env.URL + '/v1', apiKey: 'secret', maxRetries: 0 });
const GREEDY = ', there was a little girl named Lily. She loved to play outsid';

// Completions, non-streaming, greedy: the llama2.c reference continuation.
let r = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 20, temperature: 0 });
assert.equal(r.choices[0].text, GREEDY);
assert.deepEqual(r.usage, { prompt_tokens: 5, completion_tokens: 20, total_tokens: 25 });

// Completions, streaming with usage.
let text = '', usage = null, chunks = 0;
for await (const c of await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 20,
  temperature: 0, stream: true, stream_options: { include_usage: true } })) {
  chunks++;
  if (c.usage) usage = c.usage;
  for (const ch of c.choices) text += ch.text;
}
assert.equal(text, GREEDY);
assert.equal(usage.completion_tokens, 20);
assert.ok(chunks >= 10, `${chunks} chunks`);

// Stop strings end the text before the stop.
r = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop: ['girl'] });
assert.equal(r.choices[0].text, ', there was a little ');
assert.equal(r.choices[0].finish_reason, 'stop');

// n > 1 with a seed: n different choices, and the same ones again for the same seed.
const seeded = { model: 'stories', prompt: 'Once upon a time', max_tokens: 12, temperature: 1, n: 3, seed: 1234 };
const a = await client.completions.create(seeded);
const b = await client.completions.create(seeded);
assert.equal(a.choices.length, 3);
assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
assert.ok(new Set(a.choices.map((c) => c.text)).size > 1, 'n choices differ');
assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);

// Logprobs on completions: tokens and top_logprobs, the greedy token on top.
r = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 4, temperature: 0, logprobs: 3 });
const lp = r.choices[0].logprobs;
assert.deepEqual(lp.tokens, [',', ' there', ' was', ' a']);
for (let i = 0; i < 4; i++) {
  const top = Object.entries(lp.top_logprobs[i]).sort((x, y) => y[1] - x[1]);
  assert.equal(top[0][0], lp.tokens[i]);
  assert.ok(lp.token_logprobs[i] <= 0);
}

// Chat, non-streaming, with logprobs and n = 2.
const chat = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Tell me a story.' }], max_completion_tokens: 10, n: 2, seed: 5, logprobs: true, top_logprobs: 2 });
assert.equal(chat.object, 'chat.completion');
assert.equal(chat.choices.length, 2);
for (const c of chat.choices) {
  assert.equal(c.message.role, 'assistant');
  assert.equal(c.logprobs.content.length, 10);
  assert.equal(c.logprobs.content[0].top_logprobs.length, 2);
}
assert.equal(chat.usage.completion_tokens, 20);

// Chat, streaming: role first, content deltas, finish reason, usage.
let content = '', role = null, finish = null, chatUsage = null;
for await (const c of await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Hi' }],
  max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true } })) {
  if (c.usage) chatUsage = c.usage;
  for (const ch of c.choices) {
    role ??= ch.delta.role;
    content += ch.delta.content ?? '';
    finish = ch.finish_reason ?? finish;
  }
}
assert.equal(role, 'assistant');
assert.equal(finish, 'length');
assert.equal(chatUsage.completion_tokens, 8);
const nonStream = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Hi' }],
  max_tokens: 8, temperature: 0 });
assert.equal(content, nonStream.choices[0].message.content);

// Structured output through the client's own structured-output call: parse() sends the
// json_schema response_format and JSON-parses the message into `parsed`.
const person = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 1, maximum: 99 },
    pets: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 2 } },
  required: ['name', 'age'], additionalProperties: false,
};
const checkPerson = (p) => {
  assert.equal(typeof p.name, 'string');
  assert.ok([...p.name].length <= 12, p.name);
  assert.ok(Number.isInteger(p.age) && p.age >= 1 && p.age <= 99, String(p.age));
  assert.ok(Object.keys(p).every((k) => ['name', 'age', 'pets'].includes(k)));
  if (p.pets) assert.ok(p.pets.length <= 2 && p.pets.every((x) => x === 'cat' || x === 'dog'));
};
const format = { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } };
const parsed = await client.chat.completions.parse({ model: 'stories', messages: [{ role: 'user', content: 'Who?' }],
  max_tokens: 80, temperature: 1, seed: 5, n: 4, response_format: format });
assert.equal(parsed.choices.length, 4);
for (const c of parsed.choices) {
  checkPerson(c.message.parsed);
  assert.equal(c.finish_reason, 'stop');
}
let streamed = '';
for await (const c of await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Who?' }],
  max_tokens: 80, temperature: 1, seed: 6, stream: true, response_format: format })) {
  for (const ch of c.choices) streamed += ch.delta.content ?? '';
}
checkPerson(JSON.parse(streamed));
await assert.rejects(client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'x' }],
  response_format: { type: 'json_schema', json_schema: { name: 'bad', schema: { type: 'string', pattern: '(a' } } } }),
(e) => e.status === 400 && e.param === 'response_format.json_schema.schema');

// Errors surface as the client's typed errors with the status.
await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x' }), (e) => e.status === 404);
await assert.rejects(client.chat.completions.create({ model: 'stories', messages: [] }), (e) => e.status === 400);
const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), ['stories']);
console.log('openai client checks passed');
