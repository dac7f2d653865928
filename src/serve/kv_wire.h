// The KV transfer wire protocol between a decode worker (client) and a prefill worker
// (server): length-prefixed binary frames over one TCP connection per request, little-endian
// (x86-64 and aarch64 hosts). docs/kv-transfer.md has the byte layout and the exchange:
//
//   decode -> prefill   HELLO (the decoder's KvLayout)
//   prefill -> decode   ACCEPT, or ERROR (incompatible peer; the message names the field)
//   decode -> prefill   REQUEST (id, prompt, sampling parameters, cache key, blocks to skip)
//   prefill -> decode   BLOCK* (one per layer of each block, in block order), then DONE
//                       (first token, its logprobs, the sampler state) or ERROR
//
// Plain functions over a connected, blocking Asio socket; a socket error or a malformed
// frame is a Status naming what was wrong. Thread-compatible: one thread per socket.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "base/status.h"
#include "engine/kv_transfer.h"
#include "engine/sampling_params.h"

namespace koi::serve::kv_wire {

using Socket = boost::asio::ip::tcp::socket;

// 2: HELLO carries the sliding-window split (KvLayout::windowed, window), and BLOCK frames of
// windowed layers address the window table. A version 1 peer is refused by its version.
inline constexpr uint32_t kVersion = 2;
inline constexpr size_t kMaxFrameBytes = size_t{1} << 30;

enum class FrameType : uint8_t { kHello = 1, kAccept = 2, kRequest = 3, kBlock = 4, kDone = 5, kError = 6 };

struct Frame {
  FrameType type = FrameType::kError;
  std::string payload;
};

Status write_frame(Socket& socket, FrameType type, std::string_view payload);
Result<Frame> read_frame(Socket& socket);

// What the decode worker asks the prefill worker for.
struct PrefillRequest {
  std::string id;
  std::vector<int32_t> prompt;
  engine::SamplingParams params;  // the fields that shape the first token's distribution
  uint64_t cache_key = 0;
  int skip_blocks = 0;            // leading blocks the decoder holds already
};

std::string encode_hello(const engine::KvLayout& layout);
Result<engine::KvLayout> decode_hello(std::string_view payload);
std::string encode_request(const PrefillRequest& request);
Result<PrefillRequest> decode_request(std::string_view payload);
std::string encode_done(const engine::PrefillResult& result);
Result<engine::PrefillResult> decode_done(std::string_view payload);

// BLOCK: block index, layer, then K and V (the cache's stored bytes, KvLayout::block_bytes()
// each, in the dtype HELLO agreed on), sent without a copy.
Status write_block(Socket& socket, int32_t block_idx, int32_t layer, std::span<const std::byte> k,
                   std::span<const std::byte> v);
struct BlockView {
  int32_t block_idx = 0;
  int32_t layer = 0;
  std::vector<std::byte> k, v;
};
// Fails unless the payload holds exactly 2 * bytes bytes of K and V.
Status decode_block(std::string_view payload, size_t bytes, BlockView* out);

}  // namespace koi::serve::kv_wire
