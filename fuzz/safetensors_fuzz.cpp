// A safetensors file (header and data), as every model, adapter and checkpoint weight is read.
#include <ATen/ATen.h>

#include "engine/io/safetensors.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qtrain;
  const auto path = fuzz::scratch_dir() / "model.safetensors";
  fuzz::write_file(path, fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const auto file = engine::io::SafetensorsFile::open(path);
    for (const auto& info : file.tensors()) {
      const at::Tensor t = file.tensor(info.name);
      if (t.numel() > 0) (void)t.reshape({-1})[0].item<double>();
    }
  });
  return 0;
}
