// Compares `koi tokenize` with @lenml/tokenizers (the JavaScript port of the Hugging Face
// tokenizers) on a tokenizer folder Koi wrote, id for id, with and without special tokens,
// and prints Koi's tokens per byte over the corpus.
//   node tests/tokenizer_train.js <koi> <npm prefix with @lenml/tokenizers> <dir> <corpus.json>
"use strict";
const { execFileSync } = require("child_process");
const fs = require("fs");
const path = require("path");

const [koi, prefix, dir, corpusPath] = process.argv.slice(2);
const { TokenizerLoader } = require(path.join(prefix, "node_modules", "@lenml", "tokenizers"));
const read = (name) => JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
const reference = TokenizerLoader.fromPreTrained({
  tokenizerJSON: read("tokenizer.json"),
  tokenizerConfig: read("tokenizer_config.json"),
});
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));

let failures = 0;
let checks = 0;
let tokens = 0;
let bytes = 0;
for (const addSpecial of [false, true]) {
  const flags = ["--parse-special"].concat(addSpecial ? ["--add-special"] : []);
  const got = JSON.parse(execFileSync(koi, ["tokenize", "--tokenizer", dir, "--batch", corpusPath, ...flags],
                                      { maxBuffer: 1 << 28 }).toString());
  corpus.forEach((text, i) => {
    const want = reference.encode(text, { add_special_tokens: addSpecial });
    checks++;
    if (JSON.stringify(want) !== JSON.stringify(got[i].ids)) {
      failures++;
      if (failures <= 5) {
        console.log(`MISMATCH add_special=${addSpecial} text=${JSON.stringify(text.slice(0, 200))}\n` +
                    `  lenml ${JSON.stringify(want.slice(0, 40))}\n  koi   ${JSON.stringify(got[i].ids.slice(0, 40))}`);
      }
    }
    if (!addSpecial) {
      tokens += got[i].ids.length;
      bytes += Buffer.byteLength(text, "utf8");
      checks++;
      if (got[i].text !== text) {
        failures++;
        console.log(`ROUNDTRIP ${JSON.stringify(text.slice(0, 200))}`);
      }
    }
  });
}
console.log(`tokens_per_byte ${(tokens / bytes).toFixed(4)}`);
console.log(`${checks - failures}/${checks} checks passed`);
process.exit(failures === 0 ? 0 : 1);
