// The folder a command writes a model into (merge, quantize, init-model): never one of the
// folders it reads, and an existing non-empty folder only when the user says --overwrite.
// Checked before any work, so a refused command has written nothing.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace qtrain::apps {

// A folder the command reads, with what it is for the message ("base_model", "--adapter").
using InputFolder = std::pair<std::string, std::filesystem::path>;

// Errors (std::runtime_error through TORCH_CHECK) when `out` is, contains or lies inside one of
// `inputs`, when it exists and is not a folder, or when it is a folder holding files and
// `overwrite` is false. `command` names the command in the message ("merge").
void check_output_folder(const std::string& command,
                         const std::filesystem::path& out,
                         const std::vector<InputFolder>& inputs,
                         bool overwrite);

}  // namespace qtrain::apps
