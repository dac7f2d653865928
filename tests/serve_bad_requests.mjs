// Table-driven test of bad requests against `koi serve` (run by serve_test.sh with
// --api-key secret --max-body-bytes 65536 --io-timeout 1 --max-waiting 4): each case gets
// the documented status and an OpenAI-shaped error, and the server keeps serving after it.
// Requests go over raw sockets so that invalid UTF-8, broken HTTP and slow clients can be sent.
import net from 'node:net';
import assert from 'node:assert/strict';

const url = new URL(process.env.URL);
const KEY = 'Bearer secret';

function rawRequest(bytes, { holdOpenMs = 0 } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(url.port), url.hostname);
    const chunks = [];
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', reject);
    sock.on('close', () => resolve(parseResponse(Buffer.concat(chunks))));
    sock.write(bytes);
    if (!holdOpenMs) return;
    setTimeout(() => sock.destroy(), holdOpenMs);  // a slow client never finishes its request
  });
}

function parseResponse(buf) {
  const text = buf.toString('utf8');
  const headEnd = text.indexOf('\r\n\r\n');
  const head = text.slice(0, headEnd).split('\r\n');
  const status = Number(head[0].split(' ')[1]);
  const headers = {};
  for (const line of head.slice(1)) {
    const i = line.indexOf(':');
    headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status, headers, body: text.slice(headEnd + 4) };
}

function http(method, path, body, { auth = KEY, extra = '' } = {}) {
  const payload = Buffer.isBuffer(body) ? body : Buffer.from(body ?? '');
  const head = `${method} ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n` +
    (auth ? `Authorization: ${auth}\r\n` : '') + extra + `Content-Length: ${payload.length}\r\n\r\n`;
  return rawRequest(Buffer.concat([Buffer.from(head), payload]));
}

const C = '/v1/completions', CHAT = '/v1/chat/completions';
const ok = (extra) => JSON.stringify({ model: 'stories', prompt: 'Once upon a time', ...extra });
const chat = (extra) => JSON.stringify({ model: 'stories', messages: [{ role: 'user', content: 'hi' }], ...extra });
const longPrompt = 'the dog ran to the park and '.repeat(120);

// [name, request thunk, status, error type, message substring, param]
const cases = [
  ['malformed JSON', () => http('POST', C, '{"model":'), 400, 'invalid_request_error', 'the request body is not valid JSON', null],
  ['empty body', () => http('POST', C, ''), 400, 'invalid_request_error', 'not valid JSON', null],
  ['body is an array', () => http('POST', C, '[]'), 400, 'invalid_request_error', 'must be a JSON object, got an array', null],
  ['body is a string', () => http('POST', C, '"x"'), 400, 'invalid_request_error', 'must be a JSON object, got a string', null],
  ['invalid UTF-8', () => http('POST', C, Buffer.concat([Buffer.from('{"model":"stories","prompt":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')])),
    400, 'invalid_request_error', 'not valid JSON', null],
  ['model missing', () => http('POST', C, '{"prompt":"x"}'), 400, 'invalid_request_error', "'model' is required", 'model'],
  ['model is a number', () => http('POST', C, '{"model":3,"prompt":"x"}'), 400, 'invalid_request_error', "'model' must be a string, got an integer", 'model'],
  ['unknown model', () => http('POST', C, '{"model":"gpt-9","prompt":"x"}'), 404, 'invalid_request_error', 'The model `gpt-9` does not exist.', 'model'],
  ['prompt missing', () => http('POST', C, '{"model":"stories"}'), 400, 'invalid_request_error', "'prompt' is required", 'prompt'],
  ['prompt is a number', () => http('POST', C, '{"model":"stories","prompt":5}'), 400, 'invalid_request_error', "'prompt' must be a string", 'prompt'],
  ['prompt is an empty array', () => http('POST', C, '{"model":"stories","prompt":[]}'), 400, 'invalid_request_error', "'prompt' must be a string", 'prompt'],
  ['prompt of booleans', () => http('POST', C, '{"model":"stories","prompt":[true]}'), 400, 'invalid_request_error', "'prompt' must be a string", 'prompt'],
  ['prompt token outside the vocabulary', () => http('POST', C, '{"model":"stories","prompt":[1,99999]}'), 400, 'invalid_request_error', 'prompt[1] must be a token id in [0, 512), got 99999', 'prompt'],
  ['negative prompt token', () => http('POST', C, '{"model":"stories","prompt":[[1,2,3,-5]]}'), 400, 'invalid_request_error', 'prompt[0][3] must be a token id in [0, 512), got -5', 'prompt'],
  ['priority not an integer', () => http('POST', C, ok({ priority: 1.5 })), 400, 'invalid_request_error', "'priority' must be an integer, got a number", 'priority'],
  ['prompt longer than the context', () => http('POST', C, ok({ prompt: longPrompt })), 400, 'invalid_request_error', "This model's maximum context length is 512 tokens", 'prompt'],
  ['max_tokens is a string', () => http('POST', C, ok({ max_tokens: '5' })), 400, 'invalid_request_error', "'max_tokens' must be an integer, got a string", 'max_tokens'],
  ['max_tokens negative', () => http('POST', C, ok({ max_tokens: -1 })), 400, 'invalid_request_error', "'max_tokens' must be an integer between 1 and 2147483647, got -1", 'max_tokens'],
  ['max_tokens zero', () => http('POST', C, ok({ max_tokens: 0 })), 400, 'invalid_request_error', "'max_tokens' must be an integer between 1", 'max_tokens'],
  ['max_tokens huge', () => http('POST', C, ok({ max_tokens: 1e12 })), 400, 'invalid_request_error', "'max_tokens' must be an integer", 'max_tokens'],
  ['max_tokens past the context', () => http('POST', C, ok({ max_tokens: 100000 })), 400, 'invalid_request_error', 'However, you requested 100005 tokens (5 in the prompt, 100000 in the completion)', 'prompt'],
  ['temperature negative', () => http('POST', C, ok({ temperature: -1 })), 400, 'invalid_request_error', "'temperature' must be between 0 and 2, got -1", 'temperature'],
  ['temperature too high', () => http('POST', C, ok({ temperature: 3 })), 400, 'invalid_request_error', "'temperature' must be between 0 and 2, got 3", 'temperature'],
  ['temperature is a string', () => http('POST', C, ok({ temperature: 'hot' })), 400, 'invalid_request_error', "'temperature' must be a number, got a string", 'temperature'],
  ['top_p zero', () => http('POST', C, ok({ top_p: 0 })), 400, 'invalid_request_error', "'top_p' must be greater than 0", 'top_p'],
  ['top_p above one', () => http('POST', C, ok({ top_p: 1.5 })), 400, 'invalid_request_error', "'top_p' must be between 0 and 1", 'top_p'],
  ['n zero', () => http('POST', C, ok({ n: 0 })), 400, 'invalid_request_error', "'n' must be an integer between 1 and 128, got 0", 'n'],
  ['n huge', () => http('POST', C, ok({ n: 1000 })), 400, 'invalid_request_error', "'n' must be an integer between 1 and 128", 'n'],
  ['n fractional', () => http('POST', C, ok({ n: 1.5 })), 400, 'invalid_request_error', "'n' must be an integer, got a number", 'n'],
  ['stop is a number', () => http('POST', C, ok({ stop: 5 })), 400, 'invalid_request_error', "'stop' must be a string or an array of at most 4 strings", 'stop'],
  ['stop has five strings', () => http('POST', C, ok({ stop: ['a', 'b', 'c', 'd', 'e'] })), 400, 'invalid_request_error', 'at most 4 strings', 'stop'],
  ['stop is empty', () => http('POST', C, ok({ stop: [''] })), 400, 'invalid_request_error', "'stop' strings must not be empty", 'stop'],
  ['logprobs too many', () => http('POST', C, ok({ logprobs: 21 })), 400, 'invalid_request_error', "'logprobs' must be an integer between 0 and 20", 'logprobs'],
  ['logprobs is a boolean', () => http('POST', C, ok({ logprobs: true })), 400, 'invalid_request_error', "'logprobs' must be an integer, got a boolean", 'logprobs'],
  ['presence_penalty too high', () => http('POST', C, ok({ presence_penalty: 3 })), 400, 'invalid_request_error', "'presence_penalty' must be between -2 and 2", 'presence_penalty'],
  ['frequency_penalty too low', () => http('POST', C, ok({ frequency_penalty: -3 })), 400, 'invalid_request_error', "'frequency_penalty' must be between -2 and 2", 'frequency_penalty'],
  ['logit_bias key not a token id', () => http('POST', C, ok({ logit_bias: { abc: 1 } })), 400, 'invalid_request_error', "'logit_bias' keys must be token ids, got 'abc'", 'logit_bias'],
  ['logit_bias value too large', () => http('POST', C, ok({ logit_bias: { 5: 200 } })), 400, 'invalid_request_error', "'logit_bias' values must be numbers between -100 and 100", 'logit_bias'],
  ['logit_bias token outside the vocabulary', () => http('POST', C, ok({ logit_bias: { 99999: 1 } })), 400, 'invalid_request_error', '99999', null],
  ['seed is a string', () => http('POST', C, ok({ seed: 'x' })), 400, 'invalid_request_error', "'seed' must be an integer, got a string", 'seed'],
  ['stream is a string', () => http('POST', C, ok({ stream: 'yes' })), 400, 'invalid_request_error', "'stream' must be a boolean, got a string", 'stream'],
  ['stream_options without stream', () => http('POST', C, ok({ stream_options: { include_usage: true } })), 400, 'invalid_request_error', "'stream_options' is only allowed when 'stream' is true", 'stream_options'],
  ['unknown field', () => http('POST', C, ok({ frobnicate: 1 })), 400, 'invalid_request_error', 'Unrecognized request argument supplied: frobnicate', 'frobnicate'],
  ['echo true', () => http('POST', C, ok({ echo: true })), 400, 'invalid_request_error', "'echo' is not supported yet", 'echo'],
  ['best_of above n', () => http('POST', C, ok({ best_of: 3 })), 400, 'invalid_request_error', "'best_of' is not supported yet unless it equals 'n'", 'best_of'],
  ['chat: messages missing', () => http('POST', CHAT, '{"model":"stories"}'), 400, 'invalid_request_error', "'messages' is required", 'messages'],
  ['chat: empty messages', () => http('POST', CHAT, chat({ messages: [] })), 400, 'invalid_request_error', "'messages' must contain at least one message", 'messages'],
  ['chat: message not an object', () => http('POST', CHAT, chat({ messages: ['hi'] })), 400, 'invalid_request_error', "'messages[0]' must be an object", 'messages'],
  ['chat: unknown role', () => http('POST', CHAT, chat({ messages: [{ role: 'wizard', content: 'x' }] })), 400, 'invalid_request_error', "'messages[0].role' must be one of", 'messages[0].role'],
  ['chat: content is a number', () => http('POST', CHAT, chat({ messages: [{ role: 'user', content: 5 }] })), 400, 'invalid_request_error', "'messages[0].content' must be a string or an array of content parts", 'messages[0].content'],
  ['chat: image content', () => http('POST', CHAT, chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] })), 400, 'invalid_request_error', 'images and audio are not supported', 'messages[0].content'],
  ['chat: unknown response_format type', () => http('POST', CHAT, chat({ response_format: { type: 'xml' } })), 400, 'invalid_request_error', "response_format type 'xml' is unknown", 'response_format'],
  ['chat: unsupported schema keyword', () => http('POST', CHAT, chat({ response_format: { type: 'json_schema', json_schema: { name: 't', schema: { type: 'array', uniqueItems: true } } } })), 400, 'invalid_request_error', "response_format.json_schema.schema: unsupported keyword 'uniqueItems' at /", 'response_format.json_schema.schema'],
  ['bad guided_regex', () => http('POST', C, ok({ guided_regex: 'a(?=b)' })), 400, 'invalid_request_error', "guided_regex: regex 'a(?=b)': lookaround", 'guided_regex'],
  ['bad guided_grammar', () => http('POST', C, ok({ guided_grammar: 'root ::= x' })), 400, 'invalid_request_error', "guided_grammar: grammar: rule 'x' is used but never defined", 'guided_grammar'],
  ['chat: tool with a bad name', () => http('POST', CHAT, chat({ tools: [{ type: 'function', function: { name: 'a b' } }] })), 400, 'invalid_request_error', "'tools[0].function.name' must be 1 to 64 letters", 'tools[0].function.name'],
  ['chat: tool_choice without tools', () => http('POST', CHAT, chat({ tool_choice: 'required' })), 400, 'invalid_request_error', "'tool_choice' other than \"none\" needs 'tools'", 'tool_choice'],
  ['chat: top_logprobs without logprobs', () => http('POST', CHAT, chat({ top_logprobs: 2 })), 400, 'invalid_request_error', "'top_logprobs' requires 'logprobs' to be true", 'top_logprobs'],
  ['chat: max_completion_tokens negative', () => http('POST', CHAT, chat({ max_completion_tokens: -5 })), 400, 'invalid_request_error', "'max_completion_tokens' must be an integer between 1", 'max_completion_tokens'],
  ['chat: unknown field', () => http('POST', CHAT, chat({ prompt: 'x' })), 400, 'invalid_request_error', 'Unrecognized request argument supplied: prompt', 'prompt'],
  ['no API key', () => http('POST', C, ok({}), { auth: '' }), 401, 'invalid_request_error', 'Incorrect or missing API key', null],
  ['wrong API key', () => http('POST', C, ok({}), { auth: 'Bearer wrong' }), 401, 'invalid_request_error', 'Incorrect or missing API key', null],
  ['unknown path', () => http('POST', '/v1/engines', ok({})), 404, 'invalid_request_error', 'Invalid URL (POST /v1/engines)', null],
  ['wrong method', () => http('GET', C, ''), 405, 'invalid_request_error', '/v1/completions accepts POST only', null],
  ['body over the limit', () => http('POST', C, ok({ prompt: 'x'.repeat(70000) })), 413, 'invalid_request_error', 'the request body is over the limit of 65536 bytes', null],
  ['more sequences than the queue ever holds', () => http('POST', C, ok({ n: 8, max_tokens: 1 })), 400, 'invalid_request_error', 'more than the server ever queues at once (--max-waiting 4)', null],
  ['slow client', () => rawRequest('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"mo', { holdOpenMs: 5000 }),
    408, 'invalid_request_error', 'the request did not arrive within the time limit', null],
  ['malformed HTTP', () => rawRequest('HELLO\r\n\r\n'), 400, 'invalid_request_error', 'malformed HTTP request', null],
  ['tokenize without prompt', () => http('POST', '/tokenize', '{}'), 400, 'invalid_request_error', "'prompt' (a string) or 'messages' is required", 'prompt'],
  ['detokenize a bad token', () => http('POST', '/detokenize', '{"tokens":[600]}'), 400, 'invalid_request_error', 'token id 600 is outside the vocabulary [0, 512)', 'tokens'],
];

assert.ok(cases.length >= 40, `only ${cases.length} cases`);
let failed = 0;
for (const [name, send, status, type, message, param] of cases) {
  try {
    const res = await send();
    assert.equal(res.status, status, `status (body ${res.body})`);
    const err = JSON.parse(res.body).error;
    assert.equal(err.type, type, 'type');
    assert.ok(err.message.includes(message), `message: ${err.message}`);
    if (param !== null) assert.equal(err.param, param, 'param');
    assert.ok('code' in err, 'code');
    if (status === 429 || status === 503) assert.equal(res.headers['retry-after'], '1', 'Retry-After');
    const health = await http('GET', '/health', '');
    assert.equal(health.status, 200, 'server still healthy');
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.message}`);
  }
}
// And real work still goes through.
const res = await http('POST', C, ok({ max_tokens: 5, temperature: 0 }));
assert.equal(res.status, 200);
assert.equal(JSON.parse(res.body).choices[0].text, ', there was a little');
console.log(`${cases.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
