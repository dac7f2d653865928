// The Engine's half of prefill/decode disaggregation (engine/kv_transfer.h): requests whose
// prompt KV is imported from another engine (decode side) and requests whose prompt KV is
// copied out as it is computed (prefill side). Member functions of Engine, kept apart from
// the step loop in engine.cc.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "base/check.h"
#include "base/logging.h"
#include "engine/engine.h"

namespace koi::engine {

KvLayout Engine::kv_layout() const {
  model::KvCache* memory = runner_.kv_memory();
  return memory ? engine::kv_layout(memory->shape(), "") : KvLayout{};
}

void Engine::add_import(std::unique_ptr<Request> request, std::shared_ptr<KvImport> ticket) {
  Request& r = *request;
  model::KvCache* memory = can_transfer_kv() ? runner_.kv_memory() : nullptr;
  const ComputedBlocks computed = memory ? kv_.get_computed_blocks(r) : ComputedBlocks{};
  if (!memory || !kv_.allocate_slots(r, r.num_tokens() - computed.num_tokens, computed)) {
    // No lease without room (or without shareable KV memory): prefill here from the start.
    ticket->cancel();
    ++counters_.num_kv_fallbacks;
    log::info("request '{}': no KV blocks free for a transfer; prefilling locally", r.id);
    KOI_CHECK(scheduler_.add(std::move(request)).ok());
    return;
  }
  ticket->reserve(kv_.block_table(r), kv_.window_block_table(r), computed.num_tokens, memory);
  const std::string id = r.id;
  imports_.emplace(id, Import{std::move(request), std::move(ticket)});
}

void Engine::poll_imports() {
  const int64_t now = clock_.now_ns();
  for (auto it = imports_.begin(); it != imports_.end();) {
    Import& import = it->second;
    const KvImport::State state = import.ticket->state();
    if (state == KvImport::State::kComplete) {
      commit_import(import);
    } else if (state == KvImport::State::kFailed || state == KvImport::State::kCancelled) {
      fall_back(import, import.ticket->failure());
    } else if (now >= import.ticket->deadline_ns()) {
      fall_back(import, "the transfer's lease ran out (--kv-transfer-timeout)");
    } else {
      ++it;
      continue;
    }
    it = imports_.erase(it);
  }
}

void Engine::commit_import(Import& import) {
  const PrefillResult result = import.ticket->result();
  if (result.first.token < 0 || result.first.token >= runner_.n_vocab()) {
    fall_back(import, fmt::format("the peer sent first token {}, outside the vocabulary", result.first.token));
    return;
  }
  Request& r = *import.request;
  r.num_computed_tokens = r.num_prompt_tokens;
  // Window blocks the next token does not read go now, before the prompt's blocks are cached:
  // the peer sends none it had released itself.
  kv_.release_out_of_window(r, r.num_prompt_tokens);
  r.rng.set_state(result.rng);
  pending_.push_back(scheduler_.add_prefilled(std::move(import.request), result.first));
  ++counters_.num_generated_tokens;
  ++counters_.num_kv_imports;
}

void Engine::fall_back(Import& import, const std::string& why) {
  import.ticket->cancel();  // no write reaches the blocks after this
  Request& r = *import.request;
  log::warn("request '{}': KV transfer failed ({}); prefilling locally", r.id, why);
  // Whole blocks that arrived stay as prefix-cache entries: the local prefill starts after them.
  const int full_prompt_blocks = r.num_prompt_tokens / kv_.block_size();
  r.num_computed_tokens = std::min(import.ticket->num_complete_blocks(), full_prompt_blocks) * kv_.block_size();
  kv_.cache_full_blocks(r);
  kv_.free(r);
  r.num_computed_tokens = 0;
  ++counters_.num_kv_fallbacks;
  KOI_CHECK(scheduler_.add(std::move(import.request)).ok());
}

bool Engine::abort_import(const std::string& request_id) {
  auto it = imports_.find(request_id);
  if (it == imports_.end()) return false;
  it->second.ticket->cancel();
  kv_.free(*it->second.request);
  RequestOutput out;
  out.request_id = request_id;
  out.finished = true;
  out.finish_reason = FinishReason::kAbort;
  pending_.push_back(std::move(out));
  imports_.erase(it);
  return true;
}

void Engine::plan_exports(const SchedulerOutput& plan) {
  step_exports_.clear();
  batch_.on_layer_kv_written = nullptr;
  if (exports_.empty()) return;
  for (const ScheduledRequest& s : plan.scheduled) {
    const Request& r = *s.request;
    auto it = exports_.find(r.id);
    if (it == exports_.end() || it->second->cancelled()) continue;
    KvExport& ticket = *it->second;
    // The pass that reaches the end of the prompt also completes its last, partial block.
    const int computed = r.num_computed_tokens + s.num_tokens;
    const int ready = computed >= r.num_prompt_tokens ? kv_.blocks_for_tokens(r.num_prompt_tokens)
                                                      : computed / kv_.block_size();
    ticket.next_block = std::max(ticket.next_block, ticket.skip_blocks());
    if (ticket.next_block < ready) step_exports_.push_back({&r, &ticket, ticket.next_block, ready, 0});
  }
  if (!step_exports_.empty()) batch_.on_layer_kv_written = [this](int layer) { export_layer(layer); };
}

void Engine::export_layer(int layer) {
  for (LayerExport& e : step_exports_) {
    if (e.layers_sent != layer) continue;  // in layer order, each layer once
    for (int block_idx = e.first_block; block_idx < e.end_block; ++block_idx) {
      copy_layer(*e.request, block_idx, layer, *e.ticket);
    }
    ++e.layers_sent;
  }
}

void Engine::export_kv(const SchedulerOutput& plan, const std::vector<std::vector<SampledToken>>& new_tokens) {
  if (exports_.empty()) return;
  batch_.on_layer_kv_written = nullptr;
  for (LayerExport& e : step_exports_) {
    while (e.layers_sent < runner_.kv_memory()->shape().n_layers) export_layer(e.layers_sent);
    e.ticket->next_block = e.end_block;
  }
  step_exports_.clear();
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    auto it = exports_.find(plan.scheduled[i].request->id);
    if (it == exports_.end() || it->second->cancelled() || new_tokens[i].empty()) continue;
    it->second->finish({new_tokens[i].front(), plan.scheduled[i].request->rng.state()});
    ++counters_.num_kv_exports;
  }
}

void Engine::copy_layer(const Request& r, int block_idx, int layer, KvExport& ticket) {
  model::KvCache& memory = *runner_.kv_memory();
  const model::KvCacheShape& shape = memory.shape();
  const size_t bytes = static_cast<size_t>(shape.block_size * shape.slot_bytes());
  // A split cache keeps sliding-window layers in the window table, whose blocks before the
  // window are released (this engine's prefix-cache hits): the decoder never reads those.
  const std::vector<int32_t>& table = shape.split() && shape.windowed[layer] ? kv_.window_block_table(r)
                                                                              : kv_.block_table(r);
  if (table[block_idx] == KvCacheManager::kReleased) return;
  const int64_t slot = int64_t{table[block_idx]} * shape.block_size;
  KvExport::Block block;
  block.block_idx = block_idx;
  block.layer = layer;
  block.data.resize(2 * bytes);
  std::memcpy(block.data.data(), memory.k(layer, slot), bytes);
  std::memcpy(block.data.data() + bytes, memory.v(layer, slot), bytes);
  ticket.push_block(std::move(block));
}

void Engine::drop_finished_exports() {
  if (exports_.empty()) return;
  for (auto it = exports_.begin(); it != exports_.end();) {
    if (scheduler_.find(it->first)) {
      ++it;
      continue;
    }
    // Ended: finished after its first token (finish() came first, so this is never read), or
    // aborted or failed before it.
    it->second->fail(Status::cancelled("the prefill request ended before its first token"));
    it = exports_.erase(it);
  }
}

}  // namespace koi::engine
