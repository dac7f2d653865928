// ChatPrompt: turns chat messages into the prompt text with the model's Jinja chat template
// (GGUF tokenizer.chat_template, tokenizer_config.json chat_template, or --chat-template
// FILE), falling back to a default template for models that ship none. Immutable after
// create(); render() and encode() are thread-safe. The tokenizer must outlive it. Errors from the template (raise_exception, say "roles
// must alternate") come back as kInvalidArgument with the template's message, since they
// are the client's to fix.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "serve/api.h"
#include "serve/tool_calls.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace koi::serve {

class ChatPrompt {
 public:
  // `source` empty: the model's template if it has one, else the default template.
  static Result<ChatPrompt> create(const std::string& source, const tokenizer::Tokenizer& tok);

  // tools_json: the request's tools (a JSON array, the template's `tools`), "" for none.
  Result<std::string> render(std::span<const Message> messages, bool add_generation_prompt,
                             const std::string& tools_json = "") const;
  // How this template's model writes tool calls.
  ToolFormat tool_format() const { return detect_tool_format(template_.source()); }
  // The prompt tokens of rendered text: special-token text becomes special tokens, and BOS
  // is added unless the template already wrote it (the default template does not).
  std::vector<int32_t> encode(const std::string& text) const;

 private:
  ChatPrompt(tokenizer::ChatTemplate tmpl, const tokenizer::Tokenizer& tok, std::string bos, std::string eos)
      : template_(std::move(tmpl)), tok_(&tok), bos_(std::move(bos)), eos_(std::move(eos)) {}

  tokenizer::ChatTemplate template_;
  const tokenizer::Tokenizer* tok_;
  std::string bos_;
  std::string eos_;
};

}  // namespace koi::serve
