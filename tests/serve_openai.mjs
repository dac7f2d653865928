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
assert.deepEqual(r.usage, { prompt_tokens: 5, completion_tokens: 20, total_tokens: 25, prompt_tokens_details: { cached_tokens: 0 } });

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

// Tool calls: tool_choice "required" and a named function force a well-formed call, whole
// and streamed as OpenAI streams them (id, type and name first, then argument pieces).
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 },
      days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city'] } } },
  { type: 'function', function: { name: 'add', parameters: { type: 'object',
    properties: { a: { type: 'integer', minimum: -99, maximum: 99 }, b: { type: 'integer', minimum: -99, maximum: 99 } },
    required: ['a', 'b'] } } },
];
const checkArgs = (name, args) => {
  const a = JSON.parse(args);
  if (name === 'get_weather') {
    assert.ok(typeof a.city === 'string' && [...a.city].length <= 10, args);
    if ('days' in a) assert.ok(Number.isInteger(a.days) && a.days >= 1 && a.days <= 7, args);
  } else {
    assert.equal(name, 'add');
    assert.ok(Number.isInteger(a.a) && Number.isInteger(a.b) && Math.abs(a.a) <= 99 && Math.abs(a.b) <= 99, args);
  }
};
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
for (const tool_choice of ['required', { type: 'function', function: { name: 'add' } }]) {
  const whole = await client.chat.completions.create({ model: 'stories', messages: ask, tools, tool_choice,
    max_tokens: 100, temperature: 1, seed: 11, n: 3 });
  for (const c of whole.choices) {
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_/);
    if (typeof tool_choice === 'object') assert.equal(call.function.name, 'add');
    checkArgs(call.function.name, call.function.arguments);
  }
  const calls = [];
  let finishReason = null, argChunks = 0;
  const stamps = [];
  for await (const chunk of await client.chat.completions.create({ model: 'stories', messages: ask, tools, tool_choice,
    max_tokens: 100, temperature: 1, seed: 12, stream: true })) {
    for (const ch of chunk.choices) {
      finishReason = ch.finish_reason ?? finishReason;
      for (const d of ch.delta.tool_calls ?? []) {
        if (d.id) {
          assert.equal(d.type, 'function');
          assert.equal(d.function.arguments, '');
          calls[d.index] = { id: d.id, name: d.function.name, arguments: '' };
        } else {
          calls[d.index].arguments += d.function.arguments;
          argChunks++;
          stamps.push(performance.now());
        }
      }
    }
  }
  assert.equal(finishReason, 'tool_calls');
  assert.equal(calls.length, 1);
  checkArgs(calls[0].name, calls[0].arguments);
  assert.ok(argChunks >= 3, `${argChunks} argument chunks`);
}
// A conversation with the tool's result goes back through the template; tool_choice none
// leaves the answer as text.
const followUp = await client.chat.completions.create({ model: 'stories', tools, tool_choice: 'none', max_tokens: 10,
  temperature: 0, messages: [...ask,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '22 C and sunny' }] });
assert.equal(typeof followUp.choices[0].message.content, 'string');
assert.equal(followUp.choices[0].message.tool_calls, undefined);
await assert.rejects(client.chat.completions.create({ model: 'stories', messages: ask, tools,
  tool_choice: { type: 'function', function: { name: 'nope' } } }), (e) => e.status === 400 && e.param === 'tool_choice');

// Errors surface as the client's typed errors with the status.
await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x' }), (e) => e.status === 404);
await assert.rejects(client.chat.completions.create({ model: 'stories', messages: [] }), (e) => e.status === 400);
const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), ['stories']);
console.log('openai client checks passed');
