// A bitsandbytes 4-bit weight's quant_state blob (the JSON bytes stored as a uint8 tensor beside
// the packed codes), read from a pre-quantized model folder.
#include <cstring>

#include <ATen/ATen.h>

#include "engine/io/bnb_checkpoint.h"
#include "engine/io/hf_folder.h"
#include "fuzz/harness.h"
#include "ops/quant/kbit.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qtrain;
  static const auto tensors = [] {
    const at::Tensor w = at::linspace(-1, 1, 8 * 64).reshape({8, 64});
    return engine::io::bnb_4bit_tensors("layer.weight", ops::quantize_4bit(w, ops::QuantType::nf4, 64, true));
  }();
  auto edited = tensors;
  at::Tensor blob = at::empty({static_cast<int64_t>(size)}, at::kByte);
  if (size > 0) std::memcpy(blob.data_ptr(), data, size);
  edited.back().second = blob;  // the blob comes last (bnb_4bit_tensors' order)
  const auto dir = fuzz::scratch_dir() / "model";
  engine::io::save_hf_folder(dir, {{"model_type", "llama"}}, edited);
  fuzz::expect_clean([&] {
    const auto folder = engine::io::HfFolder::open(dir);
    (void)engine::io::read_bnb_4bit(folder, "layer.weight");
  });
  return 0;
}
