#include "serve/api.h"

#include <gtest/gtest.h>

#include "engine/block_hash.h"

namespace koi::serve {
namespace {

constexpr int32_t kVocab = 512;

std::optional<ApiError> parse(ApiKind kind, std::string_view body, GenerateRequest* out) {
  return parse_generate_request(kind, body, kVocab, out);
}

TEST(ApiTest, CompletionFieldsBecomeSamplingParams) {
  GenerateRequest r;
  auto e = parse(ApiKind::kCompletion,
                 R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":3,"n":2,
                     "seed":42,"stop":["x","y"],"logprobs":2,"presence_penalty":1,"logit_bias":{"5":-100},
                     "stream":true,"stream_options":{"include_usage":true}})",
                 &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "hi");
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_TRUE(r.max_tokens_set);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_EQ(r.params.top_k, 3);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_EQ(r.params.logit_bias.at(5), -100.0f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(ApiTest, PromptShapes) {
  GenerateRequest r;
  ASSERT_FALSE(parse(ApiKind::kCompletion, R"({"model":"m","prompt":[1,2,3]})", &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  GenerateRequest batch;
  ASSERT_FALSE(parse(ApiKind::kCompletion, R"({"model":"m","prompt":["a",[4,5]]})", &batch));
  ASSERT_EQ(batch.prompts.size(), 2u);
  EXPECT_EQ(batch.prompts[0].text, "a");
  EXPECT_EQ(batch.prompts[1].token_ids, (std::vector<int32_t>{4, 5}));
}

TEST(ApiTest, ChatMessagesAndLogprobs) {
  GenerateRequest r;
  auto e = parse(ApiKind::kChat,
                 R"({"model":"m","messages":[{"role":"system","content":"s"},
                     {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
                     "max_completion_tokens":5,"logprobs":true,"top_logprobs":3,"response_format":{"type":"text"}})",
                 &r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_EQ(r.params.logprobs, 3);
}

TEST(ApiTest, PriorityAndCacheSaltReachTheEngineRequest) {
  GenerateRequest r;
  ASSERT_FALSE(parse(ApiKind::kCompletion, R"({"model":"m","prompt":"x"})", &r));
  EXPECT_EQ(r.priority, 0);
  EXPECT_EQ(r.cache_key, 0u);
  GenerateRequest urgent;
  ASSERT_FALSE(parse(ApiKind::kCompletion, R"({"model":"m","prompt":"x","priority":-5,"cache_salt":"tenant-a"})", &urgent));
  EXPECT_EQ(urgent.priority, -5);
  EXPECT_EQ(urgent.cache_key, engine::cache_key_for_salt("tenant-a"));
  GenerateRequest chat;
  ASSERT_FALSE(parse(ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"priority":3,
                                        "cache_salt":"tenant-b"})",
                     &chat));
  EXPECT_EQ(chat.priority, 3);
  EXPECT_EQ(chat.cache_key, engine::cache_key_for_salt("tenant-b"));
  EXPECT_NE(chat.cache_key, urgent.cache_key);
}

struct BadCase {
  ApiKind kind;
  const char* body;
  const char* param;
  const char* message;
};

TEST(ApiTest, StructuredOutputFieldsBecomeOneConstraint) {
  GenerateRequest r;
  auto e = parse(ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],
                     "response_format":{"type":"json_schema","json_schema":{"name":"t","strict":true,
                     "schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}})",
                 &r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_TRUE(r.constraint);
  EXPECT_EQ(r.constraint->kind, grammar::ConstraintKind::kJsonSchema);
  EXPECT_EQ(r.constraint->source, R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  EXPECT_EQ(r.constraint_param, "response_format.json_schema.schema");
  GenerateRequest obj;
  ASSERT_FALSE(parse(ApiKind::kCompletion, R"({"model":"m","prompt":"x","response_format":{"type":"json_object"}})", &obj));
  EXPECT_EQ(obj.constraint->kind, grammar::ConstraintKind::kJsonObject);
  GenerateRequest choice;
  ASSERT_FALSE(parse(ApiKind::kCompletion, R"({"model":"m","prompt":"x","guided_choice":["yes","no"]})", &choice));
  EXPECT_EQ(choice.constraint->kind, grammar::ConstraintKind::kChoice);
  EXPECT_EQ(choice.constraint->choices, (std::vector<std::string>{"yes", "no"}));
  GenerateRequest regex;
  ASSERT_FALSE(parse(ApiKind::kCompletion, R"({"model":"m","prompt":"x","guided_regex":"[0-9]+"})", &regex));
  EXPECT_EQ(regex.constraint->source, "[0-9]+");
  GenerateRequest text;
  ASSERT_FALSE(parse(ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}})", &text));
  EXPECT_FALSE(text.constraint);
}

// The template gets tool calls as tests/chat_template_compat.js renders them against
// Python jinja2: arguments parsed into an object, a null content as "".
TEST(ApiTest, ToolMessagesReachTheTemplateAsTransformersPassesThem) {
  GenerateRequest r;
  auto e = parse(ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":"Weather in Paris?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"22 C"}],
      "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],
      "tool_choice":{"type":"function","function":{"name":"get_weather"}}})",
                 &r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "");
  EXPECT_EQ(r.messages[1].extra_json,
            R"({"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]})");
  EXPECT_EQ(r.messages[2].extra_json, R"({"tool_call_id":"call_1"})");
  EXPECT_EQ(r.tools_json, R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].parameters_json, R"({"type":"object"})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tool_choice_name, "get_weather");
}

TEST(ApiTest, BadBodiesNameTheParameter) {
  const BadCase cases[] = {
      {ApiKind::kCompletion, "{", "", "the request body is not valid JSON"},
      {ApiKind::kCompletion, "[1]", "", "the request body must be a JSON object, got an array"},
      {ApiKind::kCompletion, R"({"prompt":"x"})", "model", "'model' is required"},
      {ApiKind::kCompletion, R"({"model":"m"})", "prompt", "'prompt' is required"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","max_tokens":"5"})", "max_tokens",
       "'max_tokens' must be an integer, got a string"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","max_tokens":-1})", "max_tokens",
       "'max_tokens' must be an integer between 1 and 2147483647, got -1"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","temperature":2.5})", "temperature",
       "'temperature' must be between 0 and 2, got 2.5"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","foo":1})", "foo",
       "Unrecognized request argument supplied: foo"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})", "stream_options",
       "'stream_options' is only allowed when 'stream' is true"},
      {ApiKind::kChat, R"({"model":"m","messages":[]})", "messages", "'messages' must contain at least one message"},
      {ApiKind::kChat, R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", "messages[0].role",
       "'messages[0].role' must be one of"},
      {ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}})",
       "response_format", "response_format type 'xml' is unknown; use 'text', 'json_object' or 'json_schema'"},
      {ApiKind::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{}}}})",
       "response_format.json_schema.name", "'response_format.json_schema.name' is required"},
      {ApiKind::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{},"extra":1}}})",
       "response_format.json_schema.extra", "Unrecognized request argument supplied: response_format.json_schema.extra"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","guided_regex":"a+","guided_choice":["a"]})", "guided_choice",
       "'guided_regex' and 'guided_choice' both constrain the output; give only one"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","guided_choice":["a",""]})", "guided_choice",
       "'guided_choice' must be a non-empty array of non-empty strings"},
      {ApiKind::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})",
       "tool_choice", "'tool_choice' names 'g', which is not one of 'tools'"},
      {ApiKind::kChat,
       R"({"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{oops"}}]}]})",
       "messages[0].tool_calls", "'messages[0].tool_calls' must be an array of"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","guided_json":5})", "guided_json",
       "'guided_json' must be a JSON schema (object or string), got an integer"},
      {ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs",
       "'top_logprobs' requires 'logprobs' to be true"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":[[1,2,3,-5]]})", "prompt",
       "prompt[0][3] must be a token id in [0, 512), got -5"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":[1,1.5]})", "prompt",
       "prompt[1] must be a token id in [0, 512), got 1.5"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":["a",[7,512]]})", "prompt",
       "prompt[1][1] must be a token id in [0, 512), got 512"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":[3,"a"]})", "prompt",
       "prompt[1] must be a token id in [0, 512), got \"a\""},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","stop_token_ids":[2,-1]})", "stop_token_ids",
       "stop_token_ids[1] must be a token id in [0, 512), got -1"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","priority":1.5})", "priority",
       "'priority' must be an integer, got a number"},
      {ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"priority":"high"})", "priority",
       "'priority' must be an integer, got a string"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","priority":1e12})", "priority",
       "'priority' must be an integer"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","cache_salt":""})", "cache_salt",
       "'cache_salt' must be a non-empty string"},
      {ApiKind::kCompletion, R"({"model":"m","prompt":"x","cache_salt":7})", "cache_salt",
       "'cache_salt' must be a string, got an integer"},
  };
  for (const BadCase& c : cases) {
    GenerateRequest r;
    auto e = parse(c.kind, c.body, &r);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->status, 400) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body;
    EXPECT_NE(e->message.find(c.message), std::string::npos) << c.body << " -> " << e->message;
  }
}

TEST(ApiTest, ErrorBodyHasOpenAiShape) {
  ApiError e = bad_request("nope", "n");
  EXPECT_EQ(error_body(e),
            R"({"error":{"message":"nope","type":"invalid_request_error","param":"n","code":null}})");
}

// /tokenize renders a chat with its tools as a chat completion does (the gateway's KV hit
// prediction asks it), and checks them the same way.
TEST(ApiTest, TokenizeTakesAChatsToolsAsAChatCompletionDoes) {
  const std::string tools = R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  TokenizeRequest t;
  ASSERT_FALSE(parse_tokenize_request(R"({"model":"m",)" + messages + R"(,"tools":)" + tools + "}", &t));
  GenerateRequest g;
  ASSERT_FALSE(parse(ApiKind::kChat, R"({"model":"m",)" + messages + R"(,"tools":)" + tools + "}", &g));
  EXPECT_FALSE(t.tools_json.empty());
  EXPECT_EQ(t.tools_json, g.tools_json);
  TokenizeRequest plain;
  ASSERT_FALSE(parse_tokenize_request(R"({"model":"m",)" + messages + "}", &plain));
  EXPECT_EQ(plain.tools_json, "");
  TokenizeRequest bad;
  auto e = parse_tokenize_request(R"({"model":"m",)" + messages + R"(,"tools":[{"type":"web"}]})", &bad);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools[0].type");
}

TEST(ApiTest, DetokenizeChecksTheVocabulary) {
  std::vector<int32_t> ids;
  EXPECT_FALSE(parse_detokenize_request(R"({"tokens":[1,2]})", 10, &ids));
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  std::vector<int32_t> bad;
  auto e = parse_detokenize_request(R"({"tokens":[1,99]})", 10, &bad);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "token id 99 is outside the vocabulary [0, 10)");
}

TEST(Api, LoraAdapterBodiesAreVllms) {
  LoraAdapterRequest r;
  EXPECT_FALSE(parse_lora_adapter_request(R"({"lora_name":"poet","lora_path":"/a/poet"})", true, &r));
  EXPECT_EQ(r.name, "poet");
  EXPECT_EQ(r.path, "/a/poet");
  LoraAdapterRequest u;
  EXPECT_FALSE(parse_lora_adapter_request(R"({"lora_name":"poet"})", false, &u));
  EXPECT_EQ(u.name, "poet");
  LoraAdapterRequest bad;
  auto e = parse_lora_adapter_request(R"({"lora_name":"poet"})", true, &bad);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "lora_path");
  EXPECT_EQ(e->message, "'lora_path' must be a non-empty string: a PEFT adapter directory");
  e = parse_lora_adapter_request(R"({"lora_name":"poet","lora_path":"/a","load_inplace":true})", true, &bad);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "load_inplace");
  e = parse_lora_adapter_request(R"({"lora_name":"poet","lora_path":"/a"})", false, &bad);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "lora_path");  // unload takes only the name
}

}  // namespace
}  // namespace koi::serve
