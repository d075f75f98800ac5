// Tests for engine/model/lora_attach: an adapter trained on a model of another width (hidden 32
// on the hidden-64 tiny Llama) is refused when attached, as eval, merge and a run's
// lora_model_dir attach it, naming the adapter file, the tensor and both shapes, and the model is
// left without it; an adapter of the right width attaches.
#include "engine/model/lora_attach.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"
#include "tests/tiny_llama.h"

namespace qtrain::engine::model {
namespace {

namespace fs = std::filesystem;

// A q_proj adapter of layer 0 for a model whose q_proj is [out x in].
fs::path adapter_for(const fs::path& dir, int64_t in, int64_t out, const std::string& base) {
  lora::LoraConfig c;
  c.r = 4;
  c.alpha = 8;
  c.target_modules = {"q_proj"};
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  io::save_peft_adapter(dir, c, {{"model.layers.0.self_attn.q_proj", lora::lora_init(in, out, c, gen)}}, base);
  return dir;
}

TEST(LoraAttach, AnAdapterOfAnotherWidthIsRefusedNamingTheFileTheTensorAndBothShapes) {
  const auto dir = test::fresh_test_dir(/*create=*/true);
  io::save_hf_folder(dir / "base", test::tiny_llama_config("float32"), test::tiny_llama(at::kFloat, 1));
  auto lm = CausalLM::load(io::HfFolder::open(dir / "base"), {});

  const auto narrow = adapter_for(dir / "hidden32", 32, 32, "org/hidden-32");
  test::expect_error([&] { attach_lora(lm, io::load_peft_adapter(narrow), narrow.string()); },
                     (narrow / "adapter_model.safetensors").string() +
                         ": 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' is [4, 32] but the base "
                         "model's model.layers.0.self_attn.q_proj needs [4, 64] (the layer is [64 x 64], the adapter's "
                         "[32 x 32]): the adapter was trained on another base model (adapter_config.json names "
                         "org/hidden-32); use the base it was trained on, or an adapter trained on this one");
  // Right input width, wrong output width: lora_B is the tensor named.
  const auto tall = adapter_for(dir / "out32", 64, 32, "");
  test::expect_error([&] { attach_lora(lm, io::load_peft_adapter(tall), tall.string()); },
                     ".lora_B.weight' is [32, 4] but the base model's model.layers.0.self_attn.q_proj needs [64, 4]");
  EXPECT_TRUE(lora_adapters(lm).empty());

  const auto fits = adapter_for(dir / "hidden64", 64, 64, "");
  attach_lora(lm, io::load_peft_adapter(fits), fits.string());
  EXPECT_EQ(lora_adapters(lm).size(), 1u);
  qtrain::engine::io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::model
