// A model folder's config.json, read as `qtrain train` and `plan` read it.
#include "engine/io/hf_folder.h"
#include "engine/model/model_config.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qtrain;
  const auto dir = fuzz::scratch_dir() / "model";
  std::filesystem::create_directories(dir);
  fuzz::write_file(dir / "config.json", fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const auto config = engine::model::ModelConfig::from_json(engine::io::read_config_json(dir), "config.json");
    (void)config.to_json().dump();
  });
  return 0;
}
