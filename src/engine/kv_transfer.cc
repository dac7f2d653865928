#include "engine/kv_transfer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <xxhash.h>

#include "base/check.h"
#include "base/file.h"

namespace koi::engine {

KvLayout kv_layout(const model::KvCacheShape& shape, std::string model_fingerprint) {
  KvLayout l;
  l.model_fingerprint = std::move(model_fingerprint);
  l.block_size = shape.block_size;
  l.n_layers = shape.n_layers;
  l.n_kv_heads = shape.n_kv_heads;
  l.head_dim = shape.head_dim;
  l.dtype = std::string(dtype_name(shape.dtype));
  for (bool w : shape.windowed) l.windowed.push_back(w ? '1' : '0');
  l.window = shape.split() ? shape.window : 0;
  return l;
}

int64_t KvLayout::block_bytes() const {
  const std::optional<DType> t = dtype_from_name(dtype);
  KOI_CHECK(t.has_value());
  return dtype_row_bytes(*t, int64_t{block_size} * n_kv_heads * head_dim);
}

namespace {

template <typename T>
Status differs(const char* field, const T& self, const T& peer, const char* hint) {  // self: the prefill worker
  return Status::failed_precondition(fmt::format(
      "incompatible KV transfer peer: {} is {} on the prefill worker but {} on the decode worker; {}", field, self, peer,
      hint));
}

}  // namespace

Status check_compatible(const KvLayout& self, const KvLayout& peer) {  // self: the prefill worker, peer: the decoder
  if (self.model_fingerprint != peer.model_fingerprint) {
    return differs("the model", self.model_fingerprint, peer.model_fingerprint,
                   "serve the same model file on the prefill and decode workers");
  }
  if (self.dtype != peer.dtype) {
    return differs("the KV dtype", self.dtype, peer.dtype, "pass the same --kv-dtype to both workers");
  }
  if (self.block_size != peer.block_size) {
    return differs("the block size", self.block_size, peer.block_size, "pass the same --block-size to both workers");
  }
  const char* layout_hint = "the KV layouts differ; serve the same model on both";
  if (self.n_layers != peer.n_layers) return differs("the layer count", self.n_layers, peer.n_layers, layout_hint);
  if (self.n_kv_heads != peer.n_kv_heads) return differs("n_kv_heads", self.n_kv_heads, peer.n_kv_heads, layout_hint);
  if (self.head_dim != peer.head_dim) return differs("head_dim", self.head_dim, peer.head_dim, layout_hint);
  if (self.windowed != peer.windowed || self.window != peer.window) {
    auto describe = [](const KvLayout& l) {
      return l.windowed.empty() ? std::string("one table for every layer")
                                : fmt::format("window {} on layers {}", l.window, l.windowed);
    };
    return differs("the sliding-window split", describe(self), describe(peer),
                   "serve the same model with the same koi release on both");
  }
  return ok_status();
}

Result<std::string> model_fingerprint(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      if (entry.is_regular_file()) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  uint64_t total = 0;
  for (const std::string& file : files) {
    auto mapped = MappedFile::open(file);
    if (!mapped.ok()) {
      XXH3_freeState(state);
      return mapped.status().with_prefix("fingerprinting the model");
    }
    XXH3_64bits_update(state, mapped->data(), mapped->size());
    total += mapped->size();
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return fmt::format("xxh3:{:016x}:{}", hash, total);
}

// ---- KvImport ----

void KvImport::reserve(std::vector<int32_t> block_ids, std::vector<int32_t> window_block_ids, int num_cached_tokens,
                       model::KvCache* memory) {
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kWaiting) return;
    // A split cache with only windowed layers has no full table.
    const size_t num_blocks = std::max(block_ids.size(), window_block_ids.size());
    layers_done_.assign(num_blocks, 0);
    layer_written_.assign(num_blocks * static_cast<size_t>(memory->shape().n_layers), false);
    block_ids_ = std::move(block_ids);
    window_block_ids_ = std::move(window_block_ids);
    num_cached_tokens_ = num_cached_tokens;
    memory_ = memory;
    n_layers_ = memory->shape().n_layers;
    // Blocks this engine had cached are never sent: they count as arrived.
    const size_t num_cached_blocks = static_cast<size_t>(num_cached_tokens / memory->shape().block_size);
    std::fill(layers_done_.begin(), layers_done_.begin() + std::min(num_cached_blocks, layers_done_.size()), n_layers_);
    state_ = State::kReserved;
  }
  cv_.notify_all();
}

std::optional<KvImport::Reservation> KvImport::wait_reserved() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return state_ != State::kWaiting; });
  if (state_ != State::kReserved) return std::nullopt;
  return Reservation{static_cast<int>(layers_done_.size()), num_cached_tokens_};
}

bool KvImport::write_block(int block_idx, int layer, std::span<const std::byte> k, std::span<const std::byte> v) {
  std::lock_guard lock(mu_);
  if (state_ != State::kReserved || block_idx < 0) return false;
  const model::KvCacheShape& shape = memory_->shape();
  const size_t bytes = static_cast<size_t>(shape.block_size * shape.slot_bytes());
  if (layer < 0 || layer >= shape.n_layers || k.size() != bytes || v.size() != bytes) return false;
  const std::vector<int32_t>& table = shape.split() && shape.windowed[layer] ? window_block_ids_ : block_ids_;
  if (block_idx >= static_cast<int>(table.size()) || table[block_idx] < 0) return false;  // < 0: released
  const int64_t slot = int64_t{table[block_idx]} * shape.block_size;
  std::memcpy(memory_->k(layer, slot), k.data(), bytes);
  std::memcpy(memory_->v(layer, slot), v.data(), bytes);
  const size_t written = static_cast<size_t>(block_idx) * static_cast<size_t>(n_layers_) + static_cast<size_t>(layer);
  if (!layer_written_[written]) ++layers_done_[block_idx];
  layer_written_[written] = true;
  return true;
}

void KvImport::complete(PrefillResult result) {
  std::lock_guard lock(mu_);
  if (state_ != State::kReserved) return;
  result_ = std::move(result);
  state_ = State::kComplete;
}

void KvImport::fail(std::string reason) {
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kWaiting && state_ != State::kReserved) return;
    failure_ = std::move(reason);
    state_ = State::kFailed;
  }
  cv_.notify_all();
}

void KvImport::cancel() {
  std::function<void()> hook;
  {
    std::lock_guard lock(mu_);
    if (state_ == State::kWaiting || state_ == State::kReserved) state_ = State::kCancelled;
    memory_ = nullptr;
    hook = std::move(cancel_hook_);
  }
  cv_.notify_all();
  if (hook) hook();
}

void KvImport::on_cancel(std::function<void()> hook) {
  std::lock_guard lock(mu_);
  cancel_hook_ = std::move(hook);
}

KvImport::State KvImport::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

std::string KvImport::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

PrefillResult KvImport::result() const {
  std::lock_guard lock(mu_);
  return result_;
}

int KvImport::num_complete_blocks() const {
  std::lock_guard lock(mu_);
  // Still answers after cancel(): the count is of what was written before it.
  int n = 0;
  while (n < static_cast<int>(layers_done_.size()) && layers_done_[n] >= n_layers_) ++n;
  return n;
}

// ---- KvExport ----

bool KvExport::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

void KvExport::push(Item item, bool unless_cancelled) {
  {
    std::lock_guard lock(mu_);
    if (unless_cancelled && cancelled_) return;
    items_.push_back(std::move(item));
  }
  cv_.notify_all();
}

void KvExport::push_block(Block block) {
  Item item;
  item.block = std::move(block);
  push(std::move(item), /*unless_cancelled=*/true);
}

void KvExport::finish(PrefillResult result) {
  Item item;
  item.done = std::move(result);
  push(std::move(item), /*unless_cancelled=*/false);
}

void KvExport::fail(Status error) {
  Item item;
  item.error = std::move(error);
  push(std::move(item), /*unless_cancelled=*/false);
}

std::optional<KvExport::Item> KvExport::next(int timeout_ms) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !items_.empty(); })) return std::nullopt;
  Item item = std::move(items_.front());
  items_.pop_front();
  return item;
}

void KvExport::cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  items_.clear();
}

}  // namespace koi::engine
