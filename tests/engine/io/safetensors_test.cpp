// Tests for engine/io/safetensors: round trips of every dtype, the zero-copy mapping and its
// lifetime, every validation rule on hand-made corrupt files, and interop with the reference
// Python implementation (safetensors.torch), which is the source of truth for the format.
#include "engine/io/safetensors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"

namespace qtrain::engine::io {
namespace {

using test::expect_error;

const std::vector<std::pair<std::string, at::ScalarType>> kAllDtypes = {
    {"BOOL", at::kBool},
    {"U8", at::kByte},
    {"I8", at::kChar},
    {"I16", at::kShort},
    {"U16", at::kUInt16},
    {"F16", at::kHalf},
    {"BF16", at::kBFloat16},
    {"I32", at::kInt},
    {"U32", at::kUInt32},
    {"F32", at::kFloat},
    {"F64", at::kDouble},
    {"I64", at::kLong},
    {"U64", at::kUInt64},
    {"F8_E4M3", at::kFloat8_e4m3fn},
    {"F8_E5M2", at::kFloat8_e5m2},
};
// Scalar, empty, empty with several dims, 1-d, 2-d.
const std::vector<std::vector<int64_t>> kShapes = {{}, {0}, {2, 0, 3}, {5}, {2, 3}};

// arange(numel) % 7 - 3 in `dtype`: small integers, exact in every dtype (unsigned ones wrap);
// kPythonPrelude builds the same values the same way.
at::Tensor sample(at::ScalarType dtype, at::IntArrayRef shape) {
  const int64_t numel = c10::multiply_integers(shape);
  return (at::arange(numel, at::kLong).remainder(7) - 3).to(dtype).reshape(shape);
}

// One tensor per dtype and shape, named "<dtype>.<shape index>".
std::vector<std::pair<std::string, at::Tensor>> all_samples() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, dtype] : kAllDtypes) {
    for (size_t i = 0; i < kShapes.size(); ++i) {
      out.emplace_back(name + "." + std::to_string(i), sample(dtype, kShapes[i]));
    }
  }
  return out;
}

std::vector<uint8_t> bytes_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::vector<uint8_t> out(c.nbytes());
  if (!out.empty()) {
    std::memcpy(out.data(), c.const_data_ptr(), out.size());
  }
  return out;
}

// Same dtype, shape and bytes (NaNs and float8 compare by bit pattern).
void expect_same(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  EXPECT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  EXPECT_EQ(actual.sizes(), expected.sizes()) << what;
  EXPECT_EQ(bytes_of(actual), bytes_of(expected)) << what;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file as the format lays it out: u64 little-endian header length, header, data. `length`
// overrides the header length to make it lie.
std::string raw_file(const std::string& header,
                     const std::string& data = "",
                     std::optional<uint64_t> length = std::nullopt) {
  const uint64_t n = length.value_or(header.size());
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);  // little-endian host
  return out + header + data;
}

// Address ranges at which `path` is mapped into this process, from /proc/self/maps.
std::vector<std::pair<uintptr_t, uintptr_t>> mapped_ranges(const std::filesystem::path& path) {
  const std::string target = std::filesystem::canonical(path).string();
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, file;
    fields >> range >> perms >> offset >> device >> inode;
    std::getline(fields >> std::ws, file);
    if (file == target) {
      const size_t dash = range.find('-');
      out.emplace_back(std::stoull(range.substr(0, dash), nullptr, 16),
                       std::stoull(range.substr(dash + 1), nullptr, 16));
    }
  }
  return out;
}

bool inside(const void* p, const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const auto& [begin, end] : ranges) {
    if (a >= begin && a < end) {
      return true;
    }
  }
  return false;
}

// Each test gets its own directory under the system temp dir, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("qtrain_safetensors_" + std::string(test->name()) + "_" + std::to_string(::getpid()));
    qtrain::engine::io::remove_tree(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  std::filesystem::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndShape) {
  const auto tensors = all_samples();
  const auto path = dir_ / "all.safetensors";
  safetensors_save(path, tensors);

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    ASSERT_TRUE(file.contains(name)) << name;
    EXPECT_EQ(file.info(name).dtype, expected.scalar_type()) << name;
    EXPECT_EQ(file.info(name).shape, expected.sizes().vec()) << name;
    expect_same(file.tensor(name), expected, name);
  }
  const auto loaded = safetensors_load(path);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    expect_same(loaded.at(name), expected, name);
  }
}

TEST_F(SafetensorsTest, RoundTripsAFileWithNoTensors) {
  const auto path = dir_ / "empty.safetensors";
  safetensors_save(path, {});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.tensors().empty());
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST_F(SafetensorsTest, LaysOutTensorsLikeTheReference) {
  const auto path = dir_ / "layout.safetensors";
  safetensors_save(path,
                   {{"b", sample(at::kByte, {3})},
                    {"a", sample(at::kFloat, {2})},
                    {"c", sample(at::kDouble, {1})},
                    {"d", sample(at::kFloat, {1})},
                    {"e", sample(at::kFloat8_e4m3fn, {1})},
                    {"f", sample(at::kBool, {1})},
                    {"g", sample(at::kHalf, {1})}});
  const std::string bytes = read_file(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  const std::string header = bytes.substr(8, header_len);
  EXPECT_EQ(header.find(R"({"__metadata__":{"format":"pt"},"c":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"), 0u)
      << header;
  const size_t json_end = header.find_last_not_of(' ') + 1;
  EXPECT_EQ(header[json_end - 1], '}');
  EXPECT_LT(header.size() - json_end, 8u) << "padding beyond the next multiple of 8";

  // Descending dtype in the reference's enum order, then name; every tensor aligned.
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<std::string> order;
  for (const TensorInfo& t : file.tensors()) {
    order.push_back(t.name);
    EXPECT_EQ((8 + header_len + t.begin) % c10::elementSize(t.dtype), 0u) << t.name;
  }
  EXPECT_EQ(order, (std::vector<std::string>{"c", "a", "d", "g", "e", "b", "f"}));
}

TEST_F(SafetensorsTest, AlignedTensorIsAViewIntoTheMapping) {
  const auto path = dir_ / "view.safetensors";
  safetensors_save(path, {{"w", sample(at::kFloat, {4, 4})}, {"x", sample(at::kDouble, {3})}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  const auto ranges = mapped_ranges(path);
  ASSERT_FALSE(ranges.empty()) << path << " is not mapped";
  for (const char* name : {"w", "x"}) {
    const at::Tensor a = file.tensor(name);
    EXPECT_TRUE(inside(a.const_data_ptr(), ranges)) << name;
    EXPECT_EQ(file.tensor(name).const_data_ptr(), a.const_data_ptr()) << name;
  }
}

TEST_F(SafetensorsTest, MisalignedTensorIsCopied) {
  // A writer other than the reference may put an F32 tensor at an odd offset.
  const float values[2] = {1.5f, -2.0f};
  std::string data(1, '\x07');
  data.append(reinterpret_cast<const char*>(values), sizeof(values));
  std::string header =
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  const auto path = dir_ / "misaligned.safetensors";
  write_file(path, raw_file(header, data));

  const SafetensorsFile file = SafetensorsFile::open(path);
  const at::Tensor b = file.tensor("b");
  EXPECT_FALSE(inside(b.const_data_ptr(), mapped_ranges(path)));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.const_data_ptr()) % alignof(float), 0u);
  EXPECT_EQ(b[0].item<float>(), 1.5f);
  EXPECT_EQ(b[1].item<float>(), -2.0f);
  EXPECT_EQ(file.tensor("a").item<uint8_t>(), 7);
}

TEST_F(SafetensorsTest, TensorOutlivesItsFileObjectAndTheFileOnDisk) {
  const auto path = dir_ / "outlive.safetensors";
  const at::Tensor expected = sample(at::kBFloat16, {8, 3});
  safetensors_save(path, {{"w", expected}});
  at::Tensor view;
  {
    const SafetensorsFile file = SafetensorsFile::open(path);
    view = file.tensor("w");
  }
  std::filesystem::remove(path);
  expect_same(view, expected, "w");
}

TEST_F(SafetensorsTest, WritingIntoAViewLeavesTheFileUnchanged) {
  const auto path = dir_ / "cow.safetensors";
  const at::Tensor expected = sample(at::kFloat, {16});
  safetensors_save(path, {{"w", expected}});
  at::Tensor view = SafetensorsFile::open(path).tensor("w");
  view.fill_(42.0f);
  EXPECT_EQ(view[3].item<float>(), 42.0f);
  expect_same(SafetensorsFile::open(path).tensor("w"), expected, "w");
}

TEST_F(SafetensorsTest, MetadataRoundTripsWithFormatPt) {
  const auto path = dir_ / "meta.safetensors";
  safetensors_save(path, {{"w", sample(at::kFloat, {2})}}, {{"origin", "qtrain"}, {"step", "12"}});
  EXPECT_EQ(SafetensorsFile::open(path).metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"origin", "qtrain"}, {"step", "12"}}));

  safetensors_save(path, {{"w", sample(at::kFloat, {2})}}, {{"format", "pt"}});
  EXPECT_EQ(SafetensorsFile::open(path).metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));

  expect_error([&] { safetensors_save(path, {}, {{"format", "tf"}}); }, "metadata 'format' is 'tf'");
}

TEST_F(SafetensorsTest, InfoAndTensorNameTheFileAndTheMissingKey) {
  const auto path = dir_ / "keys.safetensors";
  safetensors_save(path, {{"w", sample(at::kFloat, {2})}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.contains("w"));
  EXPECT_FALSE(file.contains("v"));
  expect_error([&] { file.info("v"); }, path.string() + ": no tensor named 'v'");
  expect_error([&] { file.tensor("v"); }, path.string() + ": no tensor named 'v'");
}

TEST_F(SafetensorsTest, OpenNamesAMissingFileOrADirectory) {
  expect_error([&] { SafetensorsFile::open(dir_ / "absent.safetensors"); },
               "cannot open safetensors file " + (dir_ / "absent.safetensors").string());
  expect_error([&] { SafetensorsFile::open(dir_); }, dir_.string() + " is not a regular file");
}

TEST_F(SafetensorsTest, SaveAcceptsAnyStridesLayoutAndGrad) {
  const auto path = dir_ / "layouts.safetensors";
  const at::Tensor base = sample(at::kFloat, {4, 6});
  const at::Tensor sparse = at::eye(3, at::kFloat).to_sparse();
  safetensors_save(path,
                   {{"transposed", base.t()},
                    {"sliced", base.slice(1, 2, 5)},
                    {"grad", base.clone().requires_grad_()},
                    {"sparse", sparse}});
  const auto loaded = safetensors_load(path);
  expect_same(loaded.at("transposed"), base.t().contiguous(), "transposed");
  expect_same(loaded.at("sliced"), base.slice(1, 2, 5).contiguous(), "sliced");
  expect_same(loaded.at("grad"), base, "grad");
  expect_same(loaded.at("sparse"), at::eye(3, at::kFloat), "sparse");
}

TEST_F(SafetensorsTest, SaveRejectsBadInputAndKeepsTheExistingFile) {
  const auto path = dir_ / "keep.safetensors";
  safetensors_save(path, {{"w", sample(at::kFloat, {2})}});
  const std::string before = read_file(path);
  const at::Tensor t = sample(at::kFloat, {2});

  expect_error([&] { safetensors_save(path, {{"", t}}); }, "a tensor has an empty name");
  expect_error([&] { safetensors_save(path, {{"a", t}, {"a", t}}); }, "tensor 'a' is given twice");
  expect_error([&] { safetensors_save(path, {{"__metadata__", t}}); }, "'__metadata__' is reserved");
  expect_error([&] { safetensors_save(path, {{"bad\xff", t}}); }, "is not valid UTF-8");
  expect_error([&] { safetensors_save(path, {{"u", at::Tensor()}}); }, "tensor 'u' is undefined");
  expect_error(
      [&] {
        safetensors_save(path, {{"c", at::zeros({2}, at::kComplexFloat)}});
      },
      "tensor 'c' has dtype ComplexFloat, which safetensors files here cannot hold; supported: BOOL, U8");
  expect_error(
      [&] {
        safetensors_save(path, {{"m", at::empty({2}, at::TensorOptions().device(at::kMeta))}});
      },
      "tensor 'm' is on the meta device");

  EXPECT_EQ(read_file(path), before);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
}

TEST_F(SafetensorsTest, SaveReplacesTheFileWhileOldViewsKeepTheOldBytes) {
  const auto path = dir_ / "replace.safetensors";
  const at::Tensor first = sample(at::kFloat, {4});
  const at::Tensor second = at::full({4}, 9.0f);
  safetensors_save(path, {{"w", first}});
  const at::Tensor old_view = SafetensorsFile::open(path).tensor("w");

  safetensors_save(path, {{"w", second}});
  expect_same(old_view, first, "old view");
  expect_same(SafetensorsFile::open(path).tensor("w"), second, "new file");
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
}

struct CorruptCase {
  std::string what;
  std::string bytes;
  std::string fragment;
};

std::string f32_entry(const std::string& name, const std::string& shape, const std::string& offsets) {
  return "\"" + name + R"(":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

std::vector<CorruptCase> corrupt_cases() {
  const std::string four(4, '\0');
  const std::string w4 = f32_entry("w", "[1]", "[0,4]");
  std::vector<CorruptCase> cases = {
      {"file shorter than 8 bytes", "\x01\x02\x03", "file is 3 bytes, too small for the 8-byte header length"},
      {"header length over 100 MB",
       raw_file("{}", "", 100'000'001),
       "header length 100000001 exceeds the format's limit of 100000000 bytes"},
      {"header length of 2^64 - 1",
       raw_file("{}", "", std::numeric_limits<uint64_t>::max()),
       "header length 18446744073709551615 exceeds"},
      {"header length past the end",
       raw_file("{}", "", 64),
       "header length 64 runs past the end of the file (10 bytes)"},
      {"invalid UTF-8", raw_file("{\"w\xff\":{}}"), "header is not valid UTF-8 (byte 3 of the header)"},
      {"overlong UTF-8", raw_file("{\"\xc0\xaf\":{}}"), "header is not valid UTF-8 (byte 2 of the header)"},
      {"UTF-8 surrogate", raw_file("{\"\xed\xa0\x80\":{}}"), "header is not valid UTF-8"},
      {"invalid JSON", raw_file(R"({"w":)"), "header is not valid JSON"},
      {"header is an array", raw_file("[]"), "header must start with '{', found '['"},
      {"header starts with a space", raw_file(" {}"), "header must start with '{', found ' '"},
      {"empty header", raw_file(""), "header must start with '{', found an empty header"},
      {"duplicate tensor", raw_file("{" + w4 + "," + w4 + "}", four), "header has the key 'w' twice;"},
      {"duplicate field in a tensor",
       raw_file(R"({"w":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})", four),
       "header has the key 'dtype' twice inside 'w'"},
      {"duplicate metadata key",
       raw_file(R"({"__metadata__":{"a":"1","a":"2"}})"),
       "header has the key 'a' twice inside '__metadata__'"},
      {"dtype not a string",
       raw_file(R"({"w":{"dtype":3,"shape":[1],"data_offsets":[0,4]}})", four),
       "tensor 'w': dtype 3 is not a string"},
      {"tensor entry not an object",
       raw_file(R"({"w":3})"),
       "tensor 'w': expected an object with dtype, shape and data_offsets, got a number"},
      {"missing data_offsets",
       raw_file(R"({"w":{"dtype":"F32","shape":[1]}})", four),
       "tensor 'w' has no \"data_offsets\""},
      {"negative shape entry",
       raw_file("{" + f32_entry("w", "[2,-1]", "[0,4]") + "}", four),
       "tensor 'w': shape [2,-1] has the entry -1"},
      {"non-integer shape entry",
       raw_file("{" + f32_entry("w", "[1.0]", "[0,4]") + "}", four),
       "tensor 'w': shape [1.0] has the entry 1.0"},
      {"shape entry over 2^63",
       raw_file("{" + f32_entry("w", "[9223372036854775808]", "[0,4]") + "}", four),
       "tensor 'w': shape [9223372036854775808] has the entry 9223372036854775808; shape entries must be integers in "
       "[0, 2^63)"},
      {"shape not an array",
       raw_file("{" + f32_entry("w", "\"1\"", "[0,4]") + "}", four),
       "tensor 'w': shape \"1\" is not an array"},
      {"shape overflows 64 bits",
       raw_file("{" + f32_entry("w", "[4294967296,4294967296]", "[0,4]") + "}", four),
       "tensor 'w': shape [4294967296, 4294967296] holds more bytes than fit in 64 bits"},
      {"data_offsets not a pair",
       raw_file("{" + f32_entry("w", "[1]", "[0,4,8]") + "}", four),
       "tensor 'w': data_offsets [0,4,8] is not a pair"},
      {"negative data_offsets",
       raw_file("{" + f32_entry("w", "[1]", "[-4,0]") + "}", four),
       "tensor 'w': data_offsets entry -4 is not an integer in [0, 2^48]"},
      {"data_offsets over 2^48",
       raw_file("{" + f32_entry("w", "[1]", "[0,281474976710657]") + "}", four),
       "tensor 'w': data_offsets entry 281474976710657 is not an integer in [0, 2^48]"},
      {"offsets not starting at 0",
       raw_file("{" + f32_entry("w", "[1]", "[4,8]") + "}", four + four),
       "tensor 'w': data_offsets [4, 8] do not start at 0"},
      {"gap between tensors",
       raw_file("{" + f32_entry("a", "[1]", "[0,4]") + "," + f32_entry("b", "[1]", "[8,12]") + "}", four + four + four),
       "tensor 'b': data_offsets [8, 12] leave a gap of 4 bytes after tensor 'a', which ends at 4"},
      {"overlapping tensors",
       raw_file("{" + f32_entry("a", "[2]", "[0,8]") + "," + f32_entry("b", "[2]", "[4,12]") + "}", four + four + four),
       "tensor 'b': data_offsets [4, 12] overlap tensor 'a', which ends at 8"},
      {"end before begin",
       raw_file("{" + f32_entry("a", "[1]", "[0,4]") + "," + f32_entry("b", "[0]", "[4,0]") + "}", four),
       "tensor 'b': data_offsets [4, 0] end before they begin"},
      {"size mismatch",
       raw_file("{" + f32_entry("model.layers.0.q_proj.weight", "[2,2]", "[0,12]") + "}", four + four + four),
       "tensor 'model.layers.0.q_proj.weight': data_offsets [0, 12] hold 12 bytes but dtype F32 shape [2, 2] needs 16"},
      {"trailing bytes",
       raw_file("{" + w4 + "}", four + "xy"),
       "2 trailing bytes after the last tensor (which ends at 4)"},
      {"truncated data",
       raw_file("{" + f32_entry("w", "[2]", "[0,8]") + "}", four),
       "file is truncated: its tensors need 8 bytes after the header but only 4 are there"},
      {"metadata value not a string",
       raw_file(R"({"__metadata__":{"step":3}})"),
       "__metadata__ key 'step' has the number value 3; metadata values must be strings"},
      {"metadata not an object",
       raw_file(R"({"__metadata__":"pt"})"),
       "__metadata__ must be an object of string values, got a string"},
  };
  for (const char* dtype : {"C64", "F4", "F6_E2M3", "F6_E3M2", "F8_E8M0", "F8_E4M3FNUZ", "Q4_0"}) {
    cases.push_back(
        {std::string("unknown dtype ") + dtype,
         raw_file(std::string(R"({"w":{"dtype":")") + dtype + R"(","shape":[1],"data_offsets":[0,1]}})", "x"),
         std::string("tensor 'w': dtype '") + dtype +
             "' is not supported; qtrain reads BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, "
             "U32, F32, F64, I64, U64"});
  }
  return cases;
}

TEST_F(SafetensorsTest, RejectsCorruptFilesNamingFileAndProblem) {
  int i = 0;
  for (const CorruptCase& c : corrupt_cases()) {
    SCOPED_TRACE(c.what);
    const auto path = dir_ / ("corrupt" + std::to_string(i++) + ".safetensors");
    write_file(path, c.bytes);
    expect_error([&] { SafetensorsFile::open(path); }, path.string() + ": " + c.fragment);
  }
}

// Interop with the reference implementation, through $QTRAIN_PYTHON (the venv's python).

// The samples of all_samples() in Python, and the comparison by bytes.
constexpr const char* kPythonPrelude = R"(
import math, sys, torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
          "U16": torch.uint16, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32,
          "U32": torch.uint32, "F32": torch.float32, "F64": torch.float64, "I64": torch.int64,
          "U64": torch.uint64, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
SHAPES = [[], [0], [2, 0, 3], [5], [2, 3]]
def samples():
    return {f"{d}.{i}": (torch.arange(math.prod(s)) % 7 - 3).to(dt).reshape(s)
            for d, dt in DTYPES.items() for i, s in enumerate(SHAPES)}
def raw(t):
    return t.contiguous().view(-1).view(torch.uint8).tolist()
)";

class SafetensorsInteropTest : public SafetensorsTest {
 protected:
  void SetUp() override {
    SafetensorsTest::SetUp();
    const char* python = std::getenv("QTRAIN_PYTHON");
    if (python == nullptr || *python == '\0') {
      GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
    }
    python_ = python;
  }

  // Runs kPythonPrelude + `body` with `arg` as sys.argv[1]; fails the test with its output
  // unless it exits 0.
  void run_python(const std::string& body, const std::filesystem::path& arg) {
    const auto script = dir_ / "script.py";
    const auto log = dir_ / "script.log";
    write_file(script, std::string(kPythonPrelude) + body);
    const std::string command =
        "'" + python_ + "' '" + script.string() + "' '" + arg.string() + "' > '" + log.string() + "' 2>&1";
    const int status = std::system(command.c_str());
    EXPECT_EQ(status, 0) << command << "\n" << read_file(log);
  }

  std::string python_;
};

TEST_F(SafetensorsInteropTest, ReferenceLoadsQtrainFile) {
  const auto path = dir_ / "qtrain.safetensors";
  safetensors_save(path, all_samples(), {{"origin", "qtrain"}});
  run_python(R"(
path = sys.argv[1]
loaded = load_file(path)
with safe_open(path, "pt") as f:
    assert f.metadata() == {"format": "pt", "origin": "qtrain"}, f.metadata()
expected = samples()
assert sorted(loaded) == sorted(expected), sorted(loaded)
for name, want in expected.items():
    got = loaded[name]
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
    assert raw(got) == raw(want), (name, got, want)
)",
             path);
}

TEST_F(SafetensorsInteropTest, QtrainLoadsReferenceFileAndWritesTheSameBytes) {
  const auto reference = dir_ / "reference.safetensors";
  run_python(R"(
save_file(samples(), sys.argv[1], metadata={"format": "pt"})
)",
             reference);
  ASSERT_TRUE(std::filesystem::exists(reference));

  const SafetensorsFile file = SafetensorsFile::open(reference);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  const auto tensors = all_samples();
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    expect_same(file.tensor(name), expected, name);
  }

  const auto ours = dir_ / "qtrain.safetensors";
  safetensors_save(ours, tensors);
  EXPECT_TRUE(read_file(ours) == read_file(reference)) << "qtrain's file differs from the reference writer's";
}

}  // namespace
}  // namespace qtrain::engine::io
