// A FIFO, a device, a folder or an oversized file where qtrain expects a file it reads: each is
// refused at once with the path and the reason. Without the checks a FIFO blocks open() forever
// and /dev/zero is read until memory runs out.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>

#include <gtest/gtest.h>

#include "engine/config/run_config.h"
#include "engine/data/pretokenized.h"
#include "engine/io/hf_folder.h"
#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "engine/text/tokenizer.h"
#include "tests/temp_dir.h"

namespace qtrain::engine {
namespace {

namespace fs = std::filesystem;

// `read` must throw, within 10 s, an error containing `fragment`. If it blocks (in open() on the
// FIFO `fifo`), a writer is opened and closed so that it returns and the test can fail cleanly.
void expect_refusal(const std::function<void()>& read, const std::string& fragment, const fs::path& fifo = {}) {
  auto done = std::async(std::launch::async, [&]() -> std::string {
    try {
      read();
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(no error)";
  });
  if (done.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    ADD_FAILURE() << "still reading after 10 s; expected an error containing: " << fragment;
    if (!fifo.empty()) ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK));
  }
  const auto message = done.get();
  EXPECT_NE(message.find(fragment), std::string::npos) << "message: " << message << "\nexpected: " << fragment;
}

TEST(SpecialFiles, AFifoADeviceOrAFolderIsRefusedAtOnce) {
  const auto dir = test::fresh_test_dir(true);
  const std::string not_regular = "is a FIFO (named pipe), not a regular file; qtrain reads only regular files";

  fs::create_directories(dir / "model");
  ASSERT_EQ(::mkfifo((dir / "model" / "config.json").c_str(), 0600), 0);
  expect_refusal([&] { io::HfFolder::open(dir / "model"); },
                 (dir / "model" / "config.json").string() + " " + not_regular,
                 dir / "model" / "config.json");

  ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);
  expect_refusal([&] { io::SafetensorsFile::open(dir / "model.safetensors"); },
                 "model.safetensors is not a regular file",
                 dir / "model.safetensors");

  ASSERT_EQ(::mkfifo((dir / "rows.jsonl").c_str(), 0600), 0);
  expect_refusal([&] { data::for_each_jsonl_row(dir / "rows.jsonl", [](const auto&, const auto&) {}); },
                 "dataset " + (dir / "rows.jsonl").string() + " " + not_regular,
                 dir / "rows.jsonl");

  ASSERT_EQ(::mkfifo((dir / "run.yaml").c_str(), 0600), 0);
  expect_refusal([&] { config::load_run_config(dir / "run.yaml"); }, "run.yaml " + not_regular, dir / "run.yaml");

  expect_refusal([&] { config::load_run_config("/dev/zero"); },
                 "/dev/zero is a device, not a regular file; qtrain reads only regular files");

  fs::create_directories(dir / "tok" / "tokenizer.json");
  expect_refusal([&] { text::Tokenizer::load(dir / "tok"); },
                 "tokenizer.json is a folder, not a file; give the path of the file itself");
  qtrain::engine::io::remove_tree(dir);
}

TEST(SpecialFiles, AConfigLargerThanAnyRealOneIsNotReadWhole) {
  const auto dir = test::fresh_test_dir(true);
  std::ofstream(dir / "config.json") << "{}";
  fs::resize_file(dir / "config.json", (uint64_t{64} << 20) + 1);  // sparse: no 64 MB written
  expect_refusal([&] { io::HfFolder::open(dir); }, "config.json is 67108865 bytes, more than the 67108864");
  qtrain::engine::io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine
