// koi train: train a model from a YAML recipe (train/trainer.h); SIGTERM or Ctrl-C writes a
// checkpoint and stops, --resume continues from the newest complete one.
// koi train export: a checkpoint of a run to a GGUF file with its tokenizer.
#include <csignal>
#include <cstdio>

#include "base/file.h"
#include "cli/command.h"
#include "train/checkpoint.h"
#include "train/export.h"
#include "train/trainer.h"

namespace koi::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true); }

struct TrainOptions {
  std::string config;
  std::string out;
  std::optional<int> steps;
  std::optional<int> threads;
  bool resume = false;
};

int run_train(const TrainOptions& o) {
  if (o.config.empty()) return fail("koi train needs --config RECIPE.yaml (see recipes/)");
  auto text = read_file(o.config);
  if (!text.ok()) return fail(text.status().message());
  auto config = train::parse_train_config(*text, o.config);
  if (!config.ok()) return fail(config.status().message());
  if (!o.out.empty()) config->out_dir = o.out;
  if (o.steps) config->steps = *o.steps, config->schedule.decay_steps = std::min(config->schedule.decay_steps, *o.steps);
  if (o.threads) config->threads = *o.threads;
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  auto result = train::run_training(*config, o.resume, &g_stop);
  if (!result.ok()) return fail(result.status().message());
  if (result->stopped) {
    std::fprintf(stderr, "stopped at step %lld; checkpoint %s; continue with --resume\n",
                 static_cast<long long>(result->steps), result->checkpoint.c_str());
    return 0;
  }
  std::printf("steps %lld | val loss %.4f | train loss %.4f | %.1f ms/step | checkpoint %s\n",
              static_cast<long long>(result->steps), result->val_loss, result->train_loss,
              result->seconds_per_step * 1e3, result->checkpoint.c_str());
  return 0;
}

Runner setup_train(CLI::App* app) {
  auto o = std::make_shared<TrainOptions>();
  app->add_option("-c,--config", o->config, "training recipe (YAML: model, data, train sections)");
  app->add_option("-o,--out", o->out, "run directory (overrides train.out)");
  app->add_option("--steps", o->steps, "optimizer steps (overrides train.steps; the cosine ends there at the latest)");
  app->add_option("--threads", o->threads, "worker threads (default: the physical cores)");
  app->add_flag("--resume", o->resume, "continue from the newest complete checkpoint of the run directory");
  return [o] { return run_train(*o); };
}

struct ExportOptions {
  std::string run;
  std::string output;
  std::string type = "f32";
};

int run_export(const ExportOptions& o) {
  std::string ckpt = o.run;
  if (!file_exists(path_join(ckpt, "state.json"))) {
    auto latest = train::latest_checkpoint(o.run);
    if (!latest.ok()) return fail(latest.status().message());
    ckpt = *latest;
  }
  auto type = dtype_from_name(o.type);
  if (!type) return fail("--type must be one of f32, f16, bf16, q8_0, q4_0; got '" + o.type + "'");
  if (Status s = train::export_gguf(ckpt, o.output, *type); !s.ok()) return fail(s.message());
  std::printf("exported %s to %s\n", ckpt.c_str(), o.output.c_str());
  return 0;
}

Runner setup_export(CLI::App* app) {
  auto o = std::make_shared<ExportOptions>();
  app->add_option("run", o->run, "run directory (its newest checkpoint) or a checkpoint directory")->required();
  app->add_option("-o,--output", o->output, "GGUF file to write")->required();
  app->add_option("--type", o->type, "weight type: f32, f16, bf16, q8_0, q4_0")->capture_default_str();
  return [o] { return run_export(*o); };
}

}  // namespace
KOI_COMMAND(train, "train a model from a YAML recipe (koi train --config recipes/shakespeare_char.yaml)", setup_train);
KOI_SUBCOMMAND(train, export, "write a training checkpoint as a GGUF model with its tokenizer", setup_export);
}  // namespace koi::cli
