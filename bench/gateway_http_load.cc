// A closed-loop HTTP load generator for the gateway-overhead benchmark: C keep-alive
// connections each send POST <path> with a small completion body back to back for D seconds
// and record each request's latency. Prints requests/s and p50 / p99 / max latency; non-200
// answers are counted as errors.
//   koi_bench_http_load URL [--connections 16] [--seconds 10] [--threads 1] [--key KEY]
#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/client.h"

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using koi::net::Client;

struct Shared {
  std::mutex mu;
  std::vector<double> latencies_us;
  long errors = 0;
};

// One closed loop: the next request leaves when the last answer is complete. Connections come
// from the client's keep-alive pool, as they do in the gateway's proxy.
asio::awaitable<void> loop(Client& client, koi::net::Url url, std::string key, Clock::time_point end, Shared& shared) {
  std::vector<double> lat;
  long errors = 0;
  while (Clock::now() < end) {
    koi::net::ClientRequest req;
    req.method = "POST";
    req.target = url.target;
    if (!key.empty()) req.headers.emplace_back("authorization", "Bearer " + key);
    req.body = R"({"model":"stories","prompt":"Once upon a time","max_tokens":8})";
    koi::net::Timeouts timeouts;
    const auto t0 = Clock::now();
    auto r = co_await client.call(url.host, url.port, std::move(req), timeouts);
    if (!r.ok() || r->status != 200) {
      ++errors;
    } else {
      lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }
  std::lock_guard<std::mutex> lock(shared.mu);
  shared.latencies_us.insert(shared.latencies_us.end(), lat.begin(), lat.end());
  shared.errors += errors;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: koi_bench_http_load URL [--connections N] [--seconds S] [--threads T] [--key KEY]\n");
    return 1;
  }
  int connections = 16, threads = 1;
  double seconds = 10;
  std::string key;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--connections") connections = std::stoi(argv[i + 1]);
    else if (a == "--seconds") seconds = std::stod(argv[i + 1]);
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--key") key = argv[i + 1];
  }
  auto u = koi::net::parse_url(argv[1]);
  if (!u.ok()) {
    std::fprintf(stderr, "error: %s\n", u.status().message().c_str());
    return 1;
  }
  u->host = koi::net::resolve_host(u->host);
  asio::io_context io;
  Client client(static_cast<size_t>(connections));
  Shared shared;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int c = 0; c < connections; ++c) {
    asio::co_spawn(io, loop(client, *u, key, end, shared), asio::detached);
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&] { io.run(); });
  for (auto& t : pool) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  auto& l = shared.latencies_us;
  std::sort(l.begin(), l.end());
  auto pct = [&](double p) { return l.empty() ? 0.0 : l[std::min(l.size() - 1, static_cast<size_t>(p * static_cast<double>(l.size())))]; };
  std::printf("requests %zu errors %ld rps %.0f p50_us %.0f p99_us %.0f max_us %.0f\n", l.size(), shared.errors,
              static_cast<double>(l.size()) / elapsed, pct(0.5), pct(0.99), l.empty() ? 0.0 : l.back());
  return 0;
}
