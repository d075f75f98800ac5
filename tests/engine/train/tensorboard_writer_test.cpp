// TensorBoard event encoding against bytes that TensorBoard's own protobuf messages
// (tensorboard.compat.proto.event_pb2, SerializeToString) and its masked_crc32c produce; the
// reader side is in metrics_log_test.cpp, which has TensorBoard read a whole file.
#include "engine/train/tensorboard_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 0xF]);
  }
  return out;
}

uint32_t masked_crc_of(const std::string& s) {
  return masked_crc32c(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Event{wall_time=1700000000.0, step=7, summary{value{tag="loss", simple_value=1.5}}}.
constexpr const char* kLossEvent = "0900000040fc54d94110072a0d0a0b0a046c6f7373150000c03f";

TEST(TensorBoardCrcTest, MaskedCrcRotatesAndOffsets) {
  EXPECT_EQ(masked_crc_of(""), 0xA282EAD8u);
  EXPECT_EQ(masked_crc_of("123456789"), 0xC78AB0E5u);
}

TEST(TensorBoardEncodeTest, ScalarEventMatchesProtobufBytes) {
  EXPECT_EQ(hex(encode_scalar_event(1700000000.0, 7, "loss", 1.5f)), kLossEvent);
  // proto3 leaves out a zero step; simple_value is in a oneof and is written even when 0.
  EXPECT_EQ(hex(encode_scalar_event(1.25, 0, "train/loss", 0.0f)),
            "09000000000000f43f2a130a110a0a747261696e2f6c6f73731500000000");
  // int64, not zigzag: -1 is ten varint bytes.
  EXPECT_EQ(hex(encode_scalar_event(1.25, -1, "train/loss", 0.0f)),
            "09000000000000f43f10ffffffffffffffffff012a130a110a0a747261696e2f6c6f73731500000000");
  EXPECT_EQ(hex(encode_scalar_event(1.25, 300, "train/loss", 0.0f)),
            "09000000000000f43f10ac022a130a110a0a747261696e2f6c6f73731500000000");
}

TEST(TensorBoardEncodeTest, FileVersionEventMatchesProtobufBytes) {
  EXPECT_EQ(hex(encode_file_version_event(1700000000.0)), "0900000040fc54d9411a0d627261696e2e4576656e743a32");
}

TEST(TensorBoardEncodeTest, RecordFramingMatchesTfRecord) {
  const std::string event = encode_scalar_event(1700000000.0, 7, "loss", 1.5f);
  EXPECT_EQ(hex(frame_record(event)), std::string("1a00000000000000129bd82d") + kLossEvent + "d46e200f");
}

class TensorBoardWriterTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir(/*create=*/false); }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  fs::path dir_;
};

TEST_F(TensorBoardWriterTest, WritesTheVersionRecordThenScalars) {
  fs::path path;
  {
    TensorBoardWriter writer(dir_ / "runs");
    path = writer.path();
    writer.add_scalar("loss", 1.5, 7, 1700000000.0);
  }  // the destructor flushes
  EXPECT_EQ(path.parent_path(), dir_ / "runs");
  const std::string name = path.filename().string();
  EXPECT_TRUE(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.\d{10}\..+\.\d+\.qtrain)"))) << name;

  const std::string bytes = read_bytes(path);
  // Version event: wall_time (9 bytes) + file_version (2 + 13 bytes) = 24 bytes, framed in 16.
  ASSERT_EQ(bytes.size(), (16 + 24) + (16 + 26));
  const std::string version = bytes.substr(12, 24);
  EXPECT_EQ(bytes.substr(0, 40), frame_record(version));
  EXPECT_EQ(hex(version.substr(9)), "1a0d627261696e2e4576656e743a32");
  EXPECT_EQ(hex(bytes.substr(40)), std::string("1a00000000000000129bd82d") + kLossEvent + "d46e200f");
}

TEST_F(TensorBoardWriterTest, SecondWriterInTheSameSecondGetsItsOwnFile) {
  TensorBoardWriter first(dir_);
  first.add_scalar("loss", 1.0, 1, 1700000000.0);
  first.flush();
  const std::string before = read_bytes(first.path());
  TensorBoardWriter second(dir_);
  EXPECT_NE(first.path(), second.path());
  EXPECT_EQ(read_bytes(first.path()), before);
  // TensorBoard reads a directory's files in name order; the later writer's file sorts after.
  EXPECT_LT(first.path().filename().string(), second.path().filename().string());
}

TEST_F(TensorBoardWriterTest, ErrorsNameThePathAndTheFix) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  test::expect_error([&] { TensorBoardWriter writer(dir_ / "file" / "runs"); },
                     "cannot create the TensorBoard log directory " + (dir_ / "file" / "runs").string());
  TensorBoardWriter writer(dir_);
  test::expect_error([&] { writer.add_scalar("", 1.0, 3); }, "empty tag; give it a name such as train/loss");
}

}  // namespace
}  // namespace qtrain::engine::train
