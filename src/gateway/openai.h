// The few facts the gateway needs from OpenAI-shaped bodies, read at the edge with Boost.JSON.
//   parse_request(): model, stream, whether the client asked for usage in the stream, the
//     prompt text (completions' prompt, or the chat messages' contents joined) for prefix
//     routing and the admission estimate, or the prompt's token ids when the client sent ids;
//     the cache key of its cache_salt and the body that asks a replica's /tokenize for the
//     prompt's tokens (kv_events routing); and the body to forward (for a streamed request
//     with stream_options.include_usage and continuous_usage_stats forced on, so that every
//     stream, even one cut short, can be metered).
//   parse_usage(): the usage object of a response or of one stream chunk.
// Pure functions; errors are OpenAI-style messages for a 400.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace koi::gateway {

struct ParsedRequest {
  std::string model;
  bool stream = false;
  bool client_wants_usage = false;  // stream_options.include_usage as the client sent it
  bool client_wants_continuous_usage = false;  // stream_options.continuous_usage_stats
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;  // a completion prompt given as token ids
  uint64_t cache_key = 0;              // engine::cache_key_for_salt(cache_salt), 0 without one
  std::string tokenize_body;           // POST /tokenize of the same prompt (empty with token ids)
  std::string upstream_body;
};

Result<ParsedRequest> parse_request(std::string_view body, bool chat);
// A rough token estimate for admission (the gateway has no tokenizer): ceil(bytes / 4), or
// the number of ids of a token prompt.
int64_t estimate_tokens(std::string_view text);
int64_t estimate_tokens(const ParsedRequest& r);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};
// The "usage" of a JSON body, or nullopt when the body is not JSON or has no usage object.
std::optional<Usage> parse_usage(std::string_view json);

// {"error":{"message":...,"type":...,"code":...}}
std::string openai_error(std::string_view message, std::string_view type, int code);

}  // namespace koi::gateway
