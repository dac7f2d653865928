#include "gateway/usage_store.h"

#include "base/logging.h"

namespace koi::gateway {

Ledger::Ledger(std::unique_ptr<UsageStore> store) : store_(std::move(store)), writer_([this] { run(); }) {}

Ledger::~Ledger() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  writer_.join();
}

void Ledger::submit(UsageRecord record, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(record), std::move(done));
  }
  cv_.notify_one();
}

void Ledger::run() {
  for (;;) {
    std::vector<std::pair<UsageRecord, Done>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      batch.swap(queue_);
    }
    std::vector<UsageRecord> records;
    records.reserve(batch.size());
    for (auto& [record, done] : batch) records.push_back(record);
    const Status s = store_->append(records);
    if (!s.ok()) log::error("usage ledger: {} records not written: {}", records.size(), s.message());
    for (auto& [record, done] : batch) {
      if (done) done(s);
    }
  }
}

}  // namespace koi::gateway
