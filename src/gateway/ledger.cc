#include "gateway/usage_store.h"

#include <boost/json.hpp>

#include "base/logging.h"

namespace koi::gateway {

std::string models_to_json(const std::vector<std::string>& models) {
  boost::json::array a;
  for (const std::string& m : models) a.emplace_back(m);
  return boost::json::serialize(a);
}

Result<std::vector<std::string>> models_from_json(const std::string& text) {
  boost::json::error_code ec;
  const boost::json::value v = boost::json::parse(text, ec);
  if (ec || !v.is_array()) return Status::corrupt("allowed models '" + text + "' are not a JSON array");
  std::vector<std::string> out;
  for (const boost::json::value& m : v.as_array()) {
    if (!m.is_string()) return Status::corrupt("allowed models '" + text + "' hold a value that is not a string");
    out.emplace_back(m.as_string());
  }
  return out;
}

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
