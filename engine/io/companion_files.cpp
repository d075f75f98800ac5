// See companion_files.h.
#include "engine/io/companion_files.h"

#include <algorithm>

namespace qtrain::engine::io {

namespace fs = std::filesystem;

bool is_weights_or_config(const std::string& name) {
  for (const char* ext : {".safetensors", ".bin", ".pt", ".pth", ".gguf"}) {
    if (name.ends_with(ext)) return true;
  }
  return name == "config.json" || name.ends_with(".safetensors.index.json") || name.ends_with(".bin.index.json");
}

bool is_tokenizer_file(const std::string& name) {
  return name.starts_with("tokenizer") || name.starts_with("chat_template.") || name == "special_tokens_map.json" ||
         name == "added_tokens.json" || name == "vocab.json" || name == "merges.txt";
}

std::vector<std::string> copy_companion_files(const fs::path& from, const fs::path& to, Companions which) {
  std::vector<std::string> copied;
  for (const auto& entry : fs::directory_iterator(from)) {
    const auto name = entry.path().filename().string();
    if (!entry.is_regular_file() || is_weights_or_config(name)) continue;
    if (which == Companions::tokenizer && !is_tokenizer_file(name)) continue;
    fs::copy_file(entry.path(), to / name, fs::copy_options::overwrite_existing);
    copied.push_back(name);
  }
  std::sort(copied.begin(), copied.end());
  return copied;
}

}  // namespace qtrain::engine::io
