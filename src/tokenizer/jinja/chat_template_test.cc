// ChatTemplate: the inputs a template sees, the fallback template, concurrency, and
// robustness against mangled templates. (Byte-for-byte checks against the real model
// templates live in tests/chat_template_compat.sh.)
#include "tokenizer/jinja/chat_template.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

namespace koi::tokenizer {
namespace {

// A template in the style of the Qwen / Llama ones: system prompt handling, namespace,
// reversed loop, string methods, tojson, macros and raise_exception.
constexpr const char* kRealLooking = R"({%- macro render(m) -%}
{{- '<|im_start|>' + m.role + '\n' + m.content | trim + '<|im_end|>\n' -}}
{%- endmacro -%}
{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system = 'You are helpful.' %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}{{- '<|im_start|>system\n' + system + '<|im_end|>\n' }}
{%- set ns = namespace(last_user=-1) %}
{%- for m in loop_messages[::-1] %}
    {%- if ns.last_user == -1 and m.role == 'user' %}{% set ns.last_user = loop_messages|length - loop.index %}{% endif %}
{%- endfor %}
{%- for m in loop_messages %}
    {%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if m.role == 'assistant' and '</think>' in m.content %}
        {{- '<|im_start|>assistant\n' + m.content.split('</think>')[-1].lstrip('\n') + '<|im_end|>\n' }}
    {%- else %}
        {{- render(m) }}
    {%- endif %}
{%- endfor %}
{%- if tools is not none %}{{ tools | tojson(indent=2) }}{% endif %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

ChatTemplateInputs conversation() {
  ChatTemplateInputs in;
  in.messages = {{"system", "Be brief."}, {"user", "  Hi  "}, {"assistant", "<think>\nhmm\n</think>\n\nHello"},
                 {"user", "Bye"}};
  in.bos_token = "<s>";
  return in;
}

TEST(ChatTemplate, RendersARealLookingTemplate) {
  auto t = ChatTemplate::parse(kRealLooking);
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto out = t->render(conversation());
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out,
            "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, RaiseExceptionBecomesInvalidArgument) {
  auto t = ChatTemplate::parse(kRealLooking);
  ASSERT_TRUE(t.ok());
  ChatTemplateInputs in = conversation();
  in.messages.push_back({"user", "again"});
  auto out = t->render(in);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplate, ExtraContextAndMessageFields) {
  auto t = ChatTemplate::parse(
      "{{ tools is none }}|{{ documents is none }}|{{ enable_thinking }}|"
      "{% for m in messages %}{{ m.role }}:{{ m.tool_calls[0].function.name if m.tool_calls is defined }};{% endfor %}");
  ASSERT_TRUE(t.ok()) << t.status().message();
  ChatTemplateInputs in;
  in.messages = {{"user", "q"}, {"assistant", "", R"({"tool_calls": [{"function": {"name": "get_time"}}]})"}};
  EXPECT_EQ(*t->render(in), "True|True||user:;assistant:get_time;");
  in.extra_context_json = R"({"enable_thinking": false, "tools": []})";
  EXPECT_EQ(*t->render(in), "False|True|False|user:;assistant:get_time;");
  in.extra_context_json = "[1]";
  EXPECT_EQ(t->render(in).status().message(), "extra_context_json must be a JSON object");
  in.extra_context_json = "";
  in.messages[1].extra_json = "{bad";
  EXPECT_EQ(t->render(in).status().message().substr(0, 49), "messages[1].extra_json must be a JSON object (syn");
}

TEST(ChatTemplate, StrftimeNowUsesTheInjectedTime) {
  auto t = ChatTemplate::parse(R"({{ strftime_now("%Y-%m") }}|{{ strftime_now is defined }})");
  ASSERT_TRUE(t.ok());
  ChatTemplateInputs in;
  in.now = std::chrono::system_clock::from_time_t(1721995200);  // 2024-07-26 12:00 UTC
  EXPECT_EQ(*t->render(in), "2024-07|True");
}

TEST(ChatTemplate, DefaultTemplateIsChatMl) {
  auto t = ChatTemplate::parse(default_chat_template());
  ASSERT_TRUE(t.ok()) << t.status().message();
  ChatTemplateInputs in;
  in.messages = {{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(*t->render(in), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  in.add_generation_prompt = false;
  EXPECT_EQ(*t->render(in), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
}

TEST(ChatTemplate, ConcurrentRendersAgree) {
  auto t = ChatTemplate::parse(kRealLooking);
  ASSERT_TRUE(t.ok());
  const std::string expected = *t->render(conversation());
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int thread_idx = 0; thread_idx < 4; ++thread_idx) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto out = t->render(conversation());
        if (!out.ok() || *out != expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Random byte edits of a real-looking template must give a Status or an output, never a
// crash or a hang. Run under ASan/UBSan (KOI_ASAN=ON) this is also a memory check.
TEST(ChatTemplate, MutatedTemplatesNeverCrash) {
  const std::string base = kRealLooking;
  const std::string alphabet = "{}%#-+()[]|.,:'\"~=!<> \nabcdefgijklmnorstuxz0123456789_*/";
  std::mt19937 rng(1234);
  int parsed = 0;
  int rendered = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % (s.size() + 1);
      switch (rng() % 4) {
        case 0: s.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        case 1: if (pos < s.size()) s.erase(pos, 1 + rng() % 8); break;
        case 2: if (pos < s.size()) s[pos] = alphabet[rng() % alphabet.size()]; break;
        case 3: {  // duplicate a slice: nests blocks and expressions
          size_t len = rng() % 64;
          s.insert(pos, s.substr(rng() % s.size(), len));
          break;
        }
      }
    }
    auto t = ChatTemplate::parse(s);
    if (!t.ok()) {
      EXPECT_FALSE(t.status().message().empty());
      continue;
    }
    ++parsed;
    auto out = t->render(conversation());
    if (out.ok()) ++rendered;
  }
  // Most mutations break the syntax; some still parse and render.
  EXPECT_GT(parsed, 100);
  EXPECT_GT(rendered, 50);
}

}  // namespace
}  // namespace koi::tokenizer
