// The OpenAI API at the edge of the server: request bodies (JSON) are parsed here into
// native structs, and native results are turned back into OpenAI's JSON shapes. Nothing
// past this file sees JSON; in particular the engine thread never does.
//
// Parsing is strict where OpenAI is strict: wrong types, out-of-range values and unknown
// fields are errors, each an ApiError naming the parameter. Koi's extra fields are accepted
// as vLLM does: sampling (top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids),
// priority (an integer, lower runs first) and cache_salt (prefix-cache isolation).
// Structured output: response_format (text, json_object, json_schema) and vLLM's
// guided_json, guided_regex, guided_choice and guided_grammar, at most one of them
// (docs/structured_output.md); the constraint is compiled later, by the server's cache.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "engine/request.h"
#include "engine/sampling_params.h"
#include "grammar/constraint.h"
#include "serve/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace koi::serve {

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" is null
  std::string code;   // "" is null
};
std::string error_body(const ApiError& error);
ApiError bad_request(std::string message, std::string param = "");

enum class ApiKind { kCompletion, kChat };

struct Message {
  std::string role;
  std::string content;
  // The message's other fields as the chat template sees them (a JSON object, "" for none):
  // tool_calls with their arguments parsed into objects (as transformers and vLLM hand them
  // to templates), tool_call_id and name. A null content (an assistant's tool call) is "",
  // which templates test as they test a missing one.
  std::string extra_json;
};

// One prompt of /v1/completions: text, or token ids given by the client.
struct Prompt {
  std::string text;
  std::vector<int32_t> token_ids;
  bool is_tokens = false;
};

// A /v1/completions or /v1/chat/completions request after parsing.
struct GenerateRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;
  std::vector<Prompt> prompts;    // completions: one or more
  std::vector<Message> messages;  // chat
  engine::SamplingParams params;  // params.max_tokens valid only when max_tokens_set
  bool max_tokens_set = false;
  int n = 1;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM's): usage in every chunk
  int priority = 0;               // engine::RequestSpec::priority: lower runs first
  uint64_t cache_key = 0;         // engine::RequestSpec::cache_key, from cache_salt (0: none)
  // Tool calling (chat): the tools as the client sent them (a JSON array, handed to the chat
  // template as `tools`), their names and parameter schemas, and what tool_choice asks.
  std::string tools_json;
  std::vector<Tool> tools;
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_choice_name;   // kNamed
  bool parallel_tool_calls = true;
  std::optional<grammar::Constraint> constraint;  // structured output
  std::string constraint_param;   // the parameter that gave it, for errors ("response_format.json_schema.schema")
};

// Parses a request body; token ids (prompt, stop_token_ids) must be below n_vocab. Returns
// the error to send when the body is not acceptable.
std::optional<ApiError> parse_generate_request(ApiKind kind, std::string_view body, int32_t n_vocab,
                                               GenerateRequest* out);

// /tokenize: {"prompt": "..."} or {"messages": [...], "tools": [...]} (the chat prompt exactly
// as a chat completion with those tools renders it); /detokenize: {"tokens": [...]}.
struct TokenizeRequest {
  std::string prompt;
  std::vector<Message> messages;
  std::string tools_json;  // chat: as GenerateRequest::tools_json
  bool is_chat = false;
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
};
std::optional<ApiError> parse_tokenize_request(std::string_view body, TokenizeRequest* out);
std::optional<ApiError> parse_detokenize_request(std::string_view body, int32_t n_vocab, std::vector<int32_t>* out);

// POST /v1/load_lora_adapter {"lora_name", "lora_path"} and /v1/unload_lora_adapter
// {"lora_name"}, vLLM's bodies; unload takes no lora_path.
struct LoraAdapterRequest {
  std::string name;
  std::string path;
};
std::optional<ApiError> parse_lora_adapter_request(std::string_view body, bool load, LoraAdapterRequest* out);

// The fields every response object of one request shares.
struct ResponseMeta {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;
  int64_t created = 0;  // unix seconds
  std::string model;
};

// What one choice produced so far (non-streaming: in all).
struct ChoiceOutput {
  std::string text;                           // content (outside tool calls)
  std::vector<ToolCall> tool_calls;           // non-streaming, parsed from the text
  std::vector<ToolCallDelta> tool_call_deltas;  // streaming
  bool called_tools = false;                  // finish_reason "tool_calls" instead of "stop"
  std::vector<int32_t> token_ids;
  std::vector<engine::SampledToken> logprobs;
  engine::FinishReason finish_reason = engine::FinishReason::kNone;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache (prompt_tokens_details)
};

// The whole response of a non-streaming request.
boost::json::object full_response(const ResponseMeta& meta, std::span<const ChoiceOutput> choices,
                                  const Usage& usage, const tokenizer::Tokenizer& tok);
// One streamed chunk for choice `index`: `delta` is the new text, tokens and logprobs;
// `first` adds the assistant role (chat); `text_offset` is the length of the choice's text
// before this chunk (completion logprobs).
boost::json::object stream_chunk(const ResponseMeta& meta, int index, const ChoiceOutput& delta, bool first,
                                 size_t text_offset, const tokenizer::Tokenizer& tok);
// The final chunk of a stream with include_usage: no choices, the usage.
boost::json::object usage_chunk(const ResponseMeta& meta, const Usage& usage);
boost::json::object usage_json(const Usage& usage);

}  // namespace koi::serve
