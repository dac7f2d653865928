// A closed-loop HTTP load generator for the gateway-overhead benchmark: C keep-alive
// connections each send POST <path> with a small completion body back to back for D seconds
// and record each request's latency. Prints requests/s and p50 / p99 / max latency; non-200
// answers are counted as errors.
//   koi_bench_http_load URL [--connections 16] [--seconds 10] [--threads 1] [--key KEY]
#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/url/parse.hpp>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Shared {
  std::mutex mu;
  std::vector<double> latencies_us;
  long errors = 0;
};

asio::awaitable<void> connection(tcp::endpoint ep, std::string host, std::string target, std::string key, Clock::time_point end,
                                 Shared& shared) {
  constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
  std::vector<double> lat;
  long errors = 0;
  tcp::socket stream(co_await asio::this_coro::executor);
  bool connected = false;
  beast::flat_buffer buf;
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, host);
  req.set(http::field::content_type, "application/json");
  if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
  req.body() = R"({"model":"stories","prompt":"Once upon a time","max_tokens":8})";
  req.prepare_payload();
  while (Clock::now() < end) {
    if (!connected) {
      auto [ec] = co_await stream.async_connect(ep, kNoThrow);
      if (ec) {
        ++errors;
        stream.close();
        continue;
      }
      stream.set_option(tcp::no_delay(true));
      connected = true;
    }
    const auto t0 = Clock::now();
    auto [wec, wn] = co_await http::async_write(stream, req, kNoThrow);
    http::response<http::string_body> res;
    beast::error_code rec;
    if (!wec) std::tie(rec, std::ignore) = co_await http::async_read(stream, buf, res, kNoThrow);
    if (wec || rec || res.result_int() != 200) {
      ++errors;
    } else {
      lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    if (wec || rec || !res.keep_alive()) {
      stream.close();
      buf.clear();
      connected = false;
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
  auto u = boost::urls::parse_absolute_uri(argv[1]);
  if (!u || !u->has_port()) {
    std::fprintf(stderr, "error: URL must read http://HOST:PORT/PATH\n");
    return 1;
  }
  asio::io_context io;
  const tcp::endpoint ep(asio::ip::make_address(u->host()), static_cast<uint16_t>(std::stoi(u->port())));
  Shared shared;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int c = 0; c < connections; ++c) {
    asio::co_spawn(io, connection(ep, std::string(u->encoded_host_and_port()), std::string(u->encoded_path()), key, end, shared),
                   asio::detached);
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
