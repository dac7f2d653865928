#include "serve/load_gen.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/random.h"
#include "engine/engine_builder.h"
#include "net/client.h"
#include "serve/engine_service.h"

namespace koi::serve {
namespace {

constexpr int kMooncakeBlock = 512;  // tokens per hash id in the Mooncake traces

namespace asio = boost::asio;
namespace json = boost::json;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<int32_t> random_tokens(Rng& rng, int n, const WorkloadConfig& c) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (auto& t : out) t = c.vocab_lo + static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_hi - c.vocab_lo)));
  return out;
}

RequestShape clipped(std::vector<int32_t> prompt, int64_t input, int64_t output, const WorkloadConfig& c) {
  prompt.resize(static_cast<size_t>(std::clamp<int64_t>(input, 1, c.max_input_len)));
  return {std::move(prompt), static_cast<int>(std::clamp<int64_t>(output, 1, c.max_output_len))};
}

// Arrival offsets in seconds: Poisson at `rate`, or all at zero.
std::vector<double> arrivals(size_t n, double rate, uint64_t seed) {
  std::vector<double> out(n, 0.0);
  Rng rng(seed ^ 0x5eed);
  double t = 0.0;
  for (size_t i = 0; i < n && rate > 0; ++i) {
    out[i] = t;
    t += -std::log(1.0 - rng.uniform()) / rate;
  }
  return out;
}

// Feeds one SSE stream's bytes; records token arrival times and the final usage.
class SseReader {
 public:
  SseReader(RequestResult* result, Clock::time_point start) : r_(result), start_(start) {}

  void feed(std::string_view bytes) {
    buffer_.append(bytes);
    for (size_t pos; (pos = buffer_.find("\n\n")) != std::string::npos;) {
      event(buffer_.substr(0, pos));
      buffer_.erase(0, pos + 2);
    }
  }
  bool done() const { return done_; }

 private:
  void event(const std::string& ev) {
    if (!ev.starts_with("data: ")) return;
    const std::string_view payload = std::string_view(ev).substr(6);
    if (payload == "[DONE]") {
      done_ = true;
      return;
    }
    error_code ec;
    json::value v = json::parse(payload, ec);
    if (ec || !v.is_object()) return fail("unparsable SSE event");
    const json::object& o = v.as_object();
    if (const json::value* e = o.if_contains("error")) return fail(json::serialize(*e));
    if (const json::value* u = o.if_contains("usage"); u && u->is_object()) {
      r_->output_tokens = static_cast<int>(u->at("completion_tokens").to_number<int64_t>());
    }
    const json::value* choices = o.if_contains("choices");
    if (!choices || !choices->is_array()) return;
    for (const auto& c : choices->as_array()) {
      const json::value* text = c.as_object().if_contains("text");
      if (!text || !text->is_string() || text->as_string().empty()) continue;
      const auto now = Clock::now();
      if (!seen_token_) {
        r_->ttft = seconds_between(start_, now);
      } else {
        r_->itl.push_back(seconds_between(last_, now));
      }
      seen_token_ = true;
      last_ = now;
    }
  }
  void fail(std::string message) {
    if (r_->error.empty()) r_->error = std::move(message);
  }

  RequestResult* r_;
  Clock::time_point start_;
  Clock::time_point last_;
  bool seen_token_ = false;
  bool done_ = false;
  std::string buffer_;
};

struct HttpTarget {
  std::string ip, port;
  std::string path;
};

// The body is built outside the coroutine: GCC 12 miscompiles brace-initialized json
// temporaries inside one.
std::string request_body(const LoadConfig& config, const RequestShape& shape) {
  json::object body{{"model", config.model},
                    {"prompt", json::array(shape.prompt.begin(), shape.prompt.end())},
                    {"max_tokens", shape.output_tokens},
                    {"ignore_eos", true},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}};
  return json::serialize(body);
}

asio::awaitable<void> http_request(net::Client& client, const HttpTarget& target, const LoadConfig& config,
                                   const RequestShape& shape, RequestResult* r) {
  const auto start = Clock::now();
  r->input_tokens = static_cast<int>(shape.prompt.size());
  net::ClientRequest req;
  req.method = "POST";
  req.target = target.path;
  if (!config.api_key.empty()) req.headers.emplace_back("authorization", "Bearer " + config.api_key);
  for (const auto& [name, value] : config.headers) req.headers.emplace_back(name, value);
  req.body = request_body(config, shape);
  net::Timeouts timeouts;
  timeouts.first_byte = timeouts.idle = std::chrono::minutes(10);
  auto opened = co_await client.open(target.ip, target.port, std::move(req), timeouts);
  if (!opened.ok()) {
    r->error = opened.status().message();
    co_return;
  }
  net::Exchange& ex = **opened;
  if (ex.status() != 200) {
    auto body = co_await ex.read_all(1 << 20);
    r->error = fmt::format("HTTP {}: {}", ex.status(), body.ok() ? *body : body.status().message());
    co_return;
  }
  SseReader sse(r, start);
  for (;;) {
    auto piece = co_await ex.read_some();
    if (!piece.ok()) {
      r->error = "read: " + piece.status().message();
      co_return;
    }
    if (piece->empty() && ex.done()) break;
    sse.feed(*piece);
  }
  r->e2e = seconds_between(start, Clock::now());
  if (r->error.empty() && !sse.done()) r->error = "the stream ended without [DONE]";
  if (r->error.empty() && r->output_tokens != shape.output_tokens) {
    r->error = fmt::format("got {} tokens, asked for {}", r->output_tokens, shape.output_tokens);
  }
  r->ok = r->error.empty();
}

Result<HttpTarget> parse_target(const std::string& url) {
  auto u = net::parse_url(url);
  if (!u.ok()) return Status::invalid_argument(fmt::format("--url '{}' must look like http://HOST:PORT", url));
  HttpTarget t;
  t.ip = net::resolve_host(u->host);
  t.port = u->port;
  t.path = "/v1/completions";
  return t;
}

// GET /v1/models on the target (with the API key, if any); returns the body.
Result<std::string> fetch_models(const LoadConfig& config) {
  net::Headers headers;
  if (!config.api_key.empty()) headers.emplace_back("authorization", "Bearer " + config.api_key);
  auto url = net::parse_url(config.url);
  if (!url.ok()) return url.status();
  const std::string models_url = fmt::format("http://{}:{}/v1/models", url->host, url->port);
  auto res = net::Client::fetch(models_url, "GET", "", headers, std::chrono::seconds(10));
  if (!res.ok()) return Status::unavailable(fmt::format("GET {}/v1/models failed ({}); is the server running?", config.url, res.status().message()));
  if (res->status != 200) {
    return Status::unavailable(fmt::format("GET {}/v1/models answered {}; pass the model name with --model", config.url,
                                           res->status));
  }
  return res->body;
}

}  // namespace

Result<std::string> only_served_model(std::string_view models_json, std::string_view url) {
  error_code ec;
  const json::value v = json::parse(models_json, ec);
  const json::value* data = !ec && v.is_object() ? v.as_object().if_contains("data") : nullptr;
  if (data == nullptr || !data->is_array()) {
    return Status::invalid_argument(fmt::format("{}/v1/models is not an OpenAI model list; pass the model name with --model", url));
  }
  std::vector<std::string> ids;
  for (const json::value& m : data->as_array()) {
    const json::value* id = m.is_object() ? m.as_object().if_contains("id") : nullptr;
    if (id != nullptr && id->is_string()) ids.emplace_back(id->as_string());
  }
  if (ids.size() == 1) return ids[0];
  if (ids.empty()) return Status::not_found(fmt::format("{} serves no models; start it with a model", url));
  return Status::invalid_argument(fmt::format("{} serves {} models ({}); pick one with --model", url, ids.size(), fmt::join(ids, ", ")));
}

Result<std::vector<RequestShape>> make_workload(const WorkloadConfig& c) {
  if (c.vocab_hi <= c.vocab_lo) return Status::invalid_argument("the prompt token range is empty");
  std::vector<RequestShape> shapes;
  Rng rng(c.seed);
  if (c.trace.empty()) {
    for (int i = 0; i < c.num_requests; ++i) shapes.push_back(clipped(random_tokens(rng, c.input_len, c), c.input_len, c.output_len, c));
    return shapes;
  }
  std::ifstream in(c.trace);
  if (!in) return Status::not_found(fmt::format("--trace {}: cannot open the file", c.trace));
  const bool mooncake = c.trace.ends_with(".jsonl");
  std::string line;
  int line_no = 0;
  while (static_cast<int>(shapes.size()) < c.num_requests && std::getline(in, line)) {
    ++line_no;
    if (mooncake) {
      error_code ec;
      json::value v = json::parse(line, ec);
      const json::object* o = ec ? nullptr : v.if_object();
      if (!o || !o->contains("input_length") || !o->contains("output_length")) {
        return Status::invalid_argument(fmt::format("{}:{}: expected a Mooncake record with input_length, output_length "
                                                    "and hash_ids", c.trace, line_no));
      }
      // Lengths scale with the block: a 512-token hash id replayed as 16 tokens makes a prompt 1/32 as long.
      const int64_t input =
          (o->at("input_length").to_number<int64_t>() * c.trace_block_tokens + kMooncakeBlock - 1) / kMooncakeBlock;
      std::vector<int32_t> prompt;
      if (const json::value* ids = o->if_contains("hash_ids"); ids && ids->is_array()) {
        for (const auto& id : ids->as_array()) {
          Rng block_rng(c.seed ^ (static_cast<uint64_t>(id.to_number<int64_t>()) * 0x9e3779b97f4a7c15ull));
          auto block = random_tokens(block_rng, c.trace_block_tokens, c);
          prompt.insert(prompt.end(), block.begin(), block.end());
          if (static_cast<int64_t>(prompt.size()) >= std::min<int64_t>(input, c.max_input_len)) break;
        }
      }
      if (static_cast<int64_t>(prompt.size()) < input) {
        auto rest = random_tokens(rng, static_cast<int>(std::min<int64_t>(input, c.max_input_len)), c);
        prompt.insert(prompt.end(), rest.begin(), rest.end());
      }
      shapes.push_back(clipped(std::move(prompt), input, o->at("output_length").to_number<int64_t>(), c));
      continue;
    }
    if (line_no == 1) continue;  // Azure CSV header: TIMESTAMP,ContextTokens,GeneratedTokens
    std::stringstream row(line);
    std::string ts, ctx, gen;
    std::getline(row, ts, ',');
    std::getline(row, ctx, ',');
    std::getline(row, gen, ',');
    int64_t input = 0, output = 0;
    try {
      input = std::stoll(ctx);
      output = std::stoll(gen);
    } catch (const std::exception&) {
      return Status::invalid_argument(fmt::format("{}:{}: expected TIMESTAMP,ContextTokens,GeneratedTokens", c.trace, line_no));
    }
    input = std::llround(static_cast<double>(input) * c.input_scale);
    const int n = static_cast<int>(std::clamp<int64_t>(input, 1, c.max_input_len));
    shapes.push_back(clipped(random_tokens(rng, n, c), input, output, c));
  }
  if (shapes.empty()) return Status::invalid_argument(fmt::format("--trace {}: no requests in the file", c.trace));
  return shapes;
}

Result<BenchReport> run_http(const LoadConfig& given, const std::vector<RequestShape>& shapes) {
  KOI_ASSIGN_OR_RETURN(HttpTarget target, parse_target(given.url));
  LoadConfig config = given;
  if (config.model.empty()) {
    KOI_ASSIGN_OR_RETURN(std::string models, fetch_models(config));
    KOI_ASSIGN_OR_RETURN(config.model, only_served_model(models, config.url));
  }
  std::vector<RequestResult> results(shapes.size());
  const std::vector<double> at = arrivals(shapes.size(), config.request_rate, config.seed);
  asio::io_context ioc;
  net::Client client;
  // Concurrency slots: a send blocks while max_concurrency requests are in flight.
  asio::experimental::channel<void(error_code)> slots(ioc, static_cast<size_t>(std::max(config.max_concurrency, 1)));
  const auto start = Clock::now();
  auto dispatch = [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(ioc);
    for (size_t i = 0; i < shapes.size(); ++i) {
      timer.expires_at(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at[i])));
      co_await timer.async_wait(kAwait);
      if (config.max_concurrency > 0) co_await slots.async_send(error_code{}, kAwait);
      asio::co_spawn(ioc, http_request(client, target, config, shapes[i], &results[i]), [&, i](std::exception_ptr e) {
        if (e) results[i].error = "internal error in the load generator";
        if (config.max_concurrency > 0) slots.try_receive([](error_code) {});
      });
    }
  };
  asio::co_spawn(ioc, dispatch(), asio::detached);
  ioc.run();
  return summarize(results, seconds_between(start, Clock::now()), config.slo_ttft_ms, config.slo_itl_ms);
}

Result<BenchReport> run_in_process(const std::string& model_path, const LoadConfig& config,
                                   const std::vector<RequestShape>& shapes, trace::Recorder* trace) {
  engine::EngineOptions options;  // what `koi serve` runs with by default
  options.model = model_path;
  options.seed = config.seed;
  KOI_ASSIGN_OR_RETURN(auto host, engine::build_engine(options));
  host->engine->set_trace(trace);
  ServeMetrics metrics("bench");
  EngineService service(*host->engine, metrics, static_cast<int>(shapes.size()));
  service.start();

  std::vector<RequestResult> results(shapes.size());
  std::vector<Clock::time_point> started(shapes.size()), last(shapes.size());
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  size_t num_done = 0;
  const std::vector<double> at = arrivals(shapes.size(), config.request_rate, config.seed);
  const auto start = Clock::now();
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at[i])));
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return config.max_concurrency <= 0 || in_flight < config.max_concurrency; });
    ++in_flight;
    started[i] = Clock::now();
    results[i].input_tokens = static_cast<int>(shapes[i].prompt.size());
    lock.unlock();
    engine::RequestSpec spec;
    spec.id = std::to_string(i);
    spec.prompt = shapes[i].prompt;
    spec.params.max_tokens = shapes[i].output_tokens;
    spec.params.ignore_eos = true;
    Status st = service.submit({std::move(spec)}, [&, i](Event ev) {
      std::lock_guard guard(mu);
      RequestResult& r = results[i];
      const auto now = Clock::now();
      if (!ev.error.ok()) r.error = ev.error.message();
      if (!ev.output.token_ids.empty()) {
        if (r.output_tokens == 0) {
          r.ttft = seconds_between(started[i], now);
        } else {
          r.itl.push_back(seconds_between(last[i], now));
        }
        r.output_tokens += static_cast<int>(ev.output.token_ids.size());
        last[i] = now;
      }
      if (!ev.output.finished) return;
      r.e2e = seconds_between(started[i], now);
      r.ok = r.error.empty() && r.output_tokens == shapes[i].output_tokens;
      --in_flight;
      ++num_done;
      cv.notify_all();
    });
    if (!st.ok()) return st;
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return num_done == shapes.size(); });
  return summarize(results, seconds_between(start, Clock::now()), config.slo_ttft_ms, config.slo_itl_ms);
}

LatencyStats latency_stats(std::vector<double> seconds) {
  LatencyStats s;
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  auto pct = [&](double p) {  // nearest rank
    const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(seconds.size())));
    return seconds[std::clamp<size_t>(rank, 1, seconds.size()) - 1] * 1e3;
  };
  double sum = 0;
  for (double x : seconds) sum += x;
  s.mean = sum / static_cast<double>(seconds.size()) * 1e3;
  s.p50 = pct(50);
  s.p90 = pct(90);
  s.p99 = pct(99);
  return s;
}

namespace {

bool within_slo(const RequestResult& r, double slo_ttft_ms, double slo_itl_ms) {
  if (slo_ttft_ms > 0 && r.ttft * 1e3 > slo_ttft_ms) return false;
  if (slo_itl_ms <= 0 || r.itl.empty()) return true;
  double sum = 0;
  for (double gap : r.itl) sum += gap;
  return sum / static_cast<double>(r.itl.size()) * 1e3 <= slo_itl_ms;
}

}  // namespace

BenchReport summarize(const std::vector<RequestResult>& results, double duration_s, double slo_ttft_ms,
                      double slo_itl_ms) {
  BenchReport rep;
  rep.duration_s = duration_s;
  rep.slo_ttft_ms = slo_ttft_ms;
  rep.slo_itl_ms = slo_itl_ms;
  std::vector<double> ttft, itl, e2e;
  for (const RequestResult& r : results) {
    if (!r.ok) {
      ++rep.errors;
      if (rep.first_errors.size() < 5) rep.first_errors.push_back(r.error);
      continue;
    }
    ++rep.completed;
    rep.good += within_slo(r, slo_ttft_ms, slo_itl_ms);
    rep.input_tokens += r.input_tokens;
    rep.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft);
    e2e.push_back(r.e2e);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  rep.ttft = latency_stats(std::move(ttft));
  rep.itl = latency_stats(std::move(itl));
  rep.e2e = latency_stats(std::move(e2e));
  return rep;
}

json::object report_json(const BenchReport& r) {
  auto stats = [](const LatencyStats& s) {
    return json::object{{"mean_ms", s.mean}, {"p50_ms", s.p50}, {"p90_ms", s.p90}, {"p99_ms", s.p99}};
  };
  const double d = std::max(r.duration_s, 1e-9);
  return {{"duration_s", r.duration_s},
          {"completed", r.completed},
          {"errors", r.errors},
          {"input_tokens", r.input_tokens},
          {"output_tokens", r.output_tokens},
          {"request_throughput", r.completed / d},
          {"good", r.good},
          {"goodput", r.good / d},
          {"slo_ttft_ms", r.slo_ttft_ms},
          {"slo_itl_ms", r.slo_itl_ms},
          {"output_throughput", static_cast<double>(r.output_tokens) / d},
          {"total_token_throughput", static_cast<double>(r.input_tokens + r.output_tokens) / d},
          {"ttft", stats(r.ttft)},
          {"itl", stats(r.itl)},
          {"e2e", stats(r.e2e)},
          {"first_errors", json::array(r.first_errors.begin(), r.first_errors.end())}};
}

std::string report_text(const BenchReport& r) {
  const double d = std::max(r.duration_s, 1e-9);
  std::string out = fmt::format(
      "requests: {} completed, {} errors in {:.2f} s\n"
      "throughput: {:.2f} req/s, {:.1f} output tok/s, {:.1f} total tok/s\n"
      "{:<10}{:>12}{:>12}{:>12}{:>12}\n",
      r.completed, r.errors, r.duration_s, r.completed / d, r.output_tokens / d, (r.input_tokens + r.output_tokens) / d,
      "(ms)", "mean", "p50", "p90", "p99");
  for (auto [name, s] : {std::pair{"TTFT", &r.ttft}, std::pair{"ITL", &r.itl}, std::pair{"E2E", &r.e2e}}) {
    out += fmt::format("{:<10}{:>12.3f}{:>12.3f}{:>12.3f}{:>12.3f}\n", name, s->mean, s->p50, s->p90, s->p99);
  }
  if (r.slo_ttft_ms > 0 || r.slo_itl_ms > 0) {
    out += fmt::format("goodput: {:.3f} req/s ({} of {} within TTFT <= {} ms and mean ITL <= {} ms)\n", r.good / d,
                       r.good, r.completed, r.slo_ttft_ms, r.slo_itl_ms);
  }
  for (const auto& e : r.first_errors) out += "error: " + e + "\n";
  return out;
}

}  // namespace koi::serve
