// See dataset.h.
#include "engine/data/dataset.h"
#include "engine/data/preference_types.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "engine/data/chat_dataset.h"
#include "engine/data/leading_tokens.h"

namespace qtrain::engine::data {
namespace {

// A string field of a text row. `optional`: absent or null reads as "" (alpaca's input);
// otherwise missing and empty values are errors.
std::string string_field(const nlohmann::ordered_json& row,
                         const std::string& key,
                         const std::string& where,
                         const std::string& format_hint,
                         bool optional = false) {
  const auto it = row.find(key);
  if (it == row.end() || it->is_null()) {
    TORCH_CHECK(optional, where, ": missing \"", key, "\"; ", format_hint);
    return {};
  }
  TORCH_CHECK(it->is_string(),
              where,
              ": \"",
              key,
              "\" must be a string, found ",
              it->type_name(),
              " ",
              it->dump().substr(0, 60));
  auto value = it->get<std::string>();
  TORCH_CHECK(optional || !value.empty(), where, ": \"", key, "\" is empty; fill it in or remove the line");
  return value;
}

std::string keys_of(const nlohmann::ordered_json& row) {
  std::string keys;
  for (const auto& [key, value] : row.items()) keys += (keys.empty() ? "" : ", ") + key;
  return keys.empty() ? "none" : keys;
}

void append(std::vector<int64_t>& ids, std::vector<int64_t>& labels, const std::vector<int64_t>& tokens, bool train) {
  ids.insert(ids.end(), tokens.begin(), tokens.end());
  if (train) {
    labels.insert(labels.end(), tokens.begin(), tokens.end());
  } else {
    labels.insert(labels.end(), tokens.size(), int64_t{-100});
  }
}

// As axolotl's completion strategy: tokenizer(text) with the family's special tokens, EOS appended
// when the text does not already end with it; every token trained.
std::vector<Sample> read_completion(const config::DatasetConfig& d,
                                    const TextTokenizer& tokenizer,
                                    size_t max_tokens,
                                    const RowMapOptions& rows) {
  const std::string field = d.field.empty() ? "text" : d.field;
  const auto row_samples = [&](const nlohmann::ordered_json& row, const std::string& where, auto& samples) {
    const auto hint = "a completion row holds its text in \"" + field + "\" (this row has keys: " + keys_of(row) +
                      "); set the dataset's `field:` to the key that holds the text";
    const auto text = string_field(row, field, where, hint);
    auto ids = tokenize_leading(tokenizer, text, /*add_special_tokens=*/true, max_tokens).ids;
    if (ids.empty() || ids.back() != tokenizer.eos_id()) ids.push_back(tokenizer.eos_id());
    Sample s;
    append(s.input_ids, s.labels, ids, true);
    samples.push_back(std::move(s));
  };
  return map_jsonl_rows(d.path, rows, row_samples);
}

// As axolotl's InstructionPromptTokenizingStrategy: the prompt (with the family's special tokens)
// and the response (without them, EOS appended) are tokenized separately and concatenated, so the
// label boundary is exactly the prompt/response junction.
std::vector<Sample> read_alpaca(const config::DatasetConfig& d,
                                const TextTokenizer& tokenizer,
                                bool train_on_inputs,
                                size_t max_tokens,
                                const RowMapOptions& rows) {
  static const std::string hint = "an alpaca row is {\"instruction\": ..., \"input\": ... (optional), \"output\": ...}";
  const auto row_samples = [&](const nlohmann::ordered_json& row, const std::string& where, auto& samples) {
    const auto instruction = string_field(row, "instruction", where, hint);
    const auto input = string_field(row, "input", where, hint, /*optional=*/true);
    const auto output = string_field(row, "output", where, hint);
    Sample s;
    append(s.input_ids,
           s.labels,
           tokenize_leading(tokenizer, alpaca_prompt(instruction, input), true, max_tokens).ids,
           train_on_inputs);
    append(s.input_ids, s.labels, tokenize_leading(tokenizer, output, false, max_tokens).ids, true);
    append(s.input_ids, s.labels, {tokenizer.eos_id()}, true);
    samples.push_back(std::move(s));
  };
  return map_jsonl_rows(d.path, rows, row_samples);
}

// As axolotl's RawInputOutputStrategy: each segment tokenized on its own without special tokens
// (BOS and EOS are the row's to write), trained when its "label" is true or train_on_inputs.
Sample input_output_sample(const nlohmann::ordered_json& row,
                           const std::string& where,
                           const TextTokenizer& tokenizer,
                           bool train_on_inputs,
                           size_t max_tokens) {
  static const std::string layout =
      "an input_output row is {\"segments\": [{\"label\": false, \"text\": \"...\"}, {\"label\": true, "
      "\"text\": \"...\"}, ...]}";
  const auto segments = row.find("segments");
  TORCH_CHECK(
      segments != row.end() && segments->is_array(),
      where,
      ": \"segments\" ",
      segments == row.end() ? std::string("is missing") : "must be a list, found " + std::string(segments->type_name()),
      "; ",
      layout);
  Sample s;
  for (size_t i = 0; i < segments->size(); ++i) {
    const auto& segment = (*segments)[i];
    const auto at = where + ": segments[" + std::to_string(i) + "]";
    TORCH_CHECK(segment.is_object(), at, " must be an object; ", layout);
    const auto label = segment.find("label");
    TORCH_CHECK(label != segment.end() && label->is_boolean(),
                at,
                ".label must be true (trained) or false (not trained), found ",
                label == segment.end() ? std::string("nothing") : label->dump().substr(0, 60));
    const auto text = string_field(segment, "text", at, layout, /*optional=*/true);
    append(s.input_ids,
           s.labels,
           tokenize_leading(tokenizer, text, /*add_special_tokens=*/false, max_tokens).ids,
           label->get<bool>() || train_on_inputs);
  }
  return s;
}

std::vector<Sample> read_input_output(const config::DatasetConfig& d,
                                      const TextTokenizer& tokenizer,
                                      bool train_on_inputs,
                                      size_t max_tokens,
                                      const RowMapOptions& rows) {
  const auto row_samples = [&](const nlohmann::ordered_json& row, const std::string& where, auto& samples) {
    samples.push_back(input_output_sample(row, where, tokenizer, train_on_inputs, max_tokens));
  };
  return map_jsonl_rows(d.path, rows, row_samples);
}

bool is_json(const std::filesystem::path& path) {
  auto ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jsonl" || ext == ".json";
}

}  // namespace

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  // Byte for byte axolotl's prompters.AlpacaPrompter (style "instruct"): system prompt + "\n\n" + turn.
  if (input.empty()) {
    return "Below is an instruction that describes a task. Write a response that appropriately completes the "
           "request.\n\n### Instruction:\n" +
           instruction + "\n\n### Response:\n";
  }
  return "Below is an instruction that describes a task, paired with an input that provides further context. "
         "Write a response that appropriately completes the request.\n\n### Instruction:\n" +
         instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
}

std::vector<Sample> load_dataset(const config::DatasetConfig& d,
                                 const TextTokenizer* tokenizer,
                                 int64_t sequence_len,
                                 bool train_on_inputs,
                                 DatasetStats* stats,
                                 const RowMapOptions& rows,
                                 int64_t vocab_size) {
  TORCH_CHECK(sequence_len > 1, "sequence_len must be at least 2, got ", sequence_len);
  const auto& path = d.path;
  TORCH_CHECK(is_json(path),
              path.string(),
              ": unsupported dataset file format '",
              path.has_extension() ? path.extension().string() : "(no extension)",
              "'; qtrain reads JSON Lines (.jsonl, one JSON object per line) or a JSON array of rows (.json)");
  const std::string type = d.type.empty() ? "pretokenized" : d.type;
  TORCH_CHECK(!is_preference_type(type),
              path.string(),
              ": dataset type '",
              d.type,
              "' holds preference pairs; train on them with rl: dpo (or ipo, orpo, simpo), or give a supervised type");
  TORCH_CHECK(type == "pretokenized" || type == "completion" || type == "alpaca" || type == "input_output" ||
                  type == "chat_template",
              path.string(),
              ": dataset type '",
              d.type,
              "' is not one of completion, alpaca, input_output, chat_template, pretokenized");
  TORCH_CHECK(type == "pretokenized" || tokenizer != nullptr,
              path.string(),
              ": dataset type '",
              d.type,
              "' needs a tokenizer; this model has no tokenizer.json (and its vocabulary is not the built-in byte "
              "tokenizer's): copy the model's tokenizer.json and tokenizer_config.json into base_model, or use a "
              "pre-tokenized JSONL (rows with \"input_ids\")");

  // A text part of more than sequence_len tokens is cut there (see Note [Leading tokens]): its
  // sample is longer than sequence_len either way, and its first sequence_len tokens are the same.
  const auto max_tokens = static_cast<size_t>(sequence_len);
  std::vector<Sample> samples;
  if (type == "pretokenized") {
    // Read whole, so that truncation is counted below like that of the text formats.
    samples = read_pretokenized_jsonl(path, std::numeric_limits<int64_t>::max(), vocab_size);
  } else if (type == "completion") {
    samples = read_completion(d, *tokenizer, max_tokens, rows);
  } else if (type == "chat_template") {
    samples = read_chat_template(d, *tokenizer, train_on_inputs, max_tokens, rows);
  } else if (type == "input_output") {
    samples = read_input_output(d, *tokenizer, train_on_inputs, max_tokens, rows);
  } else {
    samples = read_alpaca(d, *tokenizer, train_on_inputs, max_tokens, rows);
  }

  // As axolotl: samples longer than sequence_len first (handle_long_seq_in_dataset), then those
  // without a trained token (drop_no_trainable_tokens). See Note [Long and untrained samples].
  DatasetStats s;
  s.rows = static_cast<int64_t>(samples.size());
  std::vector<Sample> kept;
  kept.reserve(samples.size());
  for (size_t row = 0; row < samples.size(); ++row) {
    auto& sample = samples[row];
    const auto length = static_cast<int64_t>(sample.input_ids.size());
    if (length > sequence_len) {
      TORCH_CHECK(d.excess_length_strategy != "raise",
                  path.string(),
                  ": row ",
                  row + 1,
                  " has ",
                  length,
                  // A text row's count stops past sequence_len; see Note [Leading tokens].
                  type == "pretokenized" ? " tokens" : " tokens or more",
                  ", more than sequence_len ",
                  sequence_len,
                  "; raise sequence_len, shorten the row, or set excess_length_strategy: drop (or truncate)");
      if (d.excess_length_strategy == "drop") {
        ++s.dropped_long;
        continue;
      }
      sample.input_ids.resize(sequence_len);
      sample.labels.resize(sequence_len);
      ++s.truncated;
    }
    // labels[0] is never predicted (position t predicts labels[t + 1]).
    const bool predicts =
        sample.labels.size() > 1 &&
        std::any_of(sample.labels.begin() + 1, sample.labels.end(), [](int64_t l) { return l != -100; });
    if (predicts) {
      kept.push_back(std::move(sample));
    } else {
      ++s.dropped_untrained;
    }
  }
  if (stats) *stats = s;
  TORCH_CHECK(s.rows > 0, path.string(), ": the dataset has no rows");
  TORCH_CHECK(!kept.empty(),
              path.string(),
              ": none of its ",
              s.rows,
              " samples is kept: ",
              s.dropped_long,
              " are longer than sequence_len ",
              sequence_len,
              " (excess_length_strategy: drop) and ",
              s.dropped_untrained,
              " have no token to predict (prompts fill the window or labels are all -100); raise sequence_len",
              type == "alpaca"          ? " or set train_on_inputs: true"
              : type == "chat_template" ? " or check roles_to_train"
                                        : "");
  return kept;
}

}  // namespace qtrain::engine::data
