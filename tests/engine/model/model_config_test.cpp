// Gemma configs as transformers reads files it did not write itself (Hub-style Gemma 2, Gemma 3
// 1B and the multimodal Gemma 3 4B config, scripts/reference/model_reference.py; Gemma 4's three
// spellings, scripts/reference/gemma4_reference.py): layer kinds, window, head_dim, scalars and
// the rope frequencies of each layer kind; and tiny multimodal Gemma 3 and 4 folders, whose
// decoder qtrain reads from under its language_model prefix, against transformers' text-only
// logits and loss. MoE configs: which layers are sparse, the key transformers 5 writes
// num_experts as, and the refused keys.
#include "engine/model/model_config.h"

#include <cmath>
#include <fstream>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/io/peft_adapter.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::engine::model {
namespace {

class GemmaConfig : public testing::TestWithParam<std::string> {};

TEST_P(GemmaConfig, ReadsWhatTransformersReads) {
  const auto& name = GetParam();
  const auto dir = test::model_fixture("gemma_configs");
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  std::ifstream f(dir / name / "config.json");
  const auto c = ModelConfig::from_json(nlohmann::json::parse(f), name);
  const auto sliding = ref.tensor(name + ".sliding");
  ASSERT_EQ(c.num_layers, sliding.size(0));
  const int64_t window = ref.tensor(name + ".window").item<int64_t>();
  for (int64_t i = 0; i < c.num_layers; ++i) {
    EXPECT_EQ(c.sliding_window[i], sliding[i].item<int64_t>() ? std::optional<int64_t>(window) : std::nullopt)
        << "layer " << i;
  }
  const auto s = ref.tensor(name + ".scalars");
  auto cap = [](double v) { return std::isnan(v) ? std::nullopt : std::optional<double>(v); };
  EXPECT_EQ(c.query_pre_attn_scalar, s[0].item<double>());
  EXPECT_EQ(c.final_logit_softcap, cap(s[1].item<double>()));
  EXPECT_EQ(c.attn_logit_softcap, cap(s[2].item<double>()));
  EXPECT_EQ(c.vocab_size, s[3].item<int64_t>());
  EXPECT_EQ(c.num_heads, s[4].item<int64_t>());
  EXPECT_EQ(c.num_kv_heads, s[5].item<int64_t>());
  EXPECT_EQ(c.head_dim, s[6].item<int64_t>());
  EXPECT_EQ(c.tie_word_embeddings, s[7].item<double>() != 0);
  EXPECT_TRUE(c.gemma);
  EXPECT_EQ(c.hidden_act, Activation::gelu_tanh);
  // The same float32 ops as transformers' rotary classes: equal bits.
  const auto full = ops::rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling);
  const auto local =
      c.sliding_rope ? ops::rope_inv_freq(c.head_dim, c.sliding_rope->theta, c.sliding_rope->scaling) : full;
  EXPECT_TRUE(at::equal(full, ref.tensor(name + ".inv_freq.full")));
  EXPECT_TRUE(at::equal(local, ref.tensor(name + ".inv_freq.sliding")));
}

INSTANTIATE_TEST_SUITE_P(HubFiles,
                         GemmaConfig,
                         testing::Values("gemma2_hub", "gemma3_1b", "gemma3_4b"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(GemmaConfigErrors, RejectsWhatItCannotTrain) {
  nlohmann::json j = {{"model_type", "gemma2"}, {"hidden_activation", "gelu"}};
  try {
    ModelConfig::from_json(j, "g.json");
    FAIL() << "accepted hidden_activation gelu";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("g.json: hidden_activation 'gelu' is not supported for gemma2"),
              std::string::npos)
        << e.what();
  }
  j = {{"model_type", "gemma3_text"}, {"use_bidirectional_attention", true}};
  EXPECT_THROW(ModelConfig::from_json(j, "g.json"), c10::Error);
  j = {{"model_type", "gemma3"}};
  EXPECT_THROW(ModelConfig::from_json(j, "g.json"), c10::Error);
}

// float32 on both sides, the same ops: rounding only (model_parity_test.cpp's tolerances).
TEST(GemmaMultimodal, TheLanguageModelOfAGemma3ForConditionalGenerationMatchesTransformers) {
  const auto dir = test::model_fixture("gemma3_mm");
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = CausalLM::load(io::HfFolder::open(dir / "base"), {});
  EXPECT_EQ(lm.layers()[0].q.name, "model.language_model.layers.0.self_attn.q_proj");
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_eval();
  const auto ids = ref.tensor("ids");
  const auto logits = lm.logits(scheduler.eval_hidden(plan, ids));
  const auto want = ref.tensor("logits");
  EXPECT_LT(((logits - want).abs().max() / want.abs().max()).item<double>(), 2e-5);
  const auto [sum, tokens] = scheduler.eval_loss(plan, ids, ref.tensor("labels"));
  EXPECT_NEAR((sum / tokens).item<double>(), ref.tensor("loss").item<double>(), 2e-6);
}

// Gemma 4 configs as transformers reads them (scripts/reference/gemma4_reference.py): the Hub
// file's global_head_dim form, transformers' re-saved per_layer_config form and a multimodal
// gemma4 with text_config give each layer's kind, head_dim, kv heads and v_proj presence, and the
// rope frequencies of each kind, bit for bit.
class Gemma4Config : public testing::TestWithParam<std::string> {};

TEST_P(Gemma4Config, ReadsWhatTransformersReads) {
  const auto& name = GetParam();
  const auto dir = test::model_fixture("gemma4_configs");
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  std::ifstream f(dir / name / "config.json");
  const auto c = ModelConfig::from_json(nlohmann::json::parse(f), name);
  EXPECT_EQ(c.arch, Architecture::gemma4);
  const auto sliding = ref.tensor(name + ".sliding"), head_dim = ref.tensor(name + ".head_dim");
  const auto kv_heads = ref.tensor(name + ".kv_heads"), k_eq_v = ref.tensor(name + ".k_eq_v");
  const auto s = ref.tensor(name + ".scalars");
  ASSERT_EQ(c.num_layers, sliding.size(0));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    EXPECT_EQ(c.sliding_window[i],
              sliding[i].item<int64_t>() ? std::optional<int64_t>(s[0].item<int64_t>()) : std::nullopt)
        << "layer " << i;
    EXPECT_EQ(c.attention(i).head_dim, head_dim[i].item<int64_t>()) << "layer " << i;
    EXPECT_EQ(c.attention(i).num_kv_heads, kv_heads[i].item<int64_t>()) << "layer " << i;
    EXPECT_EQ(c.attention(i).k_eq_v, k_eq_v[i].item<int64_t>() != 0) << "layer " << i;
  }
  auto cap = [](double v) { return std::isnan(v) ? std::nullopt : std::optional<double>(v); };
  EXPECT_EQ(c.final_logit_softcap, cap(s[1].item<double>()));
  EXPECT_EQ(c.vocab_size, s[2].item<int64_t>());
  EXPECT_EQ(c.num_heads, s[3].item<int64_t>());
  EXPECT_EQ(c.tie_word_embeddings, s[4].item<double>() != 0);
  EXPECT_EQ(c.weight_prefix, name == "gemma4_multimodal" ? "model.language_model." : "model.");
  EXPECT_FALSE(c.query_pre_attn_scalar);
  ASSERT_TRUE(c.sliding_rope);
  // The same float32 ops as Gemma4TextRotaryEmbedding: equal bits.
  EXPECT_TRUE(at::equal(ops::rope_inv_freq(c.rope_head_dim(false), c.rope_theta, c.rope_scaling),
                        ref.tensor(name + ".inv_freq.full")));
  EXPECT_TRUE(at::equal(ops::rope_inv_freq(c.rope_head_dim(true), c.sliding_rope->theta, c.sliding_rope->scaling),
                        ref.tensor(name + ".inv_freq.sliding")));
}

INSTANTIATE_TEST_SUITE_P(Files,
                         Gemma4Config,
                         testing::Values("gemma4_hub", "gemma4_resaved", "gemma4_multimodal"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// The message of from_json's error on `j`, or "" if it accepts it.
std::string config_error(const nlohmann::json& j) {
  try {
    ModelConfig::from_json(j, "g.json");
  } catch (const c10::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Gemma4ConfigErrors, RefusesWhatItCannotTrainByName) {
  const nlohmann::json base = {{"model_type", "gemma4_text"}, {"hidden_size_per_layer_input", 0}};
  auto with = [&](const nlohmann::json& extra) {
    auto j = base;
    j.update(extra);
    return config_error(j);
  };
  EXPECT_EQ(config_error(base), "");
  // Gemma4TextConfig's default of 256 would mean per-layer embeddings the file does not have.
  auto j = base;
  j.erase("hidden_size_per_layer_input");
  EXPECT_NE(config_error(j).find("hidden_size_per_layer_input is 256 (transformers' default when the key is missing)"),
            std::string::npos)
      << config_error(j);
  EXPECT_NE(with({{"num_kv_shared_layers", 4}}).find("num_kv_shared_layers is 4"), std::string::npos);
  EXPECT_NE(with({{"use_bidirectional_attention", "all"}}).find("use_bidirectional_attention \"all\""),
            std::string::npos);
  EXPECT_EQ(with({{"use_bidirectional_attention", "vision"}}), "");
  EXPECT_NE(with({{"per_layer_config", {{"x5", {{"head_dim", 64}}}}}}).find("per_layer_config key 'x5'"),
            std::string::npos);
  EXPECT_NE(with({{"per_layer_config", {{"30", {{"head_dim", 64}}}}}}).find("per_layer_config key '30'"),
            std::string::npos);
  EXPECT_NE(with({{"per_layer_config", {{"05", {{"intermediate_size", 64}}}}}}).find("sets 'intermediate_size'"),
            std::string::npos);
  EXPECT_NE(with({{"per_layer_config", {{"05", {{"head_dim", 128}}}}}}).find("layers 5 and 11 are both full_attention"),
            std::string::npos);
  EXPECT_NE(with({{"rope_parameters", {{"full_attention", {{"rope_type", "default"}}}}}})
                .find("rope_parameters has no 'sliding_attention' object"),
            std::string::npos);
}

// enable_moe_block: the expert block's keys as Gemma4TextConfig names them (top_k_experts, not
// num_experts_per_tok), on every layer beside the dense MLP; missing or impossible values are
// refused by key, and to_json writes what it read.
TEST(Gemma4MoeConfig, ReadsTheExpertBlockAndRefusesWhatIsMissing) {
  const nlohmann::json base = {{"model_type", "gemma4_text"},
                               {"hidden_size_per_layer_input", 0},
                               {"num_hidden_layers", 4},
                               {"enable_moe_block", true},
                               {"num_experts", 6},
                               {"top_k_experts", 3},
                               {"moe_intermediate_size", 20},
                               {"num_experts_per_tok", 1}};
  const auto c = model::ModelConfig::from_json(base, "moe.json");
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 6);
  EXPECT_EQ(c.moe->top_k, 3);
  EXPECT_EQ(c.moe->expert_intermediate_size, 20);
  EXPECT_EQ(c.moe->experts_path, "experts");
  EXPECT_TRUE(c.moe->fp32_routing_weights);
  EXPECT_FALSE(c.moe->output_router_logits);
  for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(c.layer_is_sparse(i) && c.layer_has_dense_mlp(i)) << i;
  const auto again = model::ModelConfig::from_json(
      [&] {
        auto c2 = c;
        c2.raw = nullptr;
        return c2.to_json();
      }(),
      "written");
  ASSERT_TRUE(again.moe);
  EXPECT_EQ(again.moe->num_experts, 6);
  EXPECT_EQ(again.moe->top_k, 3);
  EXPECT_EQ(again.moe->expert_intermediate_size, 20);
  EXPECT_FALSE(
      model::ModelConfig::from_json({{"model_type", "gemma4_text"}, {"hidden_size_per_layer_input", 0}}, "").moe);
  auto with = [&](const nlohmann::json& extra) {
    auto j = base;
    j.update(extra);
    return config_error(j);
  };
  auto without = [&](const char* key) {
    auto j = base;
    j.erase(key);
    return config_error(j);
  };
  for (const char* key : {"num_experts", "top_k_experts", "moe_intermediate_size"}) {
    EXPECT_NE(without(key).find(key), std::string::npos) << without(key);
  }
  EXPECT_NE(with({{"num_experts", 0}}).find("num_experts must be positive with enable_moe_block: true, got 0"),
            std::string::npos)
      << with({{"num_experts", 0}});
  EXPECT_NE(with({{"top_k_experts", 7}}).find("top_k_experts is 7; it must be between 1 and num_experts (6)"),
            std::string::npos)
      << with({{"top_k_experts", 7}});
  EXPECT_NE(with({{"moe_intermediate_size", -2}}).find("moe_intermediate_size must be positive"), std::string::npos);
}

// A tiny Gemma4ForConditionalGeneration (decoder under model.language_model., a vision tower, no
// lm_head on disk): its decoder against transformers' text-only logits and loss, and with a PEFT
// adapter on the decoder (module names model.language_model.layers.N...) the LoRA gradients.
// float32 on both sides: model_parity_test.cpp's tolerances.
TEST(GemmaMultimodal, TheLanguageModelOfAGemma4ForConditionalGenerationMatchesTransformers) {
  const auto dir = test::model_fixture("gemma4_mm");
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = CausalLM::load(io::HfFolder::open(dir / "base"), {});
  EXPECT_EQ(lm.layers()[0].q.name, "model.language_model.layers.0.self_attn.q_proj");
  EXPECT_FALSE(lm.layers()[1].v);  // a full layer with attention_k_eq_v
  const auto ids = ref.tensor("ids");
  auto max_rel = [](const at::Tensor& a, const at::Tensor& b) {
    return ((a - b).abs().max() / b.abs().max()).item<double>();
  };
  {
    schedule::LayerScheduler scheduler(lm);
    const auto plan = scheduler.prepare_eval();
    EXPECT_LT(max_rel(lm.logits(scheduler.eval_hidden(plan, ids)), ref.tensor("fp32.logits")), 2e-5);
    const auto [sum, tokens] = scheduler.eval_loss(plan, ids, ref.tensor("labels"));
    EXPECT_NEAR((sum / tokens).item<double>(), ref.tensor("fp32.loss").item<double>(), 2e-6);
  }
  attach_lora(lm, io::load_peft_adapter(dir / "adapter"), (dir / "adapter").string());
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_training(schedule::CheckpointPolicy::none);
  const auto [sum, tokens] = scheduler.train_forward(plan, ids, ref.tensor("labels"));
  const auto loss = sum / tokens;
  EXPECT_NEAR(loss.item<double>(), ref.tensor("fp32.lora.loss").item<double>(), 2e-6);
  loss.backward();
  const auto adapters = lora_adapters(lm);
  EXPECT_EQ(adapters.size(), 5u * 7 - 2);
  for (const auto& [module, adapter] : adapters) {
    EXPECT_LT(max_rel(adapter.a.grad(), ref.tensor("fp32.lora.grad." + module + ".lora_A")), 1e-4) << module;
    EXPECT_LT(max_rel(adapter.b.grad(), ref.tensor("fp32.lora.grad." + module + ".lora_B")), 1e-4) << module;
  }
}

nlohmann::json qwen3_moe_json() {
  return {{"model_type", "qwen3_moe"},
          {"vocab_size", 32},
          {"hidden_size", 16},
          {"intermediate_size", 24},
          {"moe_intermediate_size", 8},
          {"num_hidden_layers", 6},
          {"num_attention_heads", 2},
          {"num_local_experts", 4},  // how transformers 5.23 writes num_experts
          {"num_experts_per_tok", 2},
          {"decoder_sparse_step", 2},
          {"mlp_only_layers", {3}}};
}

// Values that no model has, each refused with the file, the key and the value instead of a model
// with a dropped fraction, a division by zero or an allocation of exabytes.
TEST(ModelConfigValues, ImpossibleValuesAreRefusedByName) {
  const nlohmann::json good = {{"model_type", "llama"},
                               {"vocab_size", 32},
                               {"hidden_size", 16},
                               {"intermediate_size", 24},
                               {"num_hidden_layers", 2},
                               {"num_attention_heads", 2}};
  EXPECT_EQ(ModelConfig::from_json(good, "c.json").num_layers, 2);
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"num_hidden_layers", 1.9}}, "c.json: 'num_hidden_layers' must be a whole number, got 1.9"},
      {{{"hidden_size", "16"}}, "c.json: 'hidden_size' must be a whole number, got a string"},
      {{{"num_hidden_layers", 100000000}},
       "c.json: num_hidden_layers is 100000000, beyond any real model (qtrain reads at most 16384)"},
      {{{"hidden_size", int64_t{1} << 62}}, "c.json: hidden_size is 4611686018427387904, beyond any real model"},
      {{{"rms_norm_eps", -1}}, "c.json: rms_norm_eps must be a small positive number"},
      {{{"rope_theta", 0}}, "c.json: rope_theta must be positive (1e4 to 1e6 in released models), got 0"},
  };
  for (const auto& [change, fragment] : cases) {
    auto j = good;
    j.update(change);
    SCOPED_TRACE(change.dump());
    test::expect_error([&] { ModelConfig::from_json(j, "c.json"); }, fragment);
  }
  // Fuzzing found that a float reached get<int64_t>() (undefined behaviour for 1e65) through the
  // keys read with a default (fuzz/regressions/model_config/); every integer key now takes only a
  // JSON integer.
  const auto with = [&](nlohmann::json change) {
    auto j = good;
    j.update(change);
    return j;
  };
  const std::vector<std::pair<nlohmann::json, std::string>> floats = {
      {with({{"model_type", "qwen2"}, {"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 1e65}}),
       "max_window_layers"},
      {with({{"rope_scaling",
              {{"rope_type", "llama3"}, {"factor", 8.0}, {"original_max_position_embeddings", 1e65}}}}),
       "original_max_position_embeddings"},
      {{{"model_type", "gemma3_text"}, {"sliding_window_pattern", 1e65}}, "sliding_window_pattern"},
      {{{"model_type", "gemma4_text"}, {"hidden_size_per_layer_input", 0}, {"num_kv_shared_layers", 1e65}},
       "num_kv_shared_layers"},
  };
  for (const auto& [config, key] : floats) {
    SCOPED_TRACE(key);
    test::expect_error([&] { ModelConfig::from_json(config, "c.json"); },
                       "c.json: '" + key + "' must be a whole number, got 1e+65");
  }
  // Fuzzing found this one (fuzz/regressions/model_config/): a Gemma 3 config without
  // layer_types and with sliding_window_pattern 0 divided by zero (transformers' Gemma3Config
  // raises ZeroDivisionError).
  for (const int pattern : {0, -6}) {
    const nlohmann::json gemma3 = {{"model_type", "gemma3_text"}, {"sliding_window_pattern", pattern}};
    test::expect_error([&] { ModelConfig::from_json(gemma3, "c.json"); },
                       "c.json: sliding_window_pattern must be a positive whole number (every pattern-th layer "
                       "attends to the whole sequence; released Gemma 3 models use 6), got " +
                           std::to_string(pattern));
  }
}

TEST(MoeConfig, SparseLayersFollowDecoderSparseStepAndMlpOnlyLayers) {
  const auto c = ModelConfig::from_json(qwen3_moe_json(), "qwen3_moe");
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 4);
  EXPECT_EQ(c.moe->sparse, (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_FALSE(c.moe->norm_topk_prob);
  EXPECT_FALSE(c.moe->fp32_routing_weights);
  EXPECT_TRUE(c.qk_norm);
  // Written back and read again, the same layers are sparse.
  auto written = c;
  written.raw = nlohmann::json();
  EXPECT_EQ(ModelConfig::from_json(written.to_json(), "written").moe->sparse, c.moe->sparse);
}

TEST(MoeConfig, UnsupportedKeysAreRefusedByName) {
  auto shared = qwen3_moe_json();
  shared["shared_expert_intermediate_size"] = 16;
  test::expect_error([&] { ModelConfig::from_json(shared, "q.json"); }, "shared_expert_intermediate_size is set");
  auto too_many = qwen3_moe_json();
  too_many["num_experts_per_tok"] = 5;
  test::expect_error([&] { ModelConfig::from_json(too_many, "q.json"); }, "num_experts_per_tok is 5");
  const nlohmann::json mixtral = {{"model_type", "mixtral"},
                                  {"vocab_size", 32},
                                  {"hidden_size", 16},
                                  {"intermediate_size", 24},
                                  {"num_hidden_layers", 2},
                                  {"num_attention_heads", 2},
                                  {"num_local_experts", 4},
                                  {"num_experts_per_tok", 2},
                                  {"router_jitter_noise", 0.1}};
  test::expect_error([&] { ModelConfig::from_json(mixtral, "m.json"); }, "router_jitter_noise is 0.1");
}

}  // namespace
}  // namespace qtrain::engine::model
