// Tests for engine/io/remove_tree: a nested folder goes whole and is counted as
// std::filesystem::remove_all counts; a symlink inside it goes without what it points to; a missing
// path removes nothing; a path through a file fails, naming it. And the binding that Note
// [libtorch exports std::filesystem] is about: this binary's std::filesystem calls run libstdc++'s
// copy, not the one libtorch exports.
#include "engine/io/remove_tree.h"

#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/temp_dir.h"

namespace qtrain::engine::io {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

TEST(RemoveTree, RemovesANestedFolderAndCountsWhatWent) {
  const auto dir = test::fresh_test_dir(/*create=*/true);
  fs::create_directories(dir / "out" / "checkpoint-2" / "adapter");
  write(dir / "out" / "a.json", "{}");
  write(dir / "out" / "checkpoint-2" / "adapter" / "w.safetensors", "x");
  fs::create_directories(dir / "kept");
  write(dir / "kept" / "data.jsonl", "{}\n");
  fs::create_directory_symlink(dir / "kept", dir / "out" / "link");

  // out, a.json, checkpoint-2, adapter, w.safetensors, link
  EXPECT_EQ(remove_tree(dir / "out"), 6u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir / "out")));
  EXPECT_TRUE(fs::exists(dir / "kept" / "data.jsonl")) << "the symlink's target must stay";
  EXPECT_EQ(remove_tree(dir / "kept" / "data.jsonl"), 1u) << "a plain file goes too";
  remove_tree(dir);
}

TEST(RemoveTree, AMissingPathRemovesNothing) {
  const auto dir = test::fresh_test_dir(/*create=*/false);
  std::error_code ec;
  EXPECT_EQ(remove_tree(dir / "absent", ec), 0u);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(remove_tree(dir / "absent"), 0u);
}

TEST(RemoveTree, APathThroughAFileFailsNamingIt) {
  const auto dir = test::fresh_test_dir(/*create=*/true);
  write(dir / "file", "x");
  std::error_code ec;
  EXPECT_EQ(remove_tree(dir / "file" / "below", ec), 0u);
  EXPECT_EQ(ec, std::errc::not_a_directory);
  try {
    remove_tree(dir / "file" / "below");
    ADD_FAILURE() << "no error for a path through a file";
  } catch (const fs::filesystem_error& e) {
    EXPECT_NE(std::string(e.what()).find("file/below"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir / "file"));
  remove_tree(dir);
}

// Which shared object defines the function behind `fn`, as this binary's relocations bound it.
std::string defining_object(const void* fn) {
  Dl_info info{};
  return dladdr(fn, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "(unknown)";
}

TEST(LinkOrder, FilesystemResolvesToLibstdcxx) {
  using Status = fs::file_status (*)(const fs::path&, std::error_code&) noexcept;
  const auto status = static_cast<Status>(&fs::status);
  const auto where = defining_object(reinterpret_cast<const void*>(status));
  EXPECT_NE(where.find("libstdc++"), std::string::npos)
      << "std::filesystem::status binds to " << where
      << ": libtorch's copy of std::filesystem shadows libstdc++'s; see Note [libtorch exports std::filesystem]";
}

}  // namespace
}  // namespace qtrain::engine::io
