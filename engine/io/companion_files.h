// The files of a model folder besides its weights and config.json: the tokenizer
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, tokenizer.model, vocab.json,
// merges.txt, added_tokens.json), the chat template (chat_template.jinja, chat_template.json),
// generation_config.json and a multimodal model's processor files. A folder qtrain writes from
// another (merge, quantize) carries them over, as axolotl's merge and transformers'
// save_pretrained do, so that it loads unchanged in transformers and in qtrain's own commands.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace qtrain::engine::io {

// Whether `name` (a file name, no folder) holds weights or the model config: *.safetensors, its
// index, *.bin, *.pt, *.pth, *.gguf, config.json. Everything else in a model folder is a companion.
bool is_weights_or_config(const std::string& name);

// Whether `name` is one of the tokenizer's files: tokenizer*, special_tokens_map.json,
// added_tokens.json, vocab.json, merges.txt, chat_template.*.
bool is_tokenizer_file(const std::string& name);

enum class Companions { all, tokenizer };

// Copies every regular file of `from` (not its subfolders) that is not weights or config (with
// Companions::tokenizer: only the tokenizer's) into `to`, replacing files of the same name there,
// and returns their names in sorted order.
std::vector<std::string> copy_companion_files(const std::filesystem::path& from,
                                              const std::filesystem::path& to,
                                              Companions which = Companions::all);

}  // namespace qtrain::engine::io
