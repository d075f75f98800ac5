// See chat_command.h.
#include "apps/chat_command.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/generation_session.h"

namespace qtrain::apps {
namespace {

void run(const GenerationFlags& flags) {
  using namespace engine;
  auto s = open_generation(flags, "chat");
  const auto encoder = s->encoder(/*chat=*/true);
  const bool terminal = isatty(fileno(stdin));
  auto history = nlohmann::ordered_json::array();
  auto reset = [&] {
    history = nlohmann::ordered_json::array();
    if (!s->system.empty()) history.push_back({{"role", "system"}, {"content", s->system}});
  };
  reset();
  std::fprintf(stderr, "chat: one message per line; /reset starts over, /quit leaves\n");
  std::string line;
  while (true) {
    if (terminal) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      reset();
      std::fprintf(stderr, "chat: history cleared\n");
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    history.push_back({{"role", "user"}, {"content", line}});
    const auto ids = s->tokenizer->tokenize(encoder.render(history), /*add_special_tokens=*/false).ids;
    const auto reply =
        generate::generate(*s->scheduler, *s->tokenizer, {ids}, s->options, [](size_t, const std::string& piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        });
    std::printf("\n");
    std::fflush(stdout);
    if (reply[0].stop_reason == "max_new_tokens") {
      std::fprintf(
          stderr, "chat: the reply reached --max-new-tokens %lld\n", static_cast<long long>(s->options.max_new_tokens));
    }
    history.push_back({{"role", "assistant"}, {"content", reply[0].text}});
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto flags = std::make_shared<GenerationFlags>();
  auto* cmd = app.add_subcommand("chat", "Talk with the base model and adapter as trained, under the chat template");
  add_generation_flags(cmd, *flags);
  cmd->callback([flags] { run(*flags); });
}

}  // namespace qtrain::apps
