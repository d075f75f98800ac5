// The YAML run config, with axolotl's keys, as `qtrain train config.yaml` reads it.
#include "engine/config/run_config.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qtrain;
  const std::string text(fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const auto config = engine::config::parse_run_config(text, "config.yaml", fuzz::scratch_dir());
    // What a run saves beside its checkpoints must read back.
    (void)engine::config::parse_run_config(engine::config::to_yaml(config), "saved.yaml", fuzz::scratch_dir());
  });
  return 0;
}
