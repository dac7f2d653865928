// koi chat-template: render a model's chat template for a conversation and print the prompt
// exactly as the model would see it (no newline is added at the end).
//
//   koi chat-template --template DIR --messages '[{"role": "user", "content": "Hi"}]'
//   koi chat-template --template model.gguf --messages chat.json --no-generation-prompt
//   koi chat-template --template tpl.jinja --messages chat.json --bos '<s>' --context '{"enable_thinking": false}'
//
// --template: a Hugging Face folder or tokenizer_config.json ("chat_template", bos_token,
// eos_token), a .gguf file (tokenizer.chat_template), or a file holding the template text.
// --messages: a JSON array of {"role", "content", ...} (inline, or the path of a file);
// fields besides role and a string content go to the template as they are (tool_calls...).
#include <boost/json.hpp>

#include <cstdio>

#include "base/file.h"
#include "cli/command.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/load.h"

namespace koi::cli {
namespace {

namespace json = boost::json;

struct ChatTemplateOptions {
  std::string template_path;
  std::string messages;
  std::string context;
  std::string bos;
  std::string eos;
  bool no_generation_prompt = false;
  int64_t now = -1;
};

struct TemplateSource {
  std::string text;
  std::string bos_token;
  std::string eos_token;
};

// bos_token / eos_token in tokenizer_config.json: a string or {"content": "..."}.
std::string special_token(const json::object& config, std::string_view key) {
  const json::value* v = config.if_contains(key);
  if (v == nullptr) return "";
  if (v->is_string()) return std::string(v->get_string());
  if (v->is_object()) {
    const json::value* content = v->get_object().if_contains("content");
    if (content != nullptr && content->is_string()) return std::string(content->get_string());
  }
  return "";
}

Result<TemplateSource> from_tokenizer_config(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  boost::system::error_code ec;
  json::value config = json::parse(bytes, ec);
  if (ec || !config.is_object()) return Status::invalid_argument(path + ": not a JSON object");
  const json::object& obj = config.get_object();
  TemplateSource src{"", special_token(obj, "bos_token"), special_token(obj, "eos_token")};
  const json::value* ct = obj.if_contains("chat_template");
  if (ct != nullptr && ct->is_string()) src.text = std::string(ct->get_string());
  if (ct != nullptr && ct->is_array()) {  // [{"name": "default", "template": "..."}, ...]
    for (const json::value& t : ct->get_array()) {
      const json::object* named = t.if_object();
      if (named != nullptr && named->if_contains("name") && named->at("name") == "default" &&
          named->if_contains("template") && named->at("template").is_string()) {
        src.text = std::string(named->at("template").get_string());
      }
    }
  }
  if (src.text.empty()) {
    return Status::not_found(path + " has no chat_template; pass a template file with --template instead");
  }
  return src;
}

Result<TemplateSource> load_template(const std::string& path) {
  if (file_exists(path_join(path, "tokenizer_config.json"))) {
    return from_tokenizer_config(path_join(path, "tokenizer_config.json"));
  }
  if (path.size() > 5 && path.substr(path.size() - 5) == ".json") return from_tokenizer_config(path);
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") {
    KOI_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::load_tokenizer(path));
    if (!tok.spec().chat_template) {
      return Status::not_found(path + " has no tokenizer.chat_template; pass a template file with --template instead");
    }
    TemplateSource src{*tok.spec().chat_template, "", ""};
    if (tok.bos_id()) src.bos_token = tok.token_text(*tok.bos_id());
    if (tok.eos_id()) src.eos_token = tok.token_text(*tok.eos_id());
    return src;
  }
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return TemplateSource{std::move(text), "", ""};
}

Result<std::vector<tokenizer::ChatMessage>> load_messages(const std::string& arg) {
  std::string text = arg;
  if (arg.find_first_not_of(" \t\n") == std::string::npos || arg[arg.find_first_not_of(" \t\n")] != '[') {
    KOI_ASSIGN_OR_RETURN(text, read_file(arg));
  }
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_array()) return Status::invalid_argument("--messages: expected a JSON array of {\"role\", \"content\"} objects");
  std::vector<tokenizer::ChatMessage> messages;
  for (const json::value& item : v.get_array()) {
    const json::object* obj = item.if_object();
    if (obj == nullptr || !obj->if_contains("role") || !obj->at("role").is_string()) {
      return Status::invalid_argument("--messages: every message needs a string \"role\"");
    }
    tokenizer::ChatMessage m;
    m.role = std::string(obj->at("role").get_string());
    json::object extra;
    for (const auto& [key, value] : *obj) {
      if (key == "role") continue;
      if (key == "content" && value.is_string()) {
        m.content = std::string(value.get_string());
      } else {
        extra[key] = value;
      }
    }
    if (!extra.empty()) m.extra_json = json::serialize(extra);
    messages.push_back(std::move(m));
  }
  return messages;
}

int run_chat_template(const ChatTemplateOptions& o) {
  auto src = load_template(o.template_path);
  if (!src.ok()) return fail(src.status().message());
  auto tmpl = tokenizer::ChatTemplate::parse(src->text);
  if (!tmpl.ok()) return fail(o.template_path + ": " + tmpl.status().message());
  auto messages = load_messages(o.messages);
  if (!messages.ok()) return fail(messages.status().message());
  tokenizer::ChatTemplateInputs inputs;
  inputs.messages = std::move(*messages);
  inputs.add_generation_prompt = !o.no_generation_prompt;
  inputs.bos_token = o.bos.empty() ? src->bos_token : o.bos;
  inputs.eos_token = o.eos.empty() ? src->eos_token : o.eos;
  inputs.extra_context_json = o.context;
  if (o.now >= 0) inputs.now = std::chrono::system_clock::from_time_t(static_cast<std::time_t>(o.now));
  auto prompt = tmpl->render(inputs);
  if (!prompt.ok()) return fail(prompt.status().message());
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return 0;
}

Runner setup_chat_template(CLI::App* app) {
  auto o = std::make_shared<ChatTemplateOptions>();
  app->add_option("--template", o->template_path, "HF folder, tokenizer_config.json, .gguf, or a template file")->required();
  app->add_option("--messages", o->messages, "JSON array of {role, content} messages, inline or a file")->required();
  app->add_flag("--no-generation-prompt", o->no_generation_prompt, "do not open an assistant turn at the end");
  app->add_option("--bos", o->bos, "BOS token text (default: from the model)");
  app->add_option("--eos", o->eos, "EOS token text (default: from the model)");
  app->add_option("--context", o->context, "JSON object of extra template variables (tools, enable_thinking, ...)");
  app->add_option("--now", o->now, "Unix time that strftime_now() formats (default: now)");
  return [o] { return run_chat_template(*o); };
}

}  // namespace

// Registered by hand: KOI_COMMAND names cannot hold the '-'.
static CommandRegistrar chat_template_registrar("", "chat-template", "render a chat template for a conversation",
                                                setup_chat_template);
}  // namespace koi::cli
