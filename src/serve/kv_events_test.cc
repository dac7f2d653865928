// KvEventLog (kv_events.h): events are numbered from 1, read in batches after a number, a
// reader that fell behind the kept window is told to resynchronise, and the snapshot is the
// set the events add up to.
#include "serve/kv_events.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace koi::serve {
namespace {

namespace json = boost::json;
using engine::KvEvent;

engine::BlockHash h(uint64_t n) { return {n, n + 100}; }

TEST(KvEventLog, NumbersEventsAndResynchronisesAReaderThatFellBehind) {
  KvEventLog log(/*block_size=*/16, /*capacity=*/3);
  log.append({{KvEvent::Kind::kStored, h(1)}, {KvEvent::Kind::kStored, h(2)}});
  json::value first = json::parse(*log.events_json(0));
  EXPECT_EQ(first.at("last").as_int64(), 2);
  ASSERT_EQ(first.at("events").as_array().size(), 2u);
  EXPECT_EQ(first.at("events").as_array()[1].at("hash").as_string(), hash_hex(h(2)));
  EXPECT_EQ(hash_hex(h(2)), "00000000000000660000000000000002");
  EXPECT_EQ(json::parse(*log.events_json(2)).at("events").as_array().size(), 0u);
  EXPECT_EQ(json::parse(*log.events_json(7)).at("last").as_int64(), 2);  // ahead: nothing new
  log.append({{KvEvent::Kind::kRemoved, h(1)}, {KvEvent::Kind::kStored, h(3)}});
  // The log keeps events 2-4 only: a reader at 0 missed event 1.
  EXPECT_FALSE(log.events_json(0).has_value());
  json::value rest = json::parse(*log.events_json(1));
  ASSERT_EQ(rest.at("events").as_array().size(), 3u);
  EXPECT_EQ(rest.at("events").as_array()[1].at("type").as_string(), "removed");
  EXPECT_EQ(rest.at("last").as_int64(), 4);
  json::value snap = json::parse(log.snapshot_json());
  EXPECT_EQ(snap.at("last").as_int64(), 4);
  EXPECT_EQ(snap.at("block_size").as_int64(), 16);
  EXPECT_EQ(snap.at("epoch"), rest.at("epoch"));
  EXPECT_NE(snap.at("epoch"), json::parse(KvEventLog(16).snapshot_json()).at("epoch"));  // a restarted server
  std::set<std::string> hashes;
  for (const auto& v : snap.at("hashes").as_array()) hashes.insert(std::string(v.as_string()));
  EXPECT_EQ(hashes, (std::set<std::string>{hash_hex(h(2)), hash_hex(h(3))}));
}

// The long poll's half in the log: a reader at the newest number is woken once by the next
// append; a reader with events to read, or ahead of the log, is told to answer at once; a
// forgotten waiter is never called.
TEST(KvEventLog, WakesAReaderAtTheNewestNumberOnceOnTheNextAppend) {
  KvEventLog log(/*block_size=*/16);
  int woken_a = 0, woken_b = 0, woken_c = 0;
  const std::optional<uint64_t> a = log.wake_after(0, [&] { ++woken_a; });
  const std::optional<uint64_t> b = log.wake_after(0, [&] { ++woken_b; });
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_NE(*a, *b);
  log.forget(*b);
  log.append({});  // nothing appended: nobody is woken
  EXPECT_EQ(woken_a, 0);
  log.append({{KvEvent::Kind::kStored, h(1)}});
  EXPECT_EQ(woken_a, 1);
  EXPECT_EQ(woken_b, 0);
  log.append({{KvEvent::Kind::kStored, h(2)}});
  EXPECT_EQ(woken_a, 1);  // once
  EXPECT_FALSE(log.wake_after(0, [&] { ++woken_c; }).has_value());  // events 1 and 2 are there
  EXPECT_FALSE(log.wake_after(9, [&] { ++woken_c; }).has_value());  // ahead: a restarted server
  const std::optional<uint64_t> c = log.wake_after(2, [&] { ++woken_c; });
  ASSERT_TRUE(c.has_value());
  log.forget(*a);  // already woken: a no-op
  log.append({{KvEvent::Kind::kRemoved, h(1)}});
  EXPECT_EQ(woken_c, 1);
}

}  // namespace
}  // namespace koi::serve
