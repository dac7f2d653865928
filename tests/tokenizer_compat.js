// Compares `koi tokenize` with @lenml/tokenizers (a JavaScript port of the Hugging Face
// tokenizers) on the tokenizer.json files of every @lenml/tokenizer-* package whose pipeline
// uses only components Koi runs (tokenizer_compat.sh lists them), id for id, plus a Unigram
// tokenizer made here from the Llama 2 vocabulary, and checks that Koi's
// decode(encode(x)) == x where the pipeline keeps the text (see expected_round_trip). It also
// saves each tokenizer with Koi's writer (`koi tokenize --save`) and checks that the file
// encodes and decodes as the original, in Koi and in @lenml/tokenizers, and encodes text pairs
// (`[a, b]` batch entries) as @lenml/tokenizers does, ids and type ids.
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

// Text pairs: neighbours in the corpus, and a few with empty sides.
const pairs = corpus.map((text, i) => [text, corpus[(i + 1) % corpus.length]]).concat([["", "a"], ["a", ""]]);
const pairsPath = path.join(tmp, "pairs.json");
fs.writeFileSync(pairsPath, JSON.stringify(pairs));

function koiEncode(dir, flags, texts = corpusPath) {
  const out = execFileSync(koi, ["tokenize", "--tokenizer", dir, "--batch", texts, ...flags],
                           { maxBuffer: 1 << 26 });
  return JSON.parse(out.toString());
}

function loadReference(dir) {
  const { TokenizerLoader } = require(path.join(modules, "@lenml", "tokenizers"));
  const config = path.join(dir, "tokenizer_config.json");
  return TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"))),
    tokenizerConfig: fs.existsSync(config) ? JSON.parse(fs.readFileSync(config)) : {},
  });
}

let failures = 0;
let checks = 0;
function check(ok, message) {
  checks++;
  if (!ok) {
    failures++;
    console.log(message);
  }
}

// Koi's writer: the saved tokenizer gives the ids and decoded text `original` gave, in Koi,
// and the ids the reference gives on the original file, in @lenml/tokenizers.
function checkSaved(name, dir, reference, original) {
  const saved = path.join(tmp, `saved-${name}`);
  execFileSync(koi, ["tokenize", "--tokenizer", dir, "--save", saved]);
  const savedReference = loadReference(saved);
  for (const addSpecial of [false, true]) {
    const flags = ["--parse-special"].concat(addSpecial ? ["--add-special"] : []);
    const got = koiEncode(saved, flags);
    corpus.forEach((text, i) => {
      check(JSON.stringify(got[i]) === JSON.stringify(original[addSpecial][i]),
            `SAVED ${name} add_special=${addSpecial} text=${JSON.stringify(text)}\n` +
            `  original ${JSON.stringify(original[addSpecial][i])}\n  saved    ${JSON.stringify(got[i])}`);
      const want = reference.encode(text, { add_special_tokens: addSpecial });
      const lenml = savedReference.encode(text, { add_special_tokens: addSpecial });
      check(JSON.stringify(lenml) === JSON.stringify(want),
            `SAVED-LENML ${name} add_special=${addSpecial} text=${JSON.stringify(text)}\n` +
            `  original ${JSON.stringify(want)}\n  saved    ${JSON.stringify(lenml)}`);
    });
  }
}

// Pairs: ids, and type ids where the reference gives them (a TemplateProcessing).
function checkPairs(name, dir, reference) {
  for (const addSpecial of [false, true]) {
    const flags = ["--parse-special"].concat(addSpecial ? ["--add-special"] : []);
    const got = koiEncode(dir, flags, pairsPath);
    pairs.forEach(([a, b], i) => {
      const want = reference._call(a, { text_pair: b, add_special_tokens: addSpecial, return_token_type_ids: true,
                                        return_tensor: false });
      const ok = JSON.stringify(want.input_ids) === JSON.stringify(got[i].ids) &&
                 (want.token_type_ids === undefined ||
                  JSON.stringify(want.token_type_ids) === JSON.stringify(got[i].type_ids));
      check(ok, `PAIR ${name} add_special=${addSpecial} ${JSON.stringify([a, b])}\n` +
                `  lenml ${JSON.stringify(want.input_ids)} ${JSON.stringify(want.token_type_ids)}\n` +
                `  koi   ${JSON.stringify(got[i].ids)} ${JSON.stringify(got[i].type_ids)}`);
    });
  }
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
                      { Sequence: { id: "A", type_id: 0 } }],
                      pair: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
                             { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
                      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } } },
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

for (const [name, load] of tokenizers) {
  const [dir, reference] = load();
  const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json")));
  const unk = json.model.type === "Unigram" ? json.model.unk_id : json.model.vocab[json.model.unk_token];
  const original = {};
  for (const addSpecial of [false, true]) {
    const flags = ["--parse-special"].concat(addSpecial ? ["--add-special"] : []);
    const got = koiEncode(dir, flags);
    original[addSpecial] = got;
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
  checkSaved(name, dir, reference, original);
  checkPairs(name, dir, reference);
  console.log(`${name}: ${corpus.length} texts and ${pairs.length} pairs compared, saved and reread`);
}
fs.rmSync(tmp, { recursive: true });
console.log(`${checks - failures}/${checks} checks passed`);
process.exit(failures === 0 ? 0 : 1);
