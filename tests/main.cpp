// Test entry point: GoogleTest, with torch's thread pool kept small so that ctest's parallel
// jobs do not oversubscribe the machine.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(2);
  return RUN_ALL_TESTS();
}
