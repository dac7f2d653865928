// Prefill/decode disaggregation inside the engine (kv_transfer.h, remote_prefill.cc): a
// prefill engine exports a prompt's KV, a decode engine imports it, and the decode engine's
// greedy output must equal one engine's, with prefix-cache hits on either side, with many
// requests at once, and when the transfer fails or its lease runs out (local fallback).
// The bytes move in-process here; tests/pd_disagg.py moves them over TCP between processes.
#include <gtest/gtest.h>

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

// One engine over one model instance (its own KV memory), with its own fake clock.
struct Node {
  Node(model::LlamaModel& model, int budget, DType kv_dtype = DType::kF32)
      : runner(model, kBlocks, kBlockSize, 1, kv_dtype) {
    EngineConfig c;
    c.block_size = kBlockSize;
    c.num_kv_blocks = kBlocks;
    c.max_num_batched_tokens = budget;
    c.max_num_seqs = 16;
    engine = std::make_unique<Engine>(c, runner, clock);
  }
  FakeClock clock;
  LlamaRunner runner;
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
  int blocks_sent = 0;
};

// Moves everything the export has produced so far into the import. After `max_blocks`
// blocks the transfer is dead (the prefill worker went away): nothing more crosses.
void pump(Transfer& t, const KvLayout& layout, int max_blocks) {
  while (auto item = t.export_ticket->next(0)) {
    if (t.blocks_sent >= max_blocks) return;
    if (item->block) {
      ++t.blocks_sent;
      const size_t bytes = static_cast<size_t>(layout.block_bytes());
      for (int layer = 0; layer < layout.n_layers; ++layer) {
        const std::byte* k = item->block->data.data() + 2 * bytes * static_cast<size_t>(layer);
        EXPECT_TRUE(t.import->write_block(item->block->block_idx, layer, {k, bytes}, {k + bytes, bytes}));
      }
    } else if (item->done) {
      t.import->complete(*item->done);
    }
  }
}

// Submits every spec to the decode engine with an import, then prefills each on the prefill
// engine (all at once) and pumps the KV across, at most max_blocks blocks per request.
std::map<std::string, Ids> disaggregated(Node& prefill, Node& decode, const std::vector<RequestSpec>& specs,
                                         int max_blocks = 1 << 30) {
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
    transfers.push_back({d.kv_import, p.kv_export, 0});
  }
  const KvLayout layout = decode.engine->kv_layout();
  while (prefill.engine->has_unfinished()) {
    EXPECT_TRUE(prefill.engine->step().ok());
    for (Transfer& t : transfers) pump(t, layout, max_blocks);
  }
  for (Transfer& t : transfers) {
    if (t.import->state() == KvImport::State::kReserved) t.import->fail("the prefill worker went away");
  }
  return drain(*decode.engine);
}

std::vector<RequestSpec> crowd() {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 4; ++i) specs.push_back({"r" + std::to_string(i), prompt_of(40 + 53 * i, i), greedy(24)});
  specs.push_back({"aligned", prompt_of(64, 7), greedy(24)});  // whole blocks only
  specs.push_back({"short", prompt_of(3, 8), greedy(24)});     // less than a block
  return specs;
}

void expect_disaggregated_matches_one_engine(model::LlamaModel& model, DType kv_dtype = DType::kF32) {
  Node single(model, 2048, kv_dtype);
  const std::map<std::string, Ids> expected = drain(*single.engine, [&] {
    for (const RequestSpec& s : crowd()) EXPECT_TRUE(single.engine->add_request(s).ok());
    return std::map<std::string, Ids>{};
  }());

  Node prefill(model, 64, kv_dtype);  // chunked prefill: blocks leave as chunks finish
  Node decode(model, 2048, kv_dtype);
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
        for (int layer = 0; layer < decode.engine->kv_layout().n_layers; ++layer) {
          const std::byte* k = item->block->data.data() + 2 * bytes * static_cast<size_t>(layer);
          ASSERT_TRUE(import->write_block(item->block->block_idx, layer, {k, bytes}, {k + bytes, bytes}));
        }
      } else if (item->done) {
        import->complete(*item->done);
      }
    }
  }
  EXPECT_EQ(sent, 2);
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
  const std::map<std::string, Ids> got = disaggregated(prefill, decode, crowd(), /*max_blocks=*/2);
  for (const RequestSpec& s : crowd()) EXPECT_EQ(got.at(s.id), expected.at(s.id)) << s.id;
  // "short" has one block, which crosses whole with its first token; the rest fall back.
  EXPECT_EQ(decode.engine->stats().num_kv_fallbacks, 5);
  EXPECT_EQ(decode.engine->stats().kv_usage, 0.0);
  // The two blocks that arrived were kept as prefix-cache entries for the local prefill.
  EXPECT_EQ(decode.engine->stats().prefix_cache_hit_tokens, 5 * 2 * kBlockSize);
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

}  // namespace
}  // namespace koi::engine
