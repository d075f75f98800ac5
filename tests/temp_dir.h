// A per-test scratch folder under the system temp dir, named after the running test and the
// process, so that parallel ctest jobs never share one.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "engine/io/remove_tree.h"

namespace qtrain::test {

// The folder's path, emptied (removed if it exists); `create` makes it afresh.
inline std::filesystem::path fresh_test_dir(bool create) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto dir = std::filesystem::temp_directory_path() / ("qtrain_" + std::string(info->test_suite_name()) + "_" +
                                                             info->name() + "_" + std::to_string(::getpid()));
  engine::io::remove_tree(dir);
  if (create) std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace qtrain::test
