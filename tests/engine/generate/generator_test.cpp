// Generation against transformers + peft: greedy token ids equal model.generate(do_sample=False)
// on every architecture's fixture with its adapter, on float32, NF4 and INT8 bases
// (scripts/reference/generate_reference.py), batched equal to one at a time; text streams in
// pieces that add up to the completion, and a stop string ends it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "engine/data/byte_tokenizer.h"
#include "engine/generate/generator.h"
#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"
#include "tests/expect_error.h"
#include "tests/reference.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::generate {
namespace {

namespace fs = std::filesystem;

struct Case {
  fs::path fixture;
  std::string quant;  // fp32 | nf4 | int8
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gemma4"}) {
    out.push_back({test::model_fixture(arch), "fp32"});
  }
  for (const char* name : {"qwen3_moe", "mixtral", "gemma4_moe"}) out.push_back({test::moe_fixture(name), "fp32"});
  for (const char* quant : {"nf4", "int8"}) {
    for (const char* arch : {"llama", "gemma3"}) out.push_back({test::model_fixture(arch), quant});
  }
  return out;
}

// As the fixtures' parity tests load them (tests/engine/model/model_parity_test.cpp): NF4 with
// double quantization; INT8 evaluated as LLM.int8() with threshold 6.
model::CausalLM load(const Case& c) {
  model::LoadOptions options;
  if (c.quant == "nf4") {
    options.quant.kind = model::QuantSpec::Kind::nf4;
    options.quant.double_quant = true;
  } else if (c.quant == "int8") {
    options.quant.kind = model::QuantSpec::Kind::int8;
    options.quant.int8_compute = ops::Int8Compute::llm_int8;
    options.quant.int8_threshold = 6.0;
  }
  auto lm = model::CausalLM::load(io::HfFolder::open(c.fixture / "base"), options);
  model::attach_lora(lm, io::load_peft_adapter(c.fixture / "adapter"), (c.fixture / "adapter").string());
  return lm;
}

constexpr int64_t kNewTokens = 12;
const std::vector<int64_t> kStop = {2};  // the fixtures' eos_token_id

std::vector<std::vector<int64_t>> prompts(int64_t vocab, int64_t seed) {
  at::manual_seed(seed);
  std::vector<std::vector<int64_t>> out;
  for (const int64_t n : {7, 3, 10}) {
    const auto t = at::randint(3, vocab, {n}, at::TensorOptions().dtype(at::kLong));
    out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
  }
  return out;
}

GenerationOptions greedy(int64_t batch_size) {
  GenerationOptions o;
  o.max_new_tokens = kNewTokens;
  o.stop_ids = kStop;
  o.batch_size = batch_size;
  return o;
}

// Whether `ours` is `theirs` up to a step where transformers' two best logits tie within
// float32 summation order (`scores`: its logits per step), after which both may go either way.
::testing::AssertionResult same_or_tied(const std::vector<int64_t>& ours,
                                        const std::vector<int64_t>& theirs,
                                        const nlohmann::json& scores) {
  for (size_t i = 0; i < std::min(ours.size(), theirs.size()); ++i) {
    if (ours[i] == theirs[i]) continue;
    const auto row = scores[i].get<std::vector<float>>();
    const float top = *std::max_element(row.begin(), row.end());
    const float largest = std::max(std::abs(top), 1e-6f);
    if (ours[i] >= 0 && ours[i] < static_cast<int64_t>(row.size()) && top - row[ours[i]] < 1e-4f * largest) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "token " << i << ": ours " << ours[i] << " (logit " << row[ours[i]]
                                         << "), transformers' " << theirs[i] << " (logit " << top << ")";
  }
  if (ours.size() != theirs.size()) {
    return ::testing::AssertionFailure() << ours.size() << " tokens, transformers made " << theirs.size();
  }
  return ::testing::AssertionSuccess();
}

TEST(Generate, GreedyEqualsTransformersAndBatchedEqualsOneAtATime) {
  if (std::getenv("QTRAIN_FIXTURES") == nullptr) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
  const auto all = cases();
  const data::ByteTokenizer tokenizer;
  std::vector<std::vector<std::vector<int64_t>>> inputs;
  std::vector<std::vector<Completion>> alone, batched;
  nlohmann::json settings = {{"cases", nlohmann::json::array()}};
  for (size_t k = 0; k < all.size(); ++k) {
    auto lm = load(all[k]);
    schedule::LayerScheduler scheduler(lm);
    inputs.push_back(prompts(lm.config().vocab_size, static_cast<int64_t>(k)));
    alone.push_back(generate(scheduler, tokenizer, inputs.back(), greedy(1)));
    batched.push_back(generate(scheduler, tokenizer, inputs.back(), greedy(3)));
    settings["cases"].push_back({{"base", (all[k].fixture / "base").string()},
                                 {"adapter", (all[k].fixture / "adapter").string()},
                                 {"quant", all[k].quant},
                                 {"prompts", inputs.back()},
                                 {"max_new_tokens", kNewTokens},
                                 {"stop_ids", kStop}});
  }
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto dir = test::fresh_test_dir(/*create=*/true);
  std::ofstream(dir / "settings.json") << settings.dump();
  const std::string cmd = std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                          (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/generate_reference.py").string() + " " +
                          (dir / "settings.json").string() + " " + (dir / "out.json").string() + " > " +
                          (dir / "log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto theirs = nlohmann::json::parse(std::ifstream(dir / "out.json")).at("cases");
  for (size_t k = 0; k < all.size(); ++k) {
    const std::string what = all[k].fixture.filename().string() + "/" + all[k].quant;
    for (size_t p = 0; p < inputs[k].size(); ++p) {
      const auto expected = theirs[k].at("sequences")[p].get<std::vector<int64_t>>();
      const auto& scores = theirs[k].at("scores")[p];
      EXPECT_TRUE(same_or_tied(alone[k][p].ids, expected, scores)) << what << " prompt " << p;
      EXPECT_TRUE(same_or_tied(batched[k][p].ids, expected, scores)) << what << " prompt " << p << ", batched";
      const bool stopped = !expected.empty() && expected.back() == kStop[0];
      EXPECT_EQ(alone[k][p].stop_reason, stopped ? "stop_token" : "max_new_tokens") << what << " prompt " << p;
    }
  }
  io::remove_tree(dir);
}

TEST(Generate, TextStreamsInPiecesAndAStopStringEndsIt) {
  if (std::getenv("QTRAIN_FIXTURES") == nullptr) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
  auto lm = load({test::model_fixture("llama"), "fp32"});
  schedule::LayerScheduler scheduler(lm);
  const data::ByteTokenizer tokenizer;  // ids below 256 are bytes: the text is the ids
  auto o = greedy(1);
  o.stop_ids = {};
  o.max_new_tokens = 16;
  const auto input = prompts(lm.config().vocab_size, 11);
  std::vector<std::string> streamed(input.size());
  const auto whole =
      generate(scheduler, tokenizer, input, o, [&](size_t i, const std::string& piece) { streamed.at(i) += piece; });
  for (size_t i = 0; i < input.size(); ++i) {
    EXPECT_EQ(whole[i].ids.size(), 16u);
    EXPECT_EQ(whole[i].text, tokenizer.decode(whole[i].ids, true));
    EXPECT_EQ(streamed[i], whole[i].text) << "prompt " << i;
    EXPECT_EQ(whole[i].stop_reason, "max_new_tokens");
  }
  // A stop string from the middle of the first completion: the text ends before it, and no
  // piece of it was streamed.
  o.stop_strings = {whole[0].text.substr(5, 3)};
  std::string piece_text;
  const auto cut =
      generate(scheduler, tokenizer, {input[0]}, o, [&](size_t, const std::string& piece) { piece_text += piece; });
  const auto at = whole[0].text.find(o.stop_strings[0]);
  EXPECT_EQ(cut[0].stop_reason, "stop_string");
  EXPECT_EQ(cut[0].text, whole[0].text.substr(0, at));
  EXPECT_EQ(piece_text, cut[0].text);
  EXPECT_LT(cut[0].ids.size(), 16u);
  o.stop_strings = {""};
  test::expect_error([&] { generate(scheduler, tokenizer, {input[0]}, o); }, "--stop: an empty text");
}

}  // namespace
}  // namespace qtrain::engine::generate
