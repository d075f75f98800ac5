// See generate_command.h.
#include "apps/generate_command.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "apps/generation_session.h"

namespace qtrain::apps {
namespace {

struct Options {
  GenerationFlags flags;
  std::vector<std::string> prompts;
  std::string prompts_file;
  bool chat = false;
  std::string out;
  int64_t batch_size = 8;
};

std::vector<engine::generate::Prompt> read_all_prompts(const Options& o) {
  using engine::generate::read_prompts;
  std::vector<engine::generate::Prompt> out;
  for (const auto& text : o.prompts) out.push_back({text, nullptr});
  if (o.prompts_file == "-") {
    auto more = read_prompts(std::cin, "stdin", false);
    out.insert(out.end(), more.begin(), more.end());
  } else if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    TORCH_CHECK(in.good(), "--prompts ", o.prompts_file, ": cannot be read");
    auto more = read_prompts(in, o.prompts_file, false);
    out.insert(out.end(), more.begin(), more.end());
  }
  if (o.prompts.empty() && o.prompts_file.empty()) {
    if (isatty(fileno(stdin)))
      std::fprintf(stderr, "generate: reading prompts from stdin, one per line (Ctrl-D ends)\n");
    out = read_prompts(std::cin, "stdin", /*plain=*/true);
  }
  TORCH_CHECK(!out.empty(), "no prompts: pass --prompt TEXT, --prompts FILE.jsonl, or lines on stdin");
  return out;
}

void run(const Options& o) {
  using namespace engine;
  const auto prompts = read_all_prompts(o);
  auto s = open_generation(o.flags, "generate");
  const auto encoder = s->encoder(o.chat);
  std::vector<std::vector<int64_t>> ids;
  for (const auto& p : prompts) ids.push_back(encoder.encode(p));
  auto options = s->options;
  options.batch_size = o.batch_size;
  std::ofstream out;
  if (!o.out.empty()) {
    out.open(o.out, std::ios::trunc);
    TORCH_CHECK(out.good(), "--out ", o.out, ": cannot be written");
  }
  // To the terminal: streamed when the prompts go one at a time, else each completion once its
  // batch ends; either way each completion ends with a newline, a blank line between them.
  const bool stream = o.out.empty() && (prompts.size() == 1 || options.batch_size == 1);
  size_t written = 0;
  size_t streaming = 0;  // the completion being streamed: those before it have ended
  const auto on_text = [&](size_t i, const std::string& piece) {
    if (!stream) return;
    for (; streaming < i; ++streaming) std::printf("\n\n");
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  generate::GenerationTimes times;
  const auto completions = generate::generate(*s->scheduler, *s->tokenizer, ids, options, on_text, &times);
  if (stream) {
    for (; streaming + 1 < completions.size(); ++streaming) std::printf("\n\n");
    std::printf("\n");
  }
  int64_t made = 0;
  for (size_t i = 0; i < completions.size(); ++i) {
    const auto& c = completions[i];
    made += static_cast<int64_t>(c.ids.size());
    if (!o.out.empty()) {
      nlohmann::ordered_json line;
      if (prompts[i].is_chat()) {
        line["messages"] = prompts[i].messages;
      } else {
        line["prompt"] = prompts[i].text;
      }
      line["completion"] = c.text;
      line["completion_ids"] = c.ids;
      line["prompt_tokens"] = ids[i].size();
      line["stop_reason"] = c.stop_reason;
      out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      ++written;
    } else if (!stream) {
      std::printf("%s%s\n", i == 0 ? "" : "\n", c.text.c_str());
    }
  }
  std::fflush(stdout);
  std::fprintf(stderr,
               "generate: %zu prompts, %lld new tokens; reading the prompts %.3f s, then %.1f tokens/s%s%s\n",
               prompts.size(),
               static_cast<long long>(made),
               times.prefill_seconds,
               times.decode_seconds > 0 ? static_cast<double>(times.decoded_tokens) / times.decode_seconds : 0.0,
               written ? ", written to " : "",
               written ? o.out.c_str() : "");
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "generate", "Complete prompts with the base model and adapter as trained (quantized base, adapter unmerged)");
  add_generation_flags(cmd, o->flags);
  cmd->add_option("--prompt", o->prompts, "a prompt (repeatable)");
  cmd->add_option("--prompts",
                  o->prompts_file,
                  "JSONL of prompts, one per line: {\"prompt\": ...}, {\"messages\": [...]} or a JSON string; - reads "
                  "stdin");
  cmd->add_flag("--chat", o->chat, "wrap each plain prompt as a user message in the chat template");
  cmd->add_option("--out", o->out, "write JSONL: prompt, completion, completion_ids, prompt_tokens, stop_reason");
  cmd->add_option("--batch-size", o->batch_size, "prompts decoded together")->capture_default_str();
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::apps
