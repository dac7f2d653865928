// koi train: train a model from a YAML recipe (train/trainer.h); SIGTERM or Ctrl-C writes a
// checkpoint and stops, --resume continues from the newest complete one. Under
// `mpirun -np N` the ranks train data parallel (train/collectives.h), or on a device mesh with
// --dp/--tp/--pp/--ep (train/mesh.h, train/tensor_parallel.h, train/pipeline.h); with --nproc N
// or --max-restarts R this process supervises such a job and restarts it (train/supervisor.h).
// --lora-rank R trains LoRA adapters of the recipe's model.init_from only.
// koi train export: a checkpoint of a run to a GGUF file (or with --format hf a Hugging Face
// directory) with its tokenizer (LoRA adapters merged in), and/or its adapters alone as a
// PEFT directory (--adapter).
#include <csignal>
#include <cstdio>

#include "base/file.h"
#include "base/metrics.h"
#include "cli/command.h"
#include "cli/profile.h"
#include "net/metrics_server.h"
#include "train/checkpoint.h"
#include "train/collectives.h"
#include "train/export.h"
#include "train/supervisor.h"
#include "train/trainer.h"
#include "train/watchdog.h"

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
  std::optional<int> zero;
  bool no_overlap = false;
  std::optional<double> bucket_mb;
  std::optional<int> dp, tp, pp, ep;  // the device mesh (overrides train.dp, tp, pp, ep)
  std::optional<float> moe_aux_loss_coef;
  std::optional<int> pp_microbatches;
  std::optional<std::string> pp_schedule;
  double collective_timeout = 60.0;
  std::optional<int> nproc;
  std::optional<int> max_restarts;
  std::optional<int> lora_rank;
  std::optional<int> metrics_port;
  std::string metrics_host = "127.0.0.1";
  std::string profile;
};

int run_supervisor(const TrainOptions& o) {
  if (train::launched_by_mpirun()) {
    return fail("--nproc and --max-restarts start mpirun themselves; run `koi train --nproc N ...` without mpirun");
  }
  auto argv = train::own_command_line();
  if (!argv.ok()) return fail(argv.status().message());
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  return train::supervise(*argv, o.nproc.value_or(1), o.max_restarts.value_or(0), &g_stop);
}

int run_train(const TrainOptions& o) {
  if (o.config.empty()) return fail("koi train needs --config RECIPE.yaml (see recipes/)");
  auto text = read_file(o.config);
  if (!text.ok()) return fail(text.status().message());
  auto config = train::parse_train_config(*text, o.config);
  if (!config.ok()) return fail(config.status().message());
  if (!o.out.empty()) config->out_dir = o.out;
  if (o.steps) config->steps = *o.steps, config->schedule.decay_steps = std::min(config->schedule.decay_steps, *o.steps);
  if (o.threads) config->threads = *o.threads;
  if (o.zero) config->zero_stage = *o.zero;
  if (o.no_overlap) config->overlap = false;
  if (o.bucket_mb) config->bucket_mb = *o.bucket_mb;
  if (o.dp) config->mesh.dp = *o.dp;
  if (o.tp) config->mesh.tp = *o.tp;
  if (o.pp) config->mesh.pp = *o.pp;
  if (o.ep) config->mesh.ep = *o.ep;
  if (o.moe_aux_loss_coef) config->moe_aux_loss_coef = *o.moe_aux_loss_coef;
  config->pipeline.stages = config->mesh.pp;
  if (o.pp_microbatches) config->pipeline.micro_batches = *o.pp_microbatches;
  const std::string schedule = o.pp_schedule.value_or(train::pipeline_schedule_name(config->pipeline.schedule));
  if (Status s = train::set_pipeline_config(schedule, &config->pipeline); !s.ok()) {
    return fail("--pp, --pp-microbatches, --pp-schedule: " + s.message());
  }
  if (o.lora_rank) {
    if (config->init_from.empty()) return fail("--lora-rank needs a recipe with model.init_from (the model to adapt)");
    config->lora.rank = *o.lora_rank;
  }
  if (o.nproc || o.max_restarts) return run_supervisor(o);
  auto comm = train::create_communicator(o.collective_timeout);
  if (!comm.ok()) return fail(comm.status().message());
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  metrics::Registry registry;
  std::unique_ptr<net::MetricsServer> metrics_server;
  if (o.metrics_port && (*comm)->rank() == 0) {
    auto started = net::MetricsServer::start(registry, o.metrics_host, *o.metrics_port);
    if (!started.ok()) return fail(started.status().message());
    metrics_server = std::move(*started);
    std::fprintf(stderr, "metrics at http://%s:%d/metrics\n", o.metrics_host.c_str(), metrics_server->port());
  }
  // Rank 0 profiles; the file fails now, not after hours of training, when it cannot be written.
  auto profile = ProfileFile::open((*comm)->rank() == 0 ? o.profile : std::string());
  if (!profile.ok()) return fail(profile.status().message());
  auto result = train::run_training(*config, o.resume, &g_stop, comm->get(), &registry, profile->recorder());
  if (Status s = profile->finish(); !s.ok()) return fail(s.message());
  if (!result.ok()) {
    const int code = fail(result.status().message());
    if ((*comm)->size() == 1) return code;
    // A rank that fails leaves the others inside a collective: end the whole job.
    (*comm)->abort(result.status().code() == StatusCode::kDeadlineExceeded ? train::kWatchdogExitCode : code);
  }
  if ((*comm)->rank() != 0) return 0;
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
  app->add_option("--zero", o->zero,
                  "shard over the data-parallel ranks: 1 AdamW's state (ZeRO-1), 2 and the gradients (ZeRO-2), 3 and the "
                  "weights, gathered per layer (ZeRO-3/FSDP); 0: plain data parallel")
      ->check(CLI::IsMember({0, 1, 2, 3}));
  app->add_flag("--no-overlap", o->no_overlap,
                "sum the gradients after the backward pass (ZeRO-0/1: in buckets) and wait for each ZeRO-2/3 collective "
                "at once, instead of overlapping them with compute (for comparison)");
  app->add_option("--dp", o->dp,
                  "data-parallel ranks of the device mesh (default: the ranks left by tp x pp x ep; the product of "
                  "--dp --tp --pp --ep is the mpirun rank count)")
      ->check(CLI::PositiveNumber);
  app->add_option("--tp", o->tp, "tensor-parallel ranks: every layer split over them (Megatron-LM; default 1)")
      ->check(CLI::PositiveNumber);
  app->add_option("--pp", o->pp,
                  "pipeline-parallel stages: the layers split over them, micro-batches run through them (default 1)")
      ->check(CLI::PositiveNumber);
  app->add_option("--ep", o->ep,
                  "expert-parallel ranks: a mixture-of-experts model's experts split over them, alone on the mesh "
                  "(default 1)")
      ->check(CLI::PositiveNumber);
  app->add_option("--bucket-mb", o->bucket_mb, "gradient allreduce bucket size in MB (default 25)")
      ->check(CLI::PositiveNumber);
  app->add_option("--pp-microbatches", o->pp_microbatches,
                  "pipeline parallel: micro-batches per batch (divides train.batch_size; overrides "
                  "train.pp_microbatches, default 1)");
  app->add_option("--pp-schedule", o->pp_schedule,
                  "pipeline parallel: 1f1b (default) or gpipe (overrides train.pp_schedule)");
  app->add_option("--moe-aux-loss-coef", o->moe_aux_loss_coef,
                  "mixture-of-experts models: weight of the router's load-balancing loss (overrides "
                  "train.moe_aux_loss_coef, default 0.01)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--collective-timeout", o->collective_timeout,
                  "seconds a collective may wait for the other ranks before the job fails")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--nproc", o->nproc, "supervise `mpirun -np N koi train ...` (default 1 with --max-restarts)")
      ->check(CLI::PositiveNumber);
  app->add_option("--max-restarts", o->max_restarts,
                  "restart a failed job from its last checkpoint at most R times (with --nproc)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--lora-rank", o->lora_rank,
                  "train rank-R LoRA adapters of model.init_from (overrides train.lora_rank)")
      ->check(CLI::PositiveNumber);
  app->add_option("--metrics-port", o->metrics_port,
                  "serve the run's metrics (koi_train_*) at http://HOST:PORT/metrics while it trains (rank 0; 0: any "
                  "free port, printed)")
      ->check(CLI::Range(0, 65535));
  app->add_option("--metrics-host", o->metrics_host, "address --metrics-port listens on")->capture_default_str();
  app->add_option("--profile", o->profile,
                  "write a Chrome trace (Perfetto JSON) of the run's steps to FILE: forward, backward, collectives, "
                  "optimizer, checkpoints (rank 0)");
  return [o] { return run_train(*o); };
}

struct ExportOptions {
  std::string run;
  std::string output;
  std::string format = "gguf";
  std::string adapter;
  std::string type = "f32";
};

int run_export(const ExportOptions& o) {
  if (o.output.empty() && o.adapter.empty()) {
    return fail("koi train export needs -o MODEL.gguf, --adapter DIR or both (--format hf -o DIR: a directory)");
  }
  std::string ckpt = o.run;
  if (!file_exists(path_join(ckpt, "state.json"))) {
    auto latest = train::latest_checkpoint(o.run);
    if (!latest.ok()) return fail(latest.status().message());
    ckpt = *latest;
  }
  if (!o.adapter.empty()) {
    if (Status s = train::export_adapter(ckpt, o.adapter); !s.ok()) return fail(s.message());
    std::printf("exported the LoRA adapters of %s to %s\n", ckpt.c_str(), o.adapter.c_str());
  }
  if (o.output.empty()) return 0;
  auto type = model::ExportType::from_name(o.type);
  if (!type) {
    return fail("--type must be one of f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q4_k, q5_k, q6_k; got '" + o.type + "'");
  }
  if (o.format == "hf" && type->mix != model::ExportType::Mix::kNone) {
    return fail("--format hf takes --type f32, f16 or bf16; got '" + o.type + "'");
  }
  const Status s =
      o.format == "hf" ? train::export_hf(ckpt, o.output, type->base) : train::export_gguf(ckpt, o.output, *type);
  if (!s.ok()) return fail(s.message());
  std::printf("exported %s to %s\n", ckpt.c_str(), o.output.c_str());
  return 0;
}

Runner setup_export(CLI::App* app) {
  auto o = std::make_shared<ExportOptions>();
  app->add_option("run", o->run, "run directory (its newest checkpoint) or a checkpoint directory")->required();
  app->add_option("-o,--output", o->output,
                  "GGUF file (--format hf: directory) to write, LoRA adapters merged into the weights");
  app->add_option("--format", o->format, "gguf: one GGUF file; hf: a Hugging Face model directory")
      ->capture_default_str()
      ->check(CLI::IsMember({"gguf", "hf"}));
  app->add_option("--adapter", o->adapter, "directory to write the LoRA adapters to (PEFT format)");
  app->add_option("--type", o->type,
                  "weight type: f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q4_k, q5_k, q6_k (hf: f32, f16, bf16)")
      ->capture_default_str();
  return [o] { return run_export(*o); };
}

}  // namespace
KOI_COMMAND(train, "train a model from a YAML recipe (koi train --config recipes/shakespeare_char.yaml)", setup_train);
KOI_SUBCOMMAND(train, export,
               "write a training checkpoint as a GGUF model or Hugging Face directory with its tokenizer",
               setup_export);
}  // namespace koi::cli
