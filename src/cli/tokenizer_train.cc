// koi tokenizer: the parent of the tokenizer tools. `koi tokenizer train` learns a new
// byte-level BPE tokenizer (tokenizer/bpe_trainer.h) from text files and writes it as a
// Hugging Face folder (tokenizer/hf_writer.h) that Koi, Hugging Face and transformers.js
// load:
//   koi tokenizer train --input corpus.txt --vocab-size 4096 -o tok/
// Progress (tokens learned, elapsed seconds) goes to stderr at most twice a second.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/file.h"
#include "base/thread_pool.h"
#include "cli/command.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/hf_writer.h"

namespace koi::cli {
namespace {

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;
  std::string out;
  tokenizer::BpeTrainOptions train;
};

int run_tokenizer_train(TokenizerTrainOptions o) {
  std::vector<std::string> contents;
  size_t bytes = 0;
  for (const std::string& path : o.inputs) {
    auto text = read_file(path);
    if (!text.ok()) return fail(text.status().message());
    bytes += text->size();
    contents.push_back(std::move(*text));
  }
  const std::vector<std::string_view> texts(contents.begin(), contents.end());
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_report = start;
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  o.train.progress = [&](int done, int total) {
    if (done < total && Clock::now() - last_report < std::chrono::milliseconds(500)) return;
    last_report = Clock::now();
    std::fprintf(stderr, "\rlearned %d/%d tokens | %.1f s", done, total, seconds());
    if (done == total) std::fprintf(stderr, "\n");
  };
  auto spec = tokenizer::train_bpe(texts, o.train);
  if (!spec.ok()) return fail(spec.status().message());
  if (int(spec->tokens.size()) < o.train.vocab_size) {
    std::fprintf(stderr, "\nno pair occurs %d times any more: the vocabulary has %zu tokens, not %d\n",
                 o.train.min_frequency, spec->tokens.size(), o.train.vocab_size);
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) return fail(o.out + ": cannot create the output directory: " + ec.message());
  if (Status s = tokenizer::write_hf_tokenizer(*spec, o.out); !s.ok()) return fail(s.message());
  std::printf("trained %zu tokens (%zu merges) on %zu bytes in %.2f s; wrote %s\n", spec->tokens.size(),
              spec->merges.size(), bytes, seconds(), path_join(o.out, "tokenizer.json").c_str());
  return 0;
}

Runner setup_tokenizer(CLI::App* app) {
  app->require_subcommand(1);
  return {};
}

Runner setup_tokenizer_train(CLI::App* app) {
  auto o = std::make_shared<TokenizerTrainOptions>();
  o->train.threads = ThreadPool::physical_cores();
  app->add_option("-i,--input", o->inputs, "text file to learn from (repeat for more; each is its own document)")
      ->required();
  app->add_option("--vocab-size", o->train.vocab_size,
                  "tokens in all: 256 bytes + merges + special tokens")
      ->required();
  app->add_option("-o,--out", o->out, "directory to write tokenizer.json and tokenizer_config.json to")->required();
  app->add_option("--min-frequency", o->train.min_frequency, "a pair merges only if it occurs this often")
      ->capture_default_str();
  app->add_option("--bos", o->train.bos, "beginning-of-text token ('' for none)")->capture_default_str();
  app->add_option("--eos", o->train.eos, "end-of-text token ('' for none)")->capture_default_str();
  app->add_option("--special", o->train.specials, "another special token, after bos and eos (repeatable)");
  app->add_option("--threads", o->train.threads, "threads that split and count the text (default: the cores)");
  return [o] { return run_tokenizer_train(*o); };
}

}  // namespace
KOI_COMMAND(tokenizer, "tokenizer tools: train a byte-level BPE tokenizer", setup_tokenizer);
KOI_SUBCOMMAND(tokenizer, train, "learn a byte-level BPE tokenizer from text and write it as tokenizer.json",
               setup_tokenizer_train);
}  // namespace koi::cli
