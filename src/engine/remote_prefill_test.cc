// Prefill/decode disaggregation inside the engine (kv_transfer.h, remote_prefill.cc): a
// prefill engine exports a prompt's KV, a decode engine imports it, and the decode engine's
// greedy output must equal one engine's, with prefix-cache hits on either side, with many
// requests at once, and when the transfer fails or its lease runs out (local fallback).
// The bytes move in-process here; tests/pd_disagg.py moves them over TCP between processes.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "base/clock.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/llama_runner.h"

namespace koi::engine {
namespace {

using test_util::greedy;
using Ids = std::vector<int32_t>;
constexpr int kBlockSize = 16;
constexpr int kBlocks = 96;
constexpr int64_t kLeaseNs = 1'000'000'000;

Ids prompt_of(int len, int32_t salt) {
  Ids p = {1};
  for (int i = 1; i < len; ++i) p.push_back(static_cast<int32_t>((salt * 131 + i * 17) % 500) + 3);
  return p;
}

// The real runner seen from outside: the forward pass runs unchanged, and at each call of the
// batch's layer hook this records the layer, the frames the engine queued in `watched` by then
// (drained from it) and, for the layer after, the K bytes of the pass's first block (to show
// that layer had not been computed yet). call_hook false: a runner that never calls the hook.
class LayerWatchRunner final : public ModelRunner {
 public:
  struct Hook {
    int layer = 0;
    std::vector<KvExport::Block> queued;
    std::vector<int32_t> block_ids;         // physical id of each queued block
    std::vector<std::byte> next_layer_k;    // the first one's K in layer + 1 at this moment
  };
  LayerWatchRunner(ModelRunner& inner, bool call_hook) : inner_(inner), call_hook_(call_hook) {}
  int n_vocab() const override { return inner_.n_vocab(); }
  int max_context() const override { return inner_.max_context(); }
  model::KvCache* kv_memory() override { return inner_.kv_memory(); }
  Status forward(const model::ForwardBatch& batch, float* logits) override {
    model::ForwardBatch seen = batch;
    seen.on_layer_kv_written = nullptr;
    if (call_hook_ && batch.on_layer_kv_written) {
      seen.on_layer_kv_written = [&](int layer) {
        batch.on_layer_kv_written(layer);
        hooks.push_back(observe(batch, layer));
      };
    }
    ++num_forwards;
    return inner_.forward(seen, logits);
  }

  KvExport* watched = nullptr;
  std::vector<Hook> hooks;
  int num_forwards = 0;

 private:
  Hook observe(const model::ForwardBatch& batch, int layer) {
    Hook h;
    h.layer = layer;
    while (watched) {
      std::optional<KvExport::Item> item = watched->next(0);
      if (!item) break;
      EXPECT_TRUE(item->block.has_value());
      if (item->block) h.queued.push_back(std::move(*item->block));
    }
    model::KvCache& memory = *kv_memory();
    for (const KvExport::Block& b : h.queued) h.block_ids.push_back(batch.sequences[0].block_table[b.block_idx]);
    if (h.queued.empty() || layer + 1 >= memory.shape().n_layers) return h;
    const std::byte* k = memory.k(layer + 1, int64_t{h.block_ids.front()} * memory.shape().block_size);
    h.next_layer_k.assign(k, k + memory.shape().block_size * memory.shape().slot_bytes());
    return h;
  }
  ModelRunner& inner_;
  const bool call_hook_;
};

EngineConfig node_config(int budget) {
  EngineConfig c;
  c.block_size = kBlockSize;
  c.num_kv_blocks = kBlocks;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 16;
  return c;
}

// One engine over one model instance (its own KV memory), with its own fake clock; with
// `watch`, the engine runs the model through a LayerWatchRunner.
struct Node {
  Node(model::LlamaModel& model, int budget, DType kv_dtype = DType::kF32, bool watch_layers = false,
       bool call_hook = true, bool split_windows = false)
      : runner(model, kBlocks, kBlockSize, 1, kv_dtype, split_windows), watch(runner, call_hook) {
    engine = std::make_unique<Engine>(node_config(budget), watch_layers ? static_cast<ModelRunner&>(watch) : runner,
                                      clock);
  }
  FakeClock clock;
  LlamaRunner runner;
  LayerWatchRunner watch;
  std::unique_ptr<Engine> engine;
};

// Steps until idle, collecting every request's tokens.
std::map<std::string, Ids> drain(Engine& engine, std::map<std::string, Ids> tokens = {}) {
  while (engine.has_unfinished()) {
    auto outputs = engine.step();
    EXPECT_TRUE(outputs.ok()) << outputs.status().to_string();
    if (!outputs.ok()) break;
    for (const RequestOutput& o : *outputs) {
      tokens[o.request_id].insert(tokens[o.request_id].end(), o.token_ids.begin(), o.token_ids.end());
    }
  }
  return tokens;
}

struct Transfer {
  std::shared_ptr<KvImport> import;
  std::shared_ptr<KvExport> export_ticket;
  int frames_sent = 0;
  std::map<int, int> layers_arrived;  // per block index
};

// Moves everything the export has produced so far into the import. After `max_frames`
// frames (one layer of one block each) the transfer is dead (the prefill worker went away):
// nothing more crosses.
void pump(Transfer& t, int max_frames) {
  while (auto item = t.export_ticket->next(0)) {
    if (t.frames_sent >= max_frames) return;
    if (item->block) {
      ++t.frames_sent;
      ++t.layers_arrived[item->block->block_idx];
      const size_t bytes = item->block->data.size() / 2;
      const std::byte* k = item->block->data.data();
      EXPECT_TRUE(t.import->write_block(item->block->block_idx, item->block->layer, {k, bytes}, {k + bytes, bytes}));
    } else if (item->done) {
      t.import->complete(*item->done);
    }
  }
}

// Leading blocks of a transfer whose every layer arrived (after `skip` the decoder held).
int whole_blocks(const Transfer& t, int skip, int n_layers) {
  int n = skip;
  while (t.layers_arrived.contains(n) && t.layers_arrived.at(n) == n_layers) ++n;
  return n;
}

// Submits every spec to the decode engine with an import, then prefills each on the prefill
// engine (all at once) and pumps the KV across, at most max_blocks blocks per request.
std::map<std::string, Ids> disaggregated(Node& prefill, Node& decode, const std::vector<RequestSpec>& specs,
                                         int max_frames = 1 << 30, std::vector<Transfer>* out = nullptr) {
  std::vector<Transfer> transfers;
  for (const RequestSpec& s : specs) {
    RequestSpec d = s;
    d.kv_import = std::make_shared<KvImport>(decode.clock.now_ns() + kLeaseNs);
    EXPECT_TRUE(decode.engine->add_request(d).ok());
    auto reservation = d.kv_import->wait_reserved();
    EXPECT_TRUE(reservation.has_value());
    RequestSpec p = s;
    p.id = "prefill-" + s.id;
    p.params.max_tokens = 1;
    p.kv_export = std::make_shared<KvExport>(reservation ? reservation->num_cached_tokens / kBlockSize : 0);
    EXPECT_TRUE(prefill.engine->add_request(p).ok());
    transfers.push_back({d.kv_import, p.kv_export, 0, {}});
  }
  while (prefill.engine->has_unfinished()) {
    EXPECT_TRUE(prefill.engine->step().ok());
    for (Transfer& t : transfers) pump(t, max_frames);
  }
  for (Transfer& t : transfers) {
    if (t.import->state() == KvImport::State::kReserved) t.import->fail("the prefill worker went away");
  }
  if (out) *out = transfers;
  return drain(*decode.engine);
}

std::vector<RequestSpec> crowd() {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 4; ++i) specs.push_back({"r" + std::to_string(i), prompt_of(40 + 53 * i, i), greedy(24)});
  specs.push_back({"aligned", prompt_of(64, 7), greedy(24)});  // whole blocks only
  specs.push_back({"short", prompt_of(3, 8), greedy(24)});     // less than a block
  return specs;
}

void expect_disaggregated_matches_one_engine(model::LlamaModel& model, DType kv_dtype = DType::kF32,
                                             bool split_windows = false) {
  Node single(model, 2048, kv_dtype, false, true, split_windows);
  const std::map<std::string, Ids> expected = drain(*single.engine, [&] {
    for (const RequestSpec& s : crowd()) EXPECT_TRUE(single.engine->add_request(s).ok());
    return std::map<std::string, Ids>{};
  }());

  Node prefill(model, 64, kv_dtype, false, true, split_windows);  // chunked prefill: blocks leave as chunks finish
  Node decode(model, 2048, kv_dtype, false, true, split_windows);
  const std::map<std::string, Ids> got = disaggregated(prefill, decode, crowd());
  for (const RequestSpec& s : crowd()) {
    ASSERT_EQ(got.at(s.id).size(), 24u) << s.id;
    EXPECT_EQ(got.at(s.id), expected.at(s.id)) << s.id;
  }
  EXPECT_EQ(decode.engine->stats().num_kv_imports, 6);
  EXPECT_EQ(decode.engine->stats().num_kv_fallbacks, 0);
  EXPECT_EQ(prefill.engine->stats().num_kv_exports, 6);
  EXPECT_EQ(decode.engine->stats().kv_usage, 0.0);
  EXPECT_EQ(prefill.engine->stats().kv_usage, 0.0);
}

TEST(RemotePrefillTest, Stories260kDisaggregatedGreedyEqualsOneEngine) {
  auto model = test_util::load_stories260k();
  expect_disaggregated_matches_one_engine(*model);
}

TEST(RemotePrefillTest, RandomModelDisaggregatedGreedyEqualsOneEngine) {
  auto model = test_util::random_tiny(/*seed=*/5);
  expect_disaggregated_matches_one_engine(*model);
}

// A quantized cache crosses as its stored bytes: the decode engine continues exactly as one
// engine with that cache would (f16 on stories260K's heads of 8; q8_0 on heads of 32).
TEST(RemotePrefillTest, QuantizedKvCrossesAsStoredBytes) {
  auto stories = test_util::load_stories260k();
  expect_disaggregated_matches_one_engine(*stories, DType::kF16);
  model::ModelConfig config = *model::named_shape("tiny");
  config.n_heads = 2, config.n_kv_heads = 1, config.head_dim = config.dim / config.n_heads;
  model::LlamaModel heads32(config, model::random_weights(config, 9));
  expect_disaggregated_matches_one_engine(heads32, DType::kQ8_0);
}

// Sliding-window layers kept apart (a split cache) on both engines: windowed layers' blocks
// cross into the window table, the prefill engine releases blocks that left the window between
// its 64-token chunks, and the decode engine continues exactly as one engine (prompts up to 200
// tokens, windows of 24). Gemma 2-style (layers 0 and 2 windowed, both tables) and Mistral-style
// (every layer windowed: no full table).
TEST(RemotePrefillTest, SplitWindowCachesCrossBothTables) {
  for (int pattern : {2, 0}) {
    SCOPED_TRACE(pattern);
    model::ModelConfig config = *model::named_shape("tiny");
    config.n_layers = 4, config.sliding_window = 24, config.sliding_pattern = pattern;
    model::LlamaModel model(config, model::random_weights(config, 13));
    expect_disaggregated_matches_one_engine(model, DType::kF32, /*split_windows=*/true);
  }
}

TEST(RemotePrefillTest, PrefixCacheHitsOnEitherSideKeepTheOutputAndSkipCachedBlocks) {
  auto model = test_util::load_stories260k();
  const Ids prefix = prompt_of(160, 3);  // 10 blocks
  Ids long_a = prefix, long_b = prefix;
  long_a.insert(long_a.end(), {11, 12, 13, 14, 15});
  long_b.insert(long_b.end(), {21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39});
  Node single(model.operator*(), 2048);
  for (const RequestSpec& s : {RequestSpec{"b", long_b, greedy(20)}}) ASSERT_TRUE(single.engine->add_request(s).ok());
  const Ids expected = drain(*single.engine)["b"];

  // The decode side holds the prefix: only the blocks after it cross.
  Node prefill(*model, 2048);
  Node decode(*model, 2048);
  drain(*decode.engine, [&] {
    EXPECT_TRUE(decode.engine->add_request({"warm", long_a, greedy(2)}).ok());
    return std::map<std::string, Ids>{};
  }());
  auto import = std::make_shared<KvImport>(kLeaseNs);
  RequestSpec d{"b", long_b, greedy(20)};
  d.kv_import = import;
  ASSERT_TRUE(decode.engine->add_request(d).ok());
  const auto reservation = import->wait_reserved();
  ASSERT_TRUE(reservation);
  EXPECT_EQ(reservation->num_cached_tokens, 160);
  EXPECT_EQ(reservation->num_blocks, 12);  // 179 tokens
  auto export_ticket = std::make_shared<KvExport>(reservation->num_cached_tokens / kBlockSize);
  ASSERT_TRUE(prefill.engine->add_request({"p", long_b, greedy(1), 0, 0, nullptr, export_ticket}).ok());
  int sent = 0;
  while (prefill.engine->has_unfinished()) {
    ASSERT_TRUE(prefill.engine->step().ok());
    while (auto item = export_ticket->next(0)) {
      if (item->block) {
        ++sent;
        EXPECT_GE(item->block->block_idx, 10);
        const size_t bytes = static_cast<size_t>(decode.engine->kv_layout().block_bytes());
        const std::byte* k = item->block->data.data();
        ASSERT_TRUE(import->write_block(item->block->block_idx, item->block->layer, {k, bytes}, {k + bytes, bytes}));
      } else if (item->done) {
        import->complete(*item->done);
      }
    }
  }
  EXPECT_EQ(sent, 2 * decode.engine->kv_layout().n_layers);  // two blocks, one frame per layer
  EXPECT_EQ(drain(*decode.engine)["b"], expected);

  // Now the prefill side holds the prefix (from "p") and the decode side is cold.
  Node cold(*model, 2048);
  std::vector<RequestSpec> again = {{"b", long_b, greedy(20)}};
  EXPECT_EQ(disaggregated(prefill, cold, again)["b"], expected);
  EXPECT_GE(prefill.engine->stats().prefix_cache_hit_tokens, 176);
}

TEST(RemotePrefillTest, TransferThatDiesHalfWayFallsBackToLocalPrefillWithTheSameOutput) {
  auto model = test_util::load_stories260k();
  Node single(*model, 2048);
  for (const RequestSpec& s : crowd()) ASSERT_TRUE(single.engine->add_request(s).ok());
  const std::map<std::string, Ids> expected = drain(*single.engine);

  Node prefill(*model, 64);
  Node decode(*model, 2048);
  // Twelve frames: at most two whole blocks of stories260K's five layers, and the start of a
  // third pass's layers.
  std::vector<Transfer> transfers;
  const std::map<std::string, Ids> got = disaggregated(prefill, decode, crowd(), /*max_frames=*/12, &transfers);
  for (const RequestSpec& s : crowd()) EXPECT_EQ(got.at(s.id), expected.at(s.id)) << s.id;
  // "short" has one block, which crosses whole (5 frames) with its first token; the rest fall back.
  EXPECT_EQ(decode.engine->stats().num_kv_fallbacks, 5);
  EXPECT_EQ(decode.engine->stats().kv_usage, 0.0);
  // The leading blocks whose every layer arrived were kept as prefix-cache entries for the
  // local prefill; a block with only some layers was not.
  int whole_tokens = 0, partial = 0;
  for (size_t i = 0; i + 1 < transfers.size(); ++i) {
    const int full_blocks = static_cast<int>(crowd()[i].prompt.size()) / kBlockSize;
    const int whole = std::min(whole_blocks(transfers[i], 0, 5), full_blocks);
    whole_tokens += whole * kBlockSize;
    partial += static_cast<int>(transfers[i].layers_arrived.size()) - whole;
  }
  EXPECT_GT(whole_tokens, 0);
  EXPECT_GT(partial, 0);
  EXPECT_EQ(decode.engine->stats().prefix_cache_hit_tokens, whole_tokens);
}

TEST(RemotePrefillTest, ExpiredLeaseReleasesTheBlocksAndPrefillsLocally) {
  auto model = test_util::load_stories260k();
  Node decode(*model, 2048);
  auto import = std::make_shared<KvImport>(decode.clock.now_ns() + kLeaseNs);
  RequestSpec d{"r", prompt_of(100, 1), greedy(8)};
  d.kv_import = import;
  ASSERT_TRUE(decode.engine->add_request(d).ok());
  ASSERT_TRUE(decode.engine->step().ok());
  EXPECT_GT(decode.engine->stats().kv_usage, 0.0);  // the lease holds 7 blocks
  EXPECT_EQ(decode.engine->num_importing(), 1);
  decode.clock.advance_ns(kLeaseNs);
  const std::map<std::string, Ids> got = drain(*decode.engine);
  EXPECT_EQ(got.at("r").size(), 8u);
  EXPECT_EQ(import->state(), KvImport::State::kCancelled);
  std::vector<std::byte> k(static_cast<size_t>(decode.engine->kv_layout().block_bytes()));
  EXPECT_FALSE(import->write_block(0, 0, k, k));  // a late writer touches nothing
  EXPECT_EQ(decode.engine->stats().num_kv_fallbacks, 1);
  EXPECT_EQ(decode.engine->stats().kv_usage, 0.0);
}

TEST(RemotePrefillTest, AbortDuringTheTransferReleasesTheLease) {
  auto model = test_util::load_stories260k();
  Node decode(*model, 2048);
  auto import = std::make_shared<KvImport>(kLeaseNs);
  RequestSpec d{"r", prompt_of(100, 1), greedy(8)};
  d.kv_import = import;
  ASSERT_TRUE(decode.engine->add_request(d).ok());
  ASSERT_TRUE(decode.engine->abort("r").ok());
  auto outputs = decode.engine->step();
  ASSERT_TRUE(outputs.ok());
  ASSERT_EQ(outputs->size(), 1u);
  EXPECT_EQ((*outputs)[0].finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(decode.engine->has_unfinished());
  EXPECT_EQ(decode.engine->stats().kv_usage, 0.0);
}

TEST(RemotePrefillTest, RefusedRequestCancelsItsImportSoNoTransferWaitsForIt) {
  auto model = test_util::load_stories260k();
  Node decode(*model, 2048);
  auto import = std::make_shared<KvImport>(kLeaseNs);
  RequestSpec d{"r", {1, 99999}, greedy(8)};
  d.kv_import = import;
  EXPECT_EQ(decode.engine->add_request(d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(import->state(), KvImport::State::kCancelled);
  EXPECT_FALSE(import->wait_reserved().has_value());
  EXPECT_FALSE(decode.engine->has_unfinished());
}

TEST(RemotePrefillTest, HandshakeRefusesAMismatchedPeerNamingTheField) {
  KvLayout a;
  a.model_fingerprint = "xxh3:1:10";
  a.block_size = 16;
  a.n_layers = 5;
  a.n_kv_heads = 4;
  a.head_dim = 8;
  KvLayout b = a;
  EXPECT_TRUE(check_compatible(a, b).ok());
  b.block_size = 32;
  EXPECT_EQ(check_compatible(a, b).message(),
            "incompatible KV transfer peer: the block size is 16 on the prefill worker but 32 on the decode worker; "
            "pass the same --block-size to both workers");
  b = a;
  b.model_fingerprint = "xxh3:2:10";
  EXPECT_EQ(check_compatible(a, b).message(),
            "incompatible KV transfer peer: the model is xxh3:1:10 on the prefill worker but xxh3:2:10 on the decode "
            "worker; serve the same model file on the prefill and decode workers");
  b = a;
  b.dtype = "q8_0";
  EXPECT_EQ(check_compatible(a, b).message(),
            "incompatible KV transfer peer: the KV dtype is f32 on the prefill worker but q8_0 on the decode worker; "
            "pass the same --kv-dtype to both workers");
}

// The "pushes each layer's KV blocks as they are produced": on stories260K, a 100-token
// prompt prefilled in chunks of 64 tokens. In each pass the layer hook fires once per layer, in
// order; when layer L's hook returns, layer L of every block the pass completes is already
// queued for the transfer thread (with the bytes the cache ends the pass with), while layer
// L + 1 of those blocks has not been computed yet. Nothing else is queued after the pass but
// the first token.
TEST(RemotePrefillTest, EachLayersBlocksAreQueuedWhileLaterLayersAreStillComputing) {
  auto model = test_util::load_stories260k();
  const int n_layers = model->config().n_layers;
  Node prefill(*model, 64, DType::kF32, /*watch_layers=*/true);
  auto export_ticket = std::make_shared<KvExport>(0);
  prefill.watch.watched = export_ticket.get();
  RequestSpec p{"p", prompt_of(100, 4), greedy(1)};
  p.kv_export = export_ticket;
  ASSERT_TRUE(prefill.engine->add_request(p).ok());
  const model::KvCache& memory = prefill.runner.kv_cache();
  const size_t bytes = static_cast<size_t>(memory.shape().block_size * memory.shape().slot_bytes());

  // Pass 1: tokens 0..63 fill blocks 0..3; pass 2: tokens 64..99 fill blocks 4..5 and the
  // partial block 6, and sample.
  const std::vector<std::pair<int, int>> passes = {{0, 4}, {4, 7}};
  for (const auto& [first_block, end_block] : passes) {
    prefill.watch.hooks.clear();
    ASSERT_TRUE(prefill.engine->step().ok());
    ASSERT_EQ(static_cast<int>(prefill.watch.hooks.size()), n_layers);
    for (int layer = 0; layer < n_layers; ++layer) {
      const LayerWatchRunner::Hook& h = prefill.watch.hooks[static_cast<size_t>(layer)];
      EXPECT_EQ(h.layer, layer);
      ASSERT_EQ(static_cast<int>(h.queued.size()), end_block - first_block) << "layer " << layer;
      for (int i = 0; i < end_block - first_block; ++i) {
        const KvExport::Block& b = h.queued[static_cast<size_t>(i)];
        EXPECT_EQ(b.block_idx, first_block + i);
        EXPECT_EQ(b.layer, layer);
      }
      if (layer + 1 < n_layers) {
        const std::byte* k_after = memory.k(layer + 1, int64_t{h.block_ids.front()} * kBlockSize);
        EXPECT_NE(std::memcmp(h.next_layer_k.data(), k_after, bytes), 0)
            << "layer " << layer + 1 << " was already written when layer " << layer << " was queued";
      }
    }
    // The queued bytes are what the cache holds once the pass is over (a finished request's
    // blocks keep their content; nothing else runs here).
    for (const LayerWatchRunner::Hook& h : prefill.watch.hooks) {
      for (size_t i = 0; i < h.queued.size(); ++i) {
        const KvExport::Block& b = h.queued[i];
        const int64_t slot = int64_t{h.block_ids[i]} * kBlockSize;
        ASSERT_EQ(b.data.size(), 2 * bytes);
        EXPECT_EQ(std::memcmp(b.data.data(), memory.k(b.layer, slot), bytes), 0) << "K " << b.block_idx;
        EXPECT_EQ(std::memcmp(b.data.data() + bytes, memory.v(b.layer, slot), bytes), 0) << "V " << b.block_idx;
      }
    }
  }
  // After the passes: only DONE (the transfer thread stops reading there).
  std::optional<KvExport::Item> last = export_ticket->next(0);
  ASSERT_TRUE(last.has_value());
  EXPECT_TRUE(last->done.has_value());
  EXPECT_FALSE(last->block.has_value());
  EXPECT_EQ(prefill.watch.num_forwards, 2);
}

// A runner that never calls the layer hook (a GPU runner, a test runner) still exports every
// layer of every block, after each forward pass, and the decode engine's output is one engine's.
TEST(RemotePrefillTest, RunnerWithoutTheLayerHookStillSendsEveryLayerAfterThePass) {
  auto model = test_util::load_stories260k();
  Node single(*model, 2048);
  for (const RequestSpec& s : crowd()) ASSERT_TRUE(single.engine->add_request(s).ok());
  const std::map<std::string, Ids> expected = drain(*single.engine);

  Node prefill(*model, 64, DType::kF32, /*watch_layers=*/true, /*call_hook=*/false);
  Node decode(*model, 2048);
  const std::map<std::string, Ids> got = disaggregated(prefill, decode, crowd());
  for (const RequestSpec& s : crowd()) EXPECT_EQ(got.at(s.id), expected.at(s.id)) << s.id;
  EXPECT_TRUE(prefill.watch.hooks.empty());
  EXPECT_GT(prefill.watch.num_forwards, 0);
  EXPECT_EQ(decode.engine->stats().num_kv_imports, 6);
  EXPECT_EQ(decode.engine->stats().num_kv_fallbacks, 0);
}

}  // namespace
}  // namespace koi::engine
