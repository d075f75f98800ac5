// JSON nested ~65,000 levels deep in every kind of file qtrain reads: each is refused with the
// file and the place, before a recursive dump() of the value (in an error message) could overflow
// the stack. Without the check these crash with SIGSEGV.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "engine/data/pretokenized.h"
#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

const std::string kDeep = std::string(65000, '[') + std::string(65000, ']');
const std::string kTooDeep = "JSON nested more than 256 levels deep";

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(DeepJson, EveryParserRefusesItWithTheFile) {
  const auto dir = test::fresh_test_dir(true);
  write_text(dir / "config.json", "{\"model_type\": \"llama\", \"num_hidden_layers\": " + kDeep + "}");
  expect_error([&] { io::HfFolder::open(dir); }, (dir / "config.json").string() + ": line 1, column 301: " + kTooDeep);

  // A safetensors header: 8 bytes of little-endian length, then the JSON.
  const std::string header = "{\"w\": {\"dtype\": \"F32\", \"shape\": " + kDeep + ", \"data_offsets\": [0, 4]}}";
  std::ofstream weights(dir / "deep.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) weights.put(static_cast<char>((n >> (8 * i)) & 0xff));
  weights << header << std::string(4, '\0');
  weights.close();
  expect_error([&] { io::SafetensorsFile::open(dir / "deep.safetensors"); }, kTooDeep);

  const auto adapter = dir / "adapter";
  fs::create_directories(adapter);
  write_text(adapter / "adapter_config.json", "{\"peft_type\": \"LORA\", \"r\": " + kDeep + "}");
  write_text(adapter / "adapter_model.safetensors", "");
  expect_error([&] { io::load_peft_adapter(adapter); }, "adapter_config.json: line 1, column 283: " + kTooDeep);

  write_text(dir / "rows.jsonl", "{\"input_ids\": [1, 2]}\n{\"input_ids\": " + kDeep + "}\n");
  expect_error([&] { data::for_each_jsonl_row(dir / "rows.jsonl", [](const auto&, const auto&) {}); },
               "rows.jsonl:2: line 1, column 270: " + kTooDeep);
  write_text(dir / "rows.json", "[{\"text\": \"a\"}, {\"text\": " + kDeep + "}]");
  expect_error([&] { data::for_each_jsonl_row(dir / "rows.json", [](const auto&, const auto&) {}); },
               "rows.json: line 1, column 280: " + kTooDeep);
  qtrain::engine::io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine
