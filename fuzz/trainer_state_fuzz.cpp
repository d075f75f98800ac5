// A checkpoint's trainer_state.json, read when a run resumes.
#include "engine/train/run_state.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qtrain;
  const auto dir = fuzz::scratch_dir() / "checkpoint-1";
  std::filesystem::create_directories(dir);
  fuzz::write_file(dir / "trainer_state.json", fuzz::as_text(data, size));
  fuzz::expect_clean([&] { (void)engine::train::load_checkpoint(dir); });
  return 0;
}
