#include "engine/lora_pool.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/logging.h"

namespace koi::engine {
namespace {

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

LoraPool::LoraPool(model::ModelConfig model, LoraPoolOptions options)
    : model_(std::move(model)), options_(options) {}

Result<std::shared_ptr<const model::LoraAdapter>> LoraPool::load(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(model::LoraAdapter adapter, model::LoraAdapter::load(path, model_));
  if (adapter.bytes() > options_.memory_bytes) {
    return Status::invalid_argument(fmt::format("{}: the adapter holds {:.1f} MiB of weights, more than the whole "
                                                "LoRA budget of {:.1f} MiB; raise --lora-memory-mib",
                                                path, mib(adapter.bytes()), mib(options_.memory_bytes)));
  }
  return std::make_shared<const model::LoraAdapter>(std::move(adapter));
}

LoraPool::Entry* LoraPool::find(const std::string& name) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; });
  return it == entries_.end() ? nullptr : &*it;
}

int64_t LoraPool::resident_bytes() const {
  int64_t total = 0;
  for (const Entry& e : entries_) total += e.weights ? e.bytes : 0;
  return total;
}

Status LoraPool::make_room(const std::string& name, int64_t bytes) {
  for (;;) {
    int resident = 0;
    for (const Entry& e : entries_) resident += e.weights ? 1 : 0;
    const int64_t used = resident_bytes();
    if (resident < options_.max_loras && used + bytes <= options_.memory_bytes) return ok_status();
    // The least recently used adapter that no request holds (the pool's reference is the only one).
    Entry* victim = nullptr;
    for (Entry& e : entries_) {
      if (e.weights && e.weights.use_count() == 1 && (victim == nullptr || e.last_use < victim->last_use)) victim = &e;
    }
    if (victim == nullptr) {
      return Status::resource_exhausted(fmt::format(
          "no room for LoRA adapter '{}' ({:.1f} MiB): the {} resident adapters ({:.1f} of {:.1f} MiB, --max-loras "
          "{}) all serve requests in flight; retry later, or raise --max-loras or --lora-memory-mib",
          name, mib(bytes), resident, mib(used), mib(options_.memory_bytes), options_.max_loras));
    }
    log::info("LoRA pool: evicting adapter '{}' ({:.1f} MiB) to make room for '{}'", victim->name, mib(victim->bytes),
              name);
    victim->weights.reset();
    ++evictions_;
  }
}

Status LoraPool::add(const std::string& name, const std::string& path) {
  {
    std::lock_guard lock(mu_);
    if (find(name) != nullptr) {
      return Status::already_exists(fmt::format("LoRA adapter '{}' is already loaded; unload it first", name));
    }
  }
  KOI_ASSIGN_OR_RETURN(std::shared_ptr<const model::LoraAdapter> weights, load(path));
  std::lock_guard lock(mu_);
  ++loads_;
  if (find(name) != nullptr) {
    return Status::already_exists(fmt::format("LoRA adapter '{}' is already loaded; unload it first", name));
  }
  Entry e{name, path, next_id_++, weights->rank(), weights->bytes(), ++clock_, nullptr};
  if (make_room(name, e.bytes).ok()) e.weights = std::move(weights);
  log::info("LoRA adapter '{}' from {}: rank {}, {:.2f} MiB{}", name, path, e.rank, mib(e.bytes),
            e.weights ? "" : " (not resident: every resident adapter is in use)");
  entries_.push_back(std::move(e));
  return ok_status();
}

Status LoraPool::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; });
  if (it == entries_.end()) return Status::not_found(fmt::format("LoRA adapter '{}' is not loaded", name));
  entries_.erase(it);
  log::info("LoRA adapter '{}' unloaded", name);
  return ok_status();
}

bool LoraPool::contains(const std::string& name) const {
  std::lock_guard lock(mu_);
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; });
}

Result<AcquiredLora> LoraPool::acquire(const std::string& name) {
  std::string path;
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    Entry* e = find(name);
    if (e == nullptr) return Status::not_found(fmt::format("LoRA adapter '{}' is not loaded", name));
    e->last_use = ++clock_;
    if (e->weights) return AcquiredLora{e->weights, e->id};
    path = e->path;
    id = e->id;
  }
  // Evicted: read it again outside the lock, so other adapters' requests do not wait on the disk.
  KOI_ASSIGN_OR_RETURN(std::shared_ptr<const model::LoraAdapter> weights, load(path));
  std::lock_guard lock(mu_);
  ++loads_;
  Entry* e = find(name);
  if (e == nullptr || e->id != id) {
    return Status::not_found(fmt::format("LoRA adapter '{}' was unloaded while it loaded", name));
  }
  if (!e->weights) {
    KOI_RETURN_IF_ERROR(make_room(name, e->bytes));
    e->weights = std::move(weights);
  }
  return AcquiredLora{e->weights, e->id};
}

std::vector<LoraInfo> LoraPool::list() const {
  std::lock_guard lock(mu_);
  std::vector<LoraInfo> out;
  for (const Entry& e : entries_) out.push_back({e.name, e.path, e.id, e.rank, e.weights != nullptr});
  return out;
}

LoraPoolStats LoraPool::stats() const {
  std::lock_guard lock(mu_);
  LoraPoolStats s;
  s.num_registered = static_cast<int>(entries_.size());
  for (const Entry& e : entries_) s.num_resident += e.weights ? 1 : 0;
  s.resident_bytes = resident_bytes();
  s.loads = loads_;
  s.evictions = evictions_;
  return s;
}

}  // namespace koi::engine
