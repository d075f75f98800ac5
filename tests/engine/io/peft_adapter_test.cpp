// Tests for engine/io/peft_adapter: what the writer puts on disk (every field PEFT 0.21 writes,
// the tensor keys), round trips, the atomic folder replacement, the reader's refusals with their
// messages, and interop with peft itself (scripts/reference/peft_reference.py): peft loads
// qtrain's adapter with the intended weights and scaling, qtrain loads peft's adapter and
// re-saves it byte for byte, and lora_init / lora_delta reproduce torch's init and PEFT's forward
// (fp32, dropout, and the QLoRA bitsandbytes path in bf16) bit for bit.
#include "engine/io/peft_adapter.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "engine/lora/lora_config.h"
#include "engine/lora/lora_linear.h"
#include "tests/expect_error.h"

namespace qtrain::engine::io {
namespace {

namespace fs = std::filesystem;
using lora::LoraAdapter;
using lora::LoraConfig;
using nlohmann::json;
using test::expect_error;

// The keys of a LoRA adapter_config.json as peft 0.21.2 writes it.
const std::set<std::string> kPeftConfigKeys = {
    "alora_invocation_tokens",
    "alpha_pattern",
    "arrow_config",
    "auto_mapping",
    "base_model_name_or_path",
    "bias",
    "corda_config",
    "ensure_weight_tying",
    "eva_config",
    "exclude_modules",
    "fan_in_fan_out",
    "inference_mode",
    "init_lora_weights",
    "kasa_config",
    "layer_replication",
    "layers_pattern",
    "layers_to_transform",
    "loftq_config",
    "lora_alpha",
    "lora_bias",
    "lora_dropout",
    "lora_ga_config",
    "megatron_config",
    "megatron_core",
    "modules_to_save",
    "monteclora_config",
    "peft_type",
    "peft_version",
    "qalora_group_size",
    "r",
    "rank_pattern",
    "revision",
    "target_modules",
    "target_parameters",
    "task_type",
    "trainable_token_indices",
    "use_bdlora",
    "use_dora",
    "use_qalora",
    "use_rslora",
    "velora_config",
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

json read_json(const fs::path& path) {
  return json::parse(read_text(path));
}

void write_json(const fs::path& path, const json& j) {
  write_text(path, j.dump(2));
}

LoraConfig small_config() {
  LoraConfig c;
  c.r = 4;
  c.alpha = 8;
  c.dropout = 0.05;
  c.target_modules = {"q_proj", "v_proj"};
  return c;
}

// q_proj [64 -> 64] and v_proj [64 -> 32] of two layers, A from lora_init, B random (non-zero).
std::map<std::string, LoraAdapter> small_adapters(const LoraConfig& c, uint64_t seed = 1) {
  std::map<std::string, LoraAdapter> out;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (int layer = 0; layer < 2; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
    for (const auto& [name, out_features] : {std::pair{"q_proj", 64}, std::pair{"v_proj", 32}}) {
      LoraAdapter ad = lora::lora_init(64, out_features, c, gen);
      at::NoGradGuard no_grad;
      ad.b.normal_(0, 0.1, gen);
      out.emplace(prefix + name, ad);
    }
  }
  return out;
}

void expect_same_adapters(const std::map<std::string, LoraAdapter>& actual,
                          const std::map<std::string, LoraAdapter>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [module, want] : expected) {
    ASSERT_TRUE(actual.contains(module)) << module;
    const LoraAdapter& got = actual.at(module);
    EXPECT_TRUE(at::equal(got.a, want.a)) << module;
    EXPECT_TRUE(at::equal(got.b, want.b)) << module;
    EXPECT_EQ(got.scaling, want.scaling) << module;
  }
}

class PeftAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("qtrain_peft_" + std::string(test->name()) + "_" + std::to_string(::getpid()));
    qtrain::engine::io::remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  fs::path dir_;
};

TEST_F(PeftAdapterTest, WritesWhatPeftWrites) {
  const LoraConfig c = small_config();
  const auto adapters = small_adapters(c);
  const fs::path out = dir_ / "adapter";
  save_peft_adapter(out, c, adapters, "org/base-model");

  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(out)) files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"adapter_config.json", "adapter_model.safetensors"}));
  EXPECT_FALSE(fs::exists(dir_ / "adapter.tmp"));

  const json j = read_json(out / "adapter_config.json");
  std::set<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.insert(k);
  EXPECT_EQ(keys, kPeftConfigKeys);
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["peft_version"], "0.21.2");
  EXPECT_EQ(j["base_model_name_or_path"], "org/base-model");
  EXPECT_EQ(j["inference_mode"], true);
  EXPECT_EQ(j["r"], 4);
  EXPECT_TRUE(j["lora_alpha"].is_number_integer());  // PEFT writes an int alpha as an int
  EXPECT_EQ(j["lora_alpha"], 8);
  EXPECT_EQ(j["lora_dropout"], 0.05);
  EXPECT_EQ(j["use_rslora"], false);
  EXPECT_EQ(j["use_dora"], false);
  EXPECT_EQ(j["bias"], "none");
  EXPECT_EQ(j["target_modules"], json({"q_proj", "v_proj"}));
  EXPECT_EQ(j["modules_to_save"], nullptr);
  EXPECT_EQ(j["rank_pattern"], json::object());

  const SafetensorsFile file = SafetensorsFile::open(out / "adapter_model.safetensors");
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  std::set<std::string> names;
  for (const TensorInfo& t : file.tensors()) {
    names.insert(t.name);
    EXPECT_EQ(t.dtype, at::kFloat) << t.name;
  }
  std::set<std::string> expected_names;
  for (const auto& [module, ad] : adapters) {
    expected_names.insert("base_model.model." + module + ".lora_A.weight");
    expected_names.insert("base_model.model." + module + ".lora_B.weight");
  }
  EXPECT_EQ(names, expected_names);
  EXPECT_EQ(file.info("base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight").shape,
            (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(file.info("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight").shape,
            (std::vector<int64_t>{32, 4}));
}

TEST_F(PeftAdapterTest, RoundTripsConfigAndWeights) {
  const LoraConfig c = small_config();
  const auto adapters = small_adapters(c);
  save_peft_adapter(dir_ / "adapter", c, adapters, "org/base-model");
  const LoadedAdapter loaded = load_peft_adapter(dir_ / "adapter");
  EXPECT_EQ(loaded.base_model, "org/base-model");
  EXPECT_EQ(loaded.config.r, 4);
  EXPECT_EQ(loaded.config.alpha, 8);
  EXPECT_EQ(loaded.config.dropout, 0.05);
  EXPECT_EQ(loaded.config.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_FALSE(loaded.config.target_all_linear);
  EXPECT_FALSE(loaded.config.use_rslora);
  expect_same_adapters(loaded.adapters, adapters);
  for (const auto& [module, ad] : loaded.adapters) {
    EXPECT_TRUE(ad.a.requires_grad() && ad.a.is_leaf()) << module;
    EXPECT_TRUE(ad.b.requires_grad() && ad.b.is_leaf()) << module;
    EXPECT_EQ(ad.a.scalar_type(), at::kFloat);
    EXPECT_EQ(ad.dropout, 0.05);
  }
}

// A regular expression is written as target_modules as given (PEFT writes a string target_modules
// back as it read it): here it adapts layer 1's q_proj and no other q_proj, which the list of last
// components ["q_proj", "v_proj"] would widen to layer 0's.
TEST_F(PeftAdapterTest, RoundTripsARegularExpressionAsTargetModules) {
  LoraConfig c = small_config();
  c.target_modules.clear();
  c.target_modules_regex = "model\\.layers\\.(0\\.self_attn\\.v|1\\.self_attn\\.(q|v))_proj";
  auto adapters = small_adapters(c);
  adapters.erase("model.layers.0.self_attn.q_proj");
  save_peft_adapter(dir_ / "adapter", c, adapters, "base");
  EXPECT_EQ(read_json(dir_ / "adapter" / "adapter_config.json")["target_modules"], c.target_modules_regex);
  const LoadedAdapter loaded = load_peft_adapter(dir_ / "adapter");
  EXPECT_EQ(loaded.config.target_modules_regex, c.target_modules_regex);
  EXPECT_TRUE(loaded.config.target_modules.empty());
  EXPECT_FALSE(loaded.config.targets("model.layers.0.self_attn.q_proj"));
  expect_same_adapters(loaded.adapters, adapters);
  // An adapter for a module the expression does not match is refused when saving.
  expect_error([&] { save_peft_adapter(dir_ / "other", c, small_adapters(c), "base"); },
               "module 'model.layers.0.self_attn.q_proj' has an adapter but the config does not target it");
}

TEST_F(PeftAdapterTest, RoundTripsRsLoraFractionalAlphaAndNoBaseModel) {
  LoraConfig c = small_config();
  c.use_rslora = true;
  c.alpha = 12.5;
  c.r = 6;
  const auto adapters = small_adapters(c);
  save_peft_adapter(dir_ / "adapter", c, adapters, "");
  const json j = read_json(dir_ / "adapter" / "adapter_config.json");
  EXPECT_EQ(j["lora_alpha"], 12.5);
  EXPECT_EQ(j["use_rslora"], true);
  EXPECT_EQ(j["base_model_name_or_path"], nullptr);
  const LoadedAdapter loaded = load_peft_adapter(dir_ / "adapter");
  EXPECT_TRUE(loaded.config.use_rslora);
  EXPECT_EQ(loaded.config.alpha, 12.5);
  EXPECT_EQ(loaded.base_model, "");
  EXPECT_EQ(loaded.adapters.begin()->second.scaling, 12.5 / std::sqrt(6.0));
  expect_same_adapters(loaded.adapters, adapters);
}

TEST_F(PeftAdapterTest, SavesBf16AndLoadsItAsFp32) {
  const LoraConfig c = small_config();
  const auto adapters = small_adapters(c);
  save_peft_adapter(dir_ / "adapter", c, adapters, "base", at::kBFloat16);
  const SafetensorsFile file = SafetensorsFile::open(dir_ / "adapter" / "adapter_model.safetensors");
  for (const TensorInfo& t : file.tensors()) EXPECT_EQ(t.dtype, at::kBFloat16) << t.name;
  const LoadedAdapter loaded = load_peft_adapter(dir_ / "adapter");
  for (const auto& [module, ad] : adapters) {
    const LoraAdapter& got = loaded.adapters.at(module);
    EXPECT_EQ(got.a.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(got.a, ad.a.detach().to(at::kBFloat16).to(at::kFloat))) << module;
    EXPECT_TRUE(at::equal(got.b, ad.b.detach().to(at::kBFloat16).to(at::kFloat))) << module;
  }
}

TEST_F(PeftAdapterTest, ReplacesAnExistingAdapterAsAWhole) {
  const LoraConfig c = small_config();
  save_peft_adapter(dir_ / "adapter", c, small_adapters(c, 1), "first");
  write_text(dir_ / "adapter" / "README.md", "model card");  // PEFT writes one; it may be replaced

  LoraConfig c8 = c;
  c8.r = 8;
  c8.alpha = 16;
  const auto second = small_adapters(c8, 2);
  save_peft_adapter(dir_ / "adapter/", c8, second, "second");  // a trailing slash names the same folder
  const LoadedAdapter loaded = load_peft_adapter(dir_ / "adapter");
  EXPECT_EQ(loaded.base_model, "second");
  EXPECT_EQ(loaded.config.r, 8);
  expect_same_adapters(loaded.adapters, second);
  EXPECT_FALSE(fs::exists(dir_ / "adapter" / "README.md"));
  EXPECT_FALSE(fs::exists(dir_ / "adapter.tmp"));
  EXPECT_FALSE(fs::exists(dir_ / "adapter.old"));

  // A leftover "<dir>.tmp" from a crashed save is cleared, and parents are created.
  fs::create_directories(dir_ / "runs" / "adapter.tmp");
  write_text(dir_ / "runs" / "adapter.tmp" / "adapter_config.json", "{");
  save_peft_adapter(dir_ / "runs" / "adapter", c, small_adapters(c), "third");
  EXPECT_EQ(load_peft_adapter(dir_ / "runs" / "adapter").base_model, "third");
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "adapter.tmp"));
}

TEST_F(PeftAdapterTest, NeverDeletesOtherFilesOrTheOldAdapterOnError) {
  const LoraConfig c = small_config();
  const auto first = small_adapters(c, 1);
  save_peft_adapter(dir_ / "adapter", c, first, "first");

  // A save that fails validation leaves the old adapter as it was.
  auto bad = small_adapters(c, 2);
  bad.emplace("model.layers.0.mlp.down_proj", lora::lora_init(128, 64, c, 3));
  expect_error([&] { save_peft_adapter(dir_ / "adapter", c, bad, "second"); },
               "module 'model.layers.0.mlp.down_proj' has an adapter but the config does not target it");
  EXPECT_EQ(load_peft_adapter(dir_ / "adapter").base_model, "first");
  expect_same_adapters(load_peft_adapter(dir_ / "adapter").adapters, first);

  // A folder holding anything but adapter files is not replaced.
  fs::create_directories(dir_ / "run" / "checkpoint-10");
  expect_error([&] { save_peft_adapter(dir_ / "run", c, first, "x"); },
               (dir_ / "run").string() + " already holds 'checkpoint-10', which is not part of a PEFT adapter");
  EXPECT_TRUE(fs::exists(dir_ / "run" / "checkpoint-10"));
  EXPECT_FALSE(fs::exists(dir_ / "run.tmp"));
  write_text(dir_ / "file", "x");
  expect_error([&] { save_peft_adapter(dir_ / "file", c, first, "x"); }, "exists and is not a folder");
}

TEST_F(PeftAdapterTest, SaveRejectsInconsistentAdapters) {
  const LoraConfig c = small_config();
  const fs::path out = dir_ / "adapter";
  expect_error([&] { save_peft_adapter(out, c, {}, "b"); }, "no adapters to save");

  auto wrong_rank = small_adapters(c);
  LoraConfig c2 = c;
  c2.r = 2;
  wrong_rank["model.layers.0.self_attn.q_proj"] = lora::lora_init(64, 64, c2, 1);
  wrong_rank["model.layers.0.self_attn.q_proj"].scaling = c.scaling();
  expect_error([&] { save_peft_adapter(out, c, wrong_rank, "b"); },
               "module 'model.layers.0.self_attn.q_proj' has A [2, 64] and B [64, 2], but with r = 4 they must be "
               "[r, in_features] and [out_features, r]");

  auto wrong_scaling = small_adapters(c);
  wrong_scaling["model.layers.1.self_attn.v_proj"].scaling = 1.0;
  expect_error([&] { save_peft_adapter(out, c, wrong_scaling, "b"); },
               "module 'model.layers.1.self_attn.v_proj' has scaling 1 but the config's r = 4, lora_alpha = 8 give 2");

  auto bad_path = small_adapters(c);
  bad_path.emplace(".q_proj", bad_path.begin()->second);
  expect_error([&] { save_peft_adapter(out, c, bad_path, "b"); }, "'.q_proj' is not a module path");

  expect_error([&] { save_peft_adapter(out, c, small_adapters(c), "b", at::kInt); },
               "cannot save LoRA weights as Int; use float32, bfloat16 or float16");
  LoraConfig no_targets = c;
  no_targets.target_modules.clear();
  expect_error([&] { save_peft_adapter(out, no_targets, small_adapters(c), "b"); }, "no LoRA target modules");
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(dir_ / "adapter.tmp"));
}

// Each case breaks a good adapter in one way; the loader must refuse it with a message naming the
// file and the key.
TEST_F(PeftAdapterTest, LoadRejectsBrokenAndUnsupportedAdapters) {
  const LoraConfig c = small_config();
  const auto adapters = small_adapters(c);
  const fs::path good = dir_ / "good";
  save_peft_adapter(good, c, adapters, "base");
  const std::string config_name = "adapter_config.json";
  const std::string weights_name = "adapter_model.safetensors";
  const std::string q0 = "base_model.model.model.layers.0.self_attn.q_proj";

  // Rewrites the tensors: all of the good ones, minus `drop`, plus `extra`.
  const auto rewrite_tensors = [&](const fs::path& dir,
                                   const std::set<std::string>& drop,
                                   std::vector<std::pair<std::string, at::Tensor>> extra) {
    for (const auto& [name, t] : safetensors_load(good / weights_name)) {
      if (!drop.contains(name)) extra.emplace_back(name, t.clone());
    }
    safetensors_save(dir / weights_name, extra);
  };

  struct Case {
    std::string name;
    std::function<void(const fs::path&)> corrupt;
    std::string fragment;  // after "<dir>/<file>: " when `file` is set
    std::string file;      // config_name or weights_name, or "" for a whole-message fragment
  };
  const auto edit_config = [&](std::function<void(json&)> edit) {
    return [edit, config_name](const fs::path& dir) {
      json j = read_json(dir / config_name);
      edit(j);
      write_json(dir / config_name, j);
    };
  };
  const std::vector<Case> cases = {
      {"missing_b",
       [&](const fs::path& d) { rewrite_tensors(d, {q0 + ".lora_B.weight"}, {}); },
       "module 'model.layers.0.self_attn.q_proj' has lora_A.weight but no lora_B.weight; every adapted module "
       "needs both",
       weights_name},
      {"missing_a",
       [&](const fs::path& d) { rewrite_tensors(d, {q0 + ".lora_A.weight"}, {}); },
       "module 'model.layers.0.self_attn.q_proj' has lora_B.weight but no lora_A.weight",
       weights_name},
      {"r_mismatch",
       edit_config([](json& j) { j["r"] = 8; }),
       "'" + q0 + ".lora_A.weight' has shape [4, 64] but ",
       weights_name},
      {"b_shape_mismatch",
       [&](const fs::path& d) {
         rewrite_tensors(d, {q0 + ".lora_B.weight"}, {{q0 + ".lora_B.weight", at::zeros({64, 3})}});
       },
       "'" + q0 + ".lora_B.weight' has shape [64, 3] but ",
       weights_name},
      {"use_dora_without_magnitudes",
       edit_config([](json& j) { j["use_dora"] = true; }),
       "module 'model.layers.0.self_attn.q_proj' has no DoRA magnitude (lora_magnitude_vector) but ",
       weights_name},
      {"magnitude_without_use_dora",
       [&](const fs::path& d) {
         rewrite_tensors(d, {}, {{q0 + ".lora_magnitude_vector", at::ones({64})}});
       },
       "tensor '" + q0 + ".lora_magnitude_vector' is a DoRA magnitude, but ",
       weights_name},
      {"rank_pattern",
       edit_config([](json& j) {
         j["rank_pattern"] = {{"q_proj", 8}};
       }),
       "'" + q0 + ".lora_A.weight' has shape [4, 64] but ",
       weights_name},
      {"rank_pattern_not_a_map",
       edit_config([](json& j) { j["rank_pattern"] = 8; }),
       "\"rank_pattern\" is 8; it must map regular expressions of module names to a rank each",
       config_name},
      {"alpha_pattern",
       edit_config([](json& j) {
         j["alpha_pattern"] = {{"v_proj", "x"}};
       }),
       "\"alpha_pattern\" gives 'v_proj' the alpha \"x\"; it must be a number",
       config_name},
      {"router_parameter_rank",
       [&](const fs::path& d) {
         // What peft's all-linear writes for a Qwen3-MoE router (mlp.gate.weight, dropout 0 as
         // parameters need), with lora_A of rank 3 where r is 4.
         edit_config([](json& j) {
           j["target_parameters"] = {"gate.weight"};
           j["lora_dropout"] = 0.0;
         })(d);
         const std::string gate = "base_model.model.model.layers.0.mlp.gate";
         rewrite_tensors(
             d, {}, {{gate + ".lora_A.weight", at::zeros({3, 64})}, {gate + ".lora_B.weight", at::zeros({8, 3})}});
       },
       "'base_model.model.model.layers.0.mlp.gate.lora_A.weight' has shape [3, 64] but ",
       weights_name},
      {"modules_to_save_without_weights",
       edit_config([](json& j) { j["modules_to_save"] = {"lm_head"}; }),
       "\"modules_to_save\" in ",
       weights_name},
      {"modules_to_save_other_module",
       edit_config([](json& j) { j["modules_to_save"] = {"mlp"}; }),
       "modules_to_save names 'mlp'; qtrain trains the token embeddings, the output head and the norms in full",
       config_name},
      {"lora_bias",
       edit_config([](json& j) { j["lora_bias"] = true; }),
       "\"lora_bias\" is true, which needs a trained bias on lora_B: not supported",
       config_name},
      {"bias_all",
       edit_config([](json& j) { j["bias"] = "all"; }),
       "\"bias\" is \"all\": trained base-layer biases are not supported",
       config_name},
      {"layers_to_transform",
       edit_config([](json& j) { j["layers_to_transform"] = {0}; }),
       "\"layers_to_transform\" is [0], which needs LoRA restricted to some layer indices",
       config_name},
      {"pissa_init",
       edit_config([](json& j) { j["init_lora_weights"] = "pissa_niter_4"; }),
       "\"init_lora_weights\" is \"pissa_niter_4\": this init rewrites the base model's weights",
       config_name},
      {"not_lora",
       edit_config([](json& j) { j["peft_type"] = "LOHA"; }),
       "\"peft_type\" is \"LOHA\"; qtrain loads LoRA adapters only",
       config_name},
      {"no_peft_type",
       edit_config([](json& j) { j.erase("peft_type"); }),
       "no \"peft_type\"; this is not a PEFT adapter config",
       config_name},
      {"seq_cls",
       edit_config([](json& j) { j["task_type"] = "SEQ_CLS"; }),
       "\"task_type\" is \"SEQ_CLS\"; qtrain trains causal language models",
       config_name},
      {"missing_r",
       edit_config([](json& j) { j.erase("r"); }),
       "\"r\" is missing; it must be the LoRA rank, an integer",
       config_name},
      {"zero_r", edit_config([](json& j) { j["r"] = 0; }), "LoRA rank r is 0; it must be at least 1", config_name},
      {"unreadable_regex_targets",
       edit_config([](json& j) { j["target_modules"] = "(?P<name>q|v)_proj"; }),
       "target_modules '(?P<name>q|v)_proj' is not a regular expression qtrain can read",
       config_name},
      {"regex_missing_a_module",
       edit_config([](json& j) { j["target_modules"] = "model\\.layers\\.\\d+\\.self_attn\\.q_proj"; }),
       "has weights for module 'model.layers.0.self_attn.v_proj', but \"target_modules\" in ",
       weights_name},
      {"untargeted_module",
       edit_config([](json& j) { j["target_modules"] = {"q_proj"}; }),
       "has weights for module 'model.layers.0.self_attn.v_proj', but \"target_modules\" in ",
       weights_name},
      {"bad_prefix",
       [&](const fs::path& d) {
         rewrite_tensors(d, {}, {{"model.layers.0.self_attn.k_proj.lora_A.weight", at::zeros({4, 64})}});
       },
       "tensor 'model.layers.0.self_attn.k_proj.lora_A.weight' does not start with \"base_model.model.\"",
       weights_name},
      {"int_weights",
       [&](const fs::path& d) {
         rewrite_tensors(d, {q0 + ".lora_A.weight"}, {{q0 + ".lora_A.weight", at::zeros({4, 64}, at::kInt)}});
       },
       "'" + q0 + ".lora_A.weight' has dtype Int; LoRA weights must be F32, BF16 or F16",
       weights_name},
      {"bad_json",
       [&](const fs::path& d) { write_text(d / config_name, "{\"r\": 4,"); },
       "not valid JSON",
       config_name},
      {"no_config",
       [&](const fs::path& d) { fs::remove(d / config_name); },
       "has no adapter_config.json; point at the folder that PeftModel.save_pretrained (or qtrain) wrote",
       ""},
      {"bin_only",
       [&](const fs::path& d) { fs::rename(d / weights_name, d / "adapter_model.bin"); },
       "holds adapter_model.bin but no adapter_model.safetensors; qtrain reads safetensors only",
       ""},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const fs::path d = dir_ / k.name;
    fs::copy(good, d);
    k.corrupt(d);
    const std::string fragment = k.file.empty() ? k.fragment : (d / k.file).string() + ": " + k.fragment;
    expect_error([&] { load_peft_adapter(d); }, fragment);
  }
  expect_error([&] { load_peft_adapter(dir_ / "nowhere"); }, "does not exist or is not a folder");
  // "all-linear" written by hand is understood.
  fs::copy(good, dir_ / "all_linear");
  edit_config([](json& j) { j["target_modules"] = "all-linear"; })(dir_ / "all_linear");
  EXPECT_TRUE(load_peft_adapter(dir_ / "all_linear").config.target_all_linear);
}

// --- interop with peft -----------------------------------------------------------------------

// The module shapes of scripts/reference/peft_reference.py's tiny Llama (hidden 64, 2 kv heads of
// 16, intermediate 128).
struct ModuleShape {
  const char* name;
  int64_t in, out;
};
constexpr ModuleShape kQtrainModules[] = {
    {"self_attn.q_proj", 64, 64},
    {"self_attn.v_proj", 64, 32},
    {"mlp.down_proj", 128, 64},
};

class PeftInteropTest : public PeftAdapterTest {
 protected:
  void SetUp() override {
    PeftAdapterTest::SetUp();
    const char* python = std::getenv("QTRAIN_PYTHON");
    if (python == nullptr || *python == '\0') {
      GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
    }
    python_ = python;
  }
  std::string python_;
};

// qtrain's adapter for the modules of kQtrainModules in both layers that `config` targets, saved
// into dir/NAME, and what PEFT must end up with into dir/NAME_expected.safetensors (the weights,
// the scaling and a regular expression target_modules); returns the reference script's arguments
// for the pair.
std::string write_qtrain_adapter(const fs::path& dir,
                                 const std::string& name,
                                 const LoraConfig& config,
                                 uint64_t seed) {
  std::map<std::string, LoraAdapter> adapters;
  std::vector<std::pair<std::string, at::Tensor>> expected;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (int layer = 0; layer < 2; ++layer) {
    for (const ModuleShape& m : kQtrainModules) {
      const std::string module = "model.layers." + std::to_string(layer) + "." + m.name;
      if (!config.targets(module)) continue;
      LoraAdapter ad = lora::lora_init(m.in, m.out, config, gen);
      {
        at::NoGradGuard no_grad;
        ad.b.normal_(0, 0.05, gen);
      }
      expected.emplace_back(module + ".lora_A", ad.a.detach());
      expected.emplace_back(module + ".lora_B", ad.b.detach());
      adapters.emplace(module, ad);
    }
  }
  const fs::path adapter = dir / name;
  save_peft_adapter(adapter, config, adapters, (dir / "base").string());
  char scaling[64];
  std::snprintf(scaling, sizeof scaling, "%.17g", config.scaling());
  std::map<std::string, std::string> metadata = {{"scaling", scaling}};
  if (!config.target_modules_regex.empty()) metadata["target_modules_regex"] = config.target_modules_regex;
  const fs::path want = dir / (name + "_expected.safetensors");
  safetensors_save(want, expected, metadata);
  return " --qtrain-adapter '" + adapter.string() + "' --qtrain-expected '" + want.string() + "'";
}

// One run of the reference script does both directions (see its docstring): its import of
// transformers and peft is most of the test's time.
TEST_F(PeftInteropTest, AdaptersAndNumericsMatchPeft) {
  // (a) qtrain -> peft: rsLoRA with r 6, so PEFT must reproduce alpha / sqrt(r) exactly; and a
  // regular expression that adapts layer 0's down_proj and layer 1's q_proj and v_proj only, which
  // PEFT must read as written (a list of last components would widen it to both layers).
  LoraConfig ours;
  ours.r = 6;
  ours.alpha = 12;
  ours.dropout = 0.05;
  ours.use_rslora = true;
  ours.target_modules = {"q_proj", "v_proj", "down_proj"};
  LoraConfig pattern;
  pattern.r = 4;
  pattern.alpha = 8;
  pattern.target_modules_regex = "model\\.layers\\.(0\\.mlp\\.down|1\\.self_attn\\.(q|v))_proj";
  const std::string adapters_args =
      write_qtrain_adapter(dir_, "qtrain_adapter", ours, 42) + write_qtrain_adapter(dir_, "qtrain_regex", pattern, 43);

  // QTRAIN_SOURCE_DIR: the repository root, a compile definition of the test target.
  const fs::path script = fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/peft_reference.py";
  const fs::path log = dir_ / "peft_reference.log";
  const std::string command = "'" + python_ + "' '" + script.string() + "' --work '" + dir_.string() + "'" +
                              adapters_args + " > '" + log.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_EQ(status, 0) << "peft rejected or misread qtrain's adapter, or the script failed:\n"
                       << command << "\n"
                       << read_text(log);

  // (b) peft -> qtrain.
  const fs::path peft_adapter = dir_ / "peft_adapter";
  const SafetensorsFile want = SafetensorsFile::open(dir_ / "peft_expected.safetensors");
  const LoadedAdapter loaded = load_peft_adapter(peft_adapter);
  EXPECT_EQ(loaded.config.r, 4);
  EXPECT_EQ(loaded.config.alpha, 8);
  EXPECT_EQ(loaded.config.dropout, 0.1);
  EXPECT_FALSE(loaded.config.use_rslora);
  auto targets = loaded.config.target_modules;  // peft writes a set, in no particular order
  std::sort(targets.begin(), targets.end());
  EXPECT_EQ(targets, (std::vector<std::string>{"gate_proj", "k_proj", "o_proj", "q_proj"}));
  EXPECT_EQ(loaded.base_model, (dir_ / "base").string());
  EXPECT_EQ(loaded.adapters.size(), 8u);
  for (const auto& [module, ad] : loaded.adapters) {
    EXPECT_TRUE(at::equal(ad.a, want.tensor(module + ".lora_A"))) << module;
    EXPECT_TRUE(at::equal(ad.b, want.tensor(module + ".lora_B"))) << module;
    EXPECT_EQ(ad.scaling, 2.0) << module;
  }

  // Re-saved by qtrain, peft's adapter comes out as the same bytes, and as the same config apart
  // from the order of target_modules.
  const fs::path resaved = dir_ / "resaved";
  save_peft_adapter(resaved, loaded.config, loaded.adapters, loaded.base_model);
  EXPECT_TRUE(read_text(resaved / kPeftWeightsFile) == read_text(peft_adapter / kPeftWeightsFile))
      << "qtrain's adapter_model.safetensors differs from peft's";
  json peft_config = read_json(peft_adapter / kPeftConfigFile);
  auto peft_targets = peft_config["target_modules"].get<std::vector<std::string>>();
  std::sort(peft_targets.begin(), peft_targets.end());
  peft_config["target_modules"] = peft_targets;
  EXPECT_EQ(read_json(resaved / kPeftConfigFile), peft_config);

  // lora_init draws exactly what nn.init.kaiming_uniform_(a=sqrt(5)) draws from the same seed.
  LoraConfig r4;
  r4.r = 4;
  r4.target_modules = {"q_proj"};
  EXPECT_TRUE(at::equal(lora::lora_init(64, 8, r4, 1234).a.detach(), want.tensor("init.A")))
      << "lora_init differs from torch's kaiming_uniform_";

  // PEFT's forward of layer 0's q_proj, bit for bit: fp32 eval, fp32 train with dropout from the
  // default generator, and QLoRA's bitsandbytes path in bf16 (See Note [LoRA numerics]).
  const LoraAdapter& q0 = loaded.adapters.at("model.layers.0.self_attn.q_proj");
  const at::Tensor x = want.tensor("numerics.x");
  const at::Tensor w = want.tensor("numerics.w");
  EXPECT_TRUE(at::equal(at::linear(x, w) + lora::lora_delta(x, q0, false), want.tensor("numerics.y_eval")))
      << "fp32 eval forward differs from PEFT's";
  at::manual_seed(7);
  EXPECT_TRUE(at::equal(at::linear(x, w) + lora::lora_delta(x, q0, true), want.tensor("numerics.y_train")))
      << "fp32 training forward (dropout 0.1) differs from PEFT's";
  const at::Tensor x_bf16 = want.tensor("numerics.x_bf16");
  const at::Tensor qlora = want.tensor("numerics.qlora_base_out") + lora::lora_delta(x_bf16, q0, false);
  EXPECT_EQ(qlora.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(qlora, want.tensor("numerics.qlora_y")))
      << "bf16 QLoRA forward differs from PEFT's bnb Linear4bit in "
      << (qlora != want.tensor("numerics.qlora_y")).sum().item<int64_t>() << " elements";
}

}  // namespace
}  // namespace qtrain::engine::io
