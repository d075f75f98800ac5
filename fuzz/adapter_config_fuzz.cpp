// A PEFT adapter folder's adapter_config.json (beside a valid adapter_model.safetensors), read as
// `adapter:` / lora_model_dir and resumed checkpoints read it.
#include <ATen/ATen.h>

#include "engine/io/peft_adapter.h"
#include "engine/io/safetensors.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qtrain;
  static const std::filesystem::path dir = [] {
    const auto d = fuzz::scratch_dir() / "adapter";
    std::filesystem::create_directories(d);
    const std::string prefix = "base_model.model.model.layers.0.self_attn.q_proj.";
    engine::io::safetensors_save(
        d / "adapter_model.safetensors",
        {{prefix + "lora_A.weight", at::ones({2, 8})}, {prefix + "lora_B.weight", at::zeros({8, 2})}});
    return d;
  }();
  fuzz::write_file(dir / "adapter_config.json", fuzz::as_text(data, size));
  fuzz::expect_clean([&] { (void)engine::io::load_peft_adapter(dir); });
  return 0;
}
