// `qtrain chat CONFIG [--adapter DIR] [decoding options]`: an interactive conversation with the
// model as trained, the history kept under the chat template. Each line of stdin is a user
// message; /reset starts over, /quit (or the end of stdin) leaves. Works in a terminal and with
// stdin a pipe. See docs/GENERATE.md.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_chat_command(CLI::App& app);

}  // namespace qtrain::apps
