#include "serve/kv_wire.h"

#include <array>
#include <cstring>

#include <boost/asio/buffer.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

namespace koi::serve::kv_wire {
namespace {

namespace asio = boost::asio;

class Writer {
 public:
  template <typename T>
  Writer& put(T value) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &value, sizeof(T));
    return *this;
  }
  Writer& put_string(std::string_view s) {
    put(static_cast<uint32_t>(s.size()));
    out_.append(s);
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view in, const char* what) : in_(in), what_(what) {}
  template <typename T>
  T get() {
    T value{};
    if (in_.size() < sizeof(T)) {
      ok_ = false;
      return value;
    }
    std::memcpy(&value, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return value;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    if (!ok_ || in_.size() < n) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  // Count of a following array of `elem` bytes each, checked against what is left.
  uint32_t get_count(size_t elem) {
    const uint32_t n = get<uint32_t>();
    if (!ok_ || in_.size() / elem < n) ok_ = false;
    return ok_ ? n : 0;
  }
  Status finish() const {
    if (ok_ && in_.empty()) return ok_status();
    return Status::corrupt(fmt::format("malformed KV transfer {} frame ({})", what_,
                                       ok_ ? "trailing bytes" : "truncated"));
  }

 private:
  std::string_view in_;
  const char* what_;
  bool ok_ = true;
};

Status socket_status(const boost::system::error_code& ec, const char* doing) {
  return Status::unavailable(fmt::format("KV transfer connection failed while {}: {}", doing, ec.message()));
}

}  // namespace

Status write_frame(Socket& socket, FrameType type, std::string_view payload) {
  std::array<char, 5> header{};
  const uint32_t length = static_cast<uint32_t>(payload.size() + 1);
  std::memcpy(header.data(), &length, 4);
  header[4] = static_cast<char>(type);
  boost::system::error_code ec;
  const std::array<asio::const_buffer, 2> buffers = {asio::buffer(header), asio::buffer(payload)};
  asio::write(socket, buffers, ec);
  return ec ? socket_status(ec, "sending") : ok_status();
}

Result<Frame> read_frame(Socket& socket) {
  std::array<char, 5> header{};
  boost::system::error_code ec;
  asio::read(socket, asio::buffer(header), ec);
  if (ec) return socket_status(ec, "receiving");
  uint32_t length = 0;
  std::memcpy(&length, header.data(), 4);
  if (length == 0 || length > kMaxFrameBytes) {
    return Status::corrupt(fmt::format("KV transfer frame of {} bytes is outside [1, {}]", length, kMaxFrameBytes));
  }
  Frame frame;
  frame.type = static_cast<FrameType>(header[4]);
  frame.payload.resize(length - 1);
  asio::read(socket, asio::buffer(frame.payload), ec);
  if (ec) return socket_status(ec, "receiving");
  return frame;
}

std::string encode_hello(const engine::KvLayout& l) {
  return Writer()
      .put(kVersion)
      .put_string(l.model_fingerprint)
      .put_string(l.dtype)
      .put<int32_t>(l.block_size)
      .put<int32_t>(l.n_layers)
      .put<int32_t>(l.n_kv_heads)
      .put<int32_t>(l.head_dim)
      .put_string(l.windowed)
      .put<int32_t>(l.window)
      .take();
}

Result<engine::KvLayout> decode_hello(std::string_view payload) {
  Reader r(payload, "HELLO");
  // The version first: an older peer's HELLO has other fields after it.
  const uint32_t version = r.get<uint32_t>();
  if (payload.size() >= sizeof(uint32_t) && version != kVersion) {
    return Status::failed_precondition(fmt::format(
        "incompatible KV transfer peer: protocol version {} on the prefill worker but {} on the decode worker; run "
        "the same koi release on both",
        kVersion, version));
  }
  engine::KvLayout l;
  l.model_fingerprint = r.get_string();
  l.dtype = r.get_string();
  l.block_size = r.get<int32_t>();
  l.n_layers = r.get<int32_t>();
  l.n_kv_heads = r.get<int32_t>();
  l.head_dim = r.get<int32_t>();
  l.windowed = r.get_string();
  l.window = r.get<int32_t>();
  KOI_RETURN_IF_ERROR(r.finish());
  return l;
}

std::string encode_request(const PrefillRequest& q) {
  Writer w;
  w.put_string(q.id).put<uint64_t>(q.cache_key).put<int32_t>(q.skip_blocks);
  w.put(static_cast<uint32_t>(q.prompt.size()));
  for (int32_t t : q.prompt) w.put(t);
  const engine::SamplingParams& p = q.params;
  w.put(p.temperature).put<int32_t>(p.top_k).put(p.top_p).put(p.min_p);
  w.put(p.repetition_penalty).put(p.presence_penalty).put(p.frequency_penalty);
  w.put(static_cast<uint32_t>(p.logit_bias.size()));
  for (const auto& [token, bias] : p.logit_bias) w.put(token).put(bias);
  w.put<uint8_t>(p.seed.has_value()).put<uint64_t>(p.seed.value_or(0)).put<int32_t>(p.logprobs);
  return w.take();
}

Result<PrefillRequest> decode_request(std::string_view payload) {
  Reader r(payload, "REQUEST");
  PrefillRequest q;
  q.id = r.get_string();
  q.cache_key = r.get<uint64_t>();
  q.skip_blocks = r.get<int32_t>();
  q.prompt.resize(r.get_count(sizeof(int32_t)));
  for (int32_t& t : q.prompt) t = r.get<int32_t>();
  engine::SamplingParams& p = q.params;
  p.temperature = r.get<float>();
  p.top_k = r.get<int32_t>();
  p.top_p = r.get<float>();
  p.min_p = r.get<float>();
  p.repetition_penalty = r.get<float>();
  p.presence_penalty = r.get<float>();
  p.frequency_penalty = r.get<float>();
  const uint32_t num_bias = r.get_count(2 * sizeof(int32_t));
  for (uint32_t i = 0; i < num_bias; ++i) {
    const int32_t token = r.get<int32_t>();
    p.logit_bias[token] = r.get<float>();
  }
  const bool has_seed = r.get<uint8_t>() != 0;
  const uint64_t seed = r.get<uint64_t>();
  if (has_seed) p.seed = seed;
  p.logprobs = r.get<int32_t>();
  KOI_RETURN_IF_ERROR(r.finish());
  if (q.skip_blocks < 0) return Status::corrupt("KV transfer REQUEST skips a negative number of blocks");
  return q;
}

std::string encode_done(const engine::PrefillResult& result) {
  Writer w;
  w.put<int32_t>(result.first.token).put(result.first.logprob);
  w.put(static_cast<uint32_t>(result.first.top_logprobs.size()));
  for (const engine::TokenLogprob& t : result.first.top_logprobs) w.put<int32_t>(t.token).put(t.logprob);
  for (uint64_t s : result.rng) w.put(s);
  return w.take();
}

Result<engine::PrefillResult> decode_done(std::string_view payload) {
  Reader r(payload, "DONE");
  engine::PrefillResult result;
  result.first.token = r.get<int32_t>();
  result.first.logprob = r.get<float>();
  result.first.top_logprobs.resize(r.get_count(2 * sizeof(int32_t)));
  for (engine::TokenLogprob& t : result.first.top_logprobs) {
    t.token = r.get<int32_t>();
    t.logprob = r.get<float>();
  }
  for (uint64_t& s : result.rng) s = r.get<uint64_t>();
  KOI_RETURN_IF_ERROR(r.finish());
  return result;
}

Status write_block(Socket& socket, int32_t block_idx, int32_t layer, std::span<const std::byte> k,
                   std::span<const std::byte> v) {
  std::array<char, 13> header{};
  const uint32_t length = static_cast<uint32_t>(1 + 8 + k.size() + v.size());
  std::memcpy(header.data(), &length, 4);
  header[4] = static_cast<char>(FrameType::kBlock);
  std::memcpy(header.data() + 5, &block_idx, 4);
  std::memcpy(header.data() + 9, &layer, 4);
  const std::array<asio::const_buffer, 3> buffers = {asio::buffer(header), asio::buffer(k.data(), k.size_bytes()),
                                                     asio::buffer(v.data(), v.size_bytes())};
  boost::system::error_code ec;
  asio::write(socket, buffers, ec);
  return ec ? socket_status(ec, "sending a block") : ok_status();
}

Status decode_block(std::string_view payload, size_t bytes, BlockView* out) {
  if (payload.size() != 8 + 2 * bytes) {
    return Status::corrupt(fmt::format("KV transfer BLOCK frame holds {} bytes, expected {} for this layout",
                                       payload.size(), 8 + 2 * bytes));
  }
  std::memcpy(&out->block_idx, payload.data(), 4);
  std::memcpy(&out->layer, payload.data() + 4, 4);
  out->k.resize(bytes);
  out->v.resize(bytes);
  std::memcpy(out->k.data(), payload.data() + 8, bytes);
  std::memcpy(out->v.data(), payload.data() + 8 + bytes, bytes);
  return ok_status();
}

}  // namespace koi::serve::kv_wire
