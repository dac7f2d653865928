// koi tokenize: encode text with any tokenizer Koi reads (a Hugging Face folder, a GGUF
// file, a llama2.c tokenizer.bin) and print the ids, or decode ids back to text.
//
//   koi tokenize --tokenizer tok512.bin --text "Once upon a time"
//   koi tokenize --tokenizer DIR --batch texts.json --json   # [["a", ...]] -> [{"ids":..., "text":...}]
//   koi tokenize --tokenizer model.gguf --decode "1 9038 2501"
//   koi tokenize --tokenizer DIR --text "a question" --pair "its passage" --json  # + "type_ids"
//   koi tokenize --tokenizer model.gguf --save OUT   # OUT/tokenizer.json + tokenizer_config.json
#include <boost/json.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include "base/file.h"
#include "cli/command.h"
#include "tokenizer/hf_writer.h"
#include "tokenizer/load.h"

namespace koi::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string text;
  std::string batch;
  std::string decode;
  std::string pair;
  std::string save;
  int32_t vocab_size = 0;
  bool add_special = false;
  bool parse_special = false;
  bool json = false;
};

boost::json::object encode_one(const tokenizer::Tokenizer& tok, const std::string& text,
                               const TokenizeOptions& o) {
  std::vector<int32_t> ids = tok.encode(text, o.add_special, o.parse_special);
  boost::json::array json_ids(ids.begin(), ids.end());
  return {{"ids", std::move(json_ids)}, {"text", tok.decode(ids)}};
}

// A pair of texts: ids, type ids, and the ids decoded.
boost::json::object encode_pair(const tokenizer::Tokenizer& tok, const std::string& a, const std::string& b,
                                const TokenizeOptions& o) {
  tokenizer::PairEncoding pair = tok.encode_pair(a, b, o.add_special, o.parse_special);
  return {{"ids", boost::json::array(pair.ids.begin(), pair.ids.end())},
          {"type_ids", boost::json::array(pair.type_ids.begin(), pair.type_ids.end())},
          {"text", tok.decode(pair.ids)}};
}

// A --batch entry: a text, or [text, pair] for a pair of texts.
std::optional<boost::json::object> encode_entry(const tokenizer::Tokenizer& tok, const boost::json::value& entry,
                                                const TokenizeOptions& o) {
  if (entry.is_string()) return encode_one(tok, std::string(entry.as_string()), o);
  if (!entry.is_array() || entry.as_array().size() != 2 || !entry.as_array()[0].is_string() ||
      !entry.as_array()[1].is_string()) {
    return std::nullopt;
  }
  return encode_pair(tok, std::string(entry.as_array()[0].as_string()), std::string(entry.as_array()[1].as_string()), o);
}

int run_tokenize(const TokenizeOptions& o) {
  auto tok = tokenizer::load_tokenizer(o.tokenizer, o.vocab_size);
  if (!tok.ok()) return fail(tok.status().message());
  if (!o.save.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.save, ec);
    if (ec) return fail("--save: cannot create " + o.save + ": " + ec.message());
    if (Status s = tokenizer::write_hf_tokenizer(tok->spec(), o.save); !s.ok()) return fail("--save: " + s.message());
    std::printf("wrote %s/tokenizer.json and tokenizer_config.json\n", o.save.c_str());
    return 0;
  }
  if (!o.decode.empty()) {
    std::istringstream in(o.decode);
    std::vector<int32_t> ids;
    for (int64_t id; in >> id;) {
      if (id < 0 || id >= tok->n_vocab()) return fail("--decode: id " + std::to_string(id) + " is outside the vocabulary");
      ids.push_back(int32_t(id));
    }
    std::printf("%s\n", tok->decode(ids).c_str());
    return 0;
  }
  if (!o.batch.empty()) {
    auto bytes = read_file(o.batch);
    if (!bytes.ok()) return fail(bytes.status().message());
    boost::system::error_code ec;
    boost::json::value texts = boost::json::parse(*bytes, ec);
    if (ec || !texts.is_array()) return fail(o.batch + ": expected a JSON array of strings");
    boost::json::array out;
    for (const auto& t : texts.as_array()) {
      std::optional<boost::json::object> encoded = encode_entry(*tok, t, o);
      if (!encoded) return fail(o.batch + ": expected a JSON array of strings and [text, pair] arrays");
      out.push_back(std::move(*encoded));
    }
    std::printf("%s\n", boost::json::serialize(out).c_str());
    return 0;
  }
  boost::json::object result = o.pair.empty() ? encode_one(*tok, o.text, o) : encode_pair(*tok, o.text, o.pair, o);
  if (o.json) {
    std::printf("%s\n", boost::json::serialize(result).c_str());
    return 0;
  }
  for (const auto& id : result["ids"].as_array()) std::printf("%lld ", static_cast<long long>(id.as_int64()));
  std::printf("\n");
  return 0;
}

Runner setup_tokenize(CLI::App* app) {
  auto o = std::make_shared<TokenizeOptions>();
  app->add_option("--tokenizer", o->tokenizer, "tokenizer folder (tokenizer.json), .gguf or llama2.c .bin")->required();
  app->add_option("--text", o->text, "text to encode");
  app->add_option("--pair", o->pair, "a second text: encode --text and it as a pair (type ids with --json)");
  app->add_option("--batch", o->batch,
                  "JSON file with an array of texts (or [text, pair] arrays); prints a JSON array");
  app->add_option("--save", o->save,
                  "write the tokenizer to this folder as tokenizer.json + tokenizer_config.json instead");
  app->add_option("--decode", o->decode, "space-separated ids to decode instead");
  app->add_option("--vocab-size", o->vocab_size, "llama2.c tokenizer.bin: number of tokens (default: all)");
  app->add_flag("--add-special", o->add_special, "add BOS/EOS as the tokenizer says");
  app->add_flag("--parse-special", o->parse_special, "turn special-token text into special tokens");
  app->add_flag("--json", o->json, "print {\"ids\": [...], \"text\": decoded}");
  return [o] { return run_tokenize(*o); };
}

}  // namespace
KOI_COMMAND(tokenize, "encode or decode text with a tokenizer", setup_tokenize);
}  // namespace koi::cli
