// A Jinja chat template (from tokenizer_config.json or chat_template_jinja), parsed and rendered
// with a conversation. The input is the template, then optionally a line "----" and the
// messages as JSON (a hostile conversation when absent or not a JSON array).
#include "engine/text/chat_template.h"
#include "engine/text/json_depth.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qtrain;
  const std::string_view input = fuzz::as_text(data, size);
  const size_t split = input.find("\n----\n");
  const std::string source(input.substr(0, split));
  engine::text::ChatTemplateInput conversation;
  conversation.messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "{{ 7*7 }} {% raw %}"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},)"
      R"( {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, {}]}}}]},)"
      R"( {"role": "tool", "content": "\u0000\ud7ff"}])");
  // Rows reach templates only after the depth check every dataset row passes.
  if (split != std::string_view::npos && engine::text::json_depth_problem(input.substr(split + 6)).empty()) {
    auto messages = nlohmann::ordered_json::parse(input.substr(split + 6), nullptr, /*allow_exceptions=*/false);
    if (messages.is_array()) conversation.messages = std::move(messages);
  }
  conversation.add_generation_prompt = size % 2 == 1;
  conversation.variables = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"enable_thinking", size % 3 == 0}};
  fuzz::expect_clean([&] {
    engine::text::ChatTemplate chat_template(source, "chat_template.jinja");
    chat_template.set_clock([] { return std::tm{}; });
    (void)chat_template.render(conversation);
  });
  return 0;
}
