#include "serve/chat_prompt.h"

namespace koi::serve {

Result<ChatPrompt> ChatPrompt::create(const std::string& source, const tokenizer::Tokenizer& tok) {
  std::string text = source;
  if (text.empty()) text = tok.spec().chat_template.value_or(tokenizer::default_chat_template());
  auto parsed = tokenizer::ChatTemplate::parse(text);
  if (!parsed.ok()) return parsed.status().with_prefix("chat template");
  auto token = [&](std::optional<int32_t> id) { return id ? tok.token_text(*id) : std::string(); };
  return ChatPrompt(std::move(parsed).value(), tok, token(tok.bos_id()), token(tok.eos_id()));
}

Result<std::string> ChatPrompt::render(std::span<const Message> messages, bool add_generation_prompt,
                                       const std::string& tools_json) const {
  tokenizer::ChatTemplateInputs inputs;
  for (const Message& m : messages) inputs.messages.push_back({m.role, m.content, m.extra_json});
  if (!tools_json.empty()) inputs.extra_context_json = "{\"tools\": " + tools_json + "}";
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = bos_;
  inputs.eos_token = eos_;
  auto text = template_.render(inputs);
  if (!text.ok()) return Status::invalid_argument("chat template: " + text.status().message());
  return text;
}

std::vector<int32_t> ChatPrompt::encode(const std::string& text) const {
  const bool has_bos = !bos_.empty() && text.starts_with(bos_);
  return tok_->encode(text, /*add_special=*/!has_bos, /*parse_special=*/true);
}

}  // namespace koi::serve
