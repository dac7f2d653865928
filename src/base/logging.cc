#include "base/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace koi::log {
namespace {

Level initial_level() {
  Level l = Level::kInfo;
  if (const char* env = std::getenv("KOI_LOG_LEVEL")) parse_level(env, &l);
  return l;
}

std::atomic<Level>& level_ref() {
  static std::atomic<Level> l{initial_level()};
  return l;
}

}  // namespace

void set_level(Level l) { level_ref().store(l, std::memory_order_relaxed); }
Level level() { return level_ref().load(std::memory_order_relaxed); }

bool parse_level(std::string_view text, Level* out) {
  if (text == "debug") *out = Level::kDebug;
  else if (text == "info") *out = Level::kInfo;
  else if (text == "warn") *out = Level::kWarn;
  else if (text == "error") *out = Level::kError;
  else if (text == "off") *out = Level::kOff;
  else return false;
  return true;
}

void write(Level l, std::string_view message) {
  static constexpr const char* kNames[] = {"D", "I", "W", "E", "-"};
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::string line = fmt::format("{} {:02}:{:02}:{:02}.{:03} {}\n", kNames[static_cast<int>(l)],
                                 tm.tm_hour, tm.tm_min, tm.tm_sec, ms, message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace koi::log
