// Tests for engine/io/path_within: spellings of one folder (trailing separators, "." and "..",
// relative and absolute, a symlink to it) are within each other; a sibling that shares a name
// prefix ("out2" beside "out") and a parent are not; paths that do not exist yet compare too.
#include "engine/io/path_within.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/io/remove_tree.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::io {
namespace {

namespace fs = std::filesystem;

struct Row {
  fs::path inner, outer;
  bool within;
};

TEST(PathWithin, ComparesFoldersAsTheyAreOnDisk) {
  const auto dir = test::fresh_test_dir(/*create=*/true);
  fs::create_directories(dir / "out" / "checkpoint-2");
  fs::create_directories(dir / "out2");
  fs::create_directory_symlink(dir / "out", dir / "link");
  const std::vector<Row> table = {
      {dir / "out", dir / "out", true},
      {dir / "out/", dir / "out", true},
      {dir / "out", dir / "out/", true},
      {dir / "out" / "checkpoint-2", dir / "out/", true},
      {dir / "out/./checkpoint-2/", dir / "out", true},
      {dir / "out2" / ".." / "out" / "checkpoint-2", dir / "out", true},
      {dir / "link" / "checkpoint-2", dir / "out", true},
      {dir / "out" / "checkpoint-9" / "not-yet", dir / "out", true},
      {dir / "out2", dir / "out", false},
      {dir / "out2" / "checkpoint-2", dir / "out", false},
      {dir, dir / "out", false},
      {dir / "out" / ".." / "out2", dir / "out", false},
  };
  for (const Row& row : table) {
    EXPECT_EQ(path_within(row.inner, row.outer), row.within) << row.inner << " in " << row.outer;
  }
  // Relative to the working directory.
  const auto cwd = fs::current_path();
  fs::current_path(dir);
  EXPECT_TRUE(path_within("out/checkpoint-2", dir / "out"));
  EXPECT_TRUE(path_within(dir / "out" / "checkpoint-2", "./out/"));
  EXPECT_FALSE(path_within("out2", "out"));
  fs::current_path(cwd);
  EXPECT_EQ(resolved_path(dir / "out/"), resolved_path(dir / "link"));
  qtrain::engine::io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::io
