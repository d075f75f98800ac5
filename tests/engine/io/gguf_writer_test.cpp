// GGUF files as llama.cpp reads them (Note [GGUF layout]): the gguf package reads back every key
// and tensor qtrain writes, and the F16, BF16 and Q8_0 bytes equal its reference encodings
// (Note [ggml encodings]) on random values, all-zero and extreme blocks, halfway cases and NaN
// (scripts/reference/gguf_check.py).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "engine/io/gguf_writer.h"
#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::io {
namespace {

namespace fs = std::filesystem;
using ops::GgmlType;

std::map<std::string, at::Tensor> sources() {
  at::manual_seed(0);
  auto f16 = at::randn({4, 64}) * 3;
  f16[0][0] = 70000.0f;  // beyond half: infinity
  f16[0][1] = 1e-7f;     // a half subnormal
  f16[0][2] = 2049.0f;   // halfway between two halves: to even
  auto bf16 = at::randn({2, 64});
  bf16[0][0] = std::numeric_limits<float>::quiet_NaN();
  bf16[0][1] = -std::numeric_limits<float>::quiet_NaN();
  bf16[0][2] = 1.0f + 1.0f / 256;  // halfway: to even
  bf16[0][3] = std::numeric_limits<float>::infinity();
  bf16.view(at::kInt)[0][4] = 0x7f800001;  // a signaling NaN whose top bits read as infinity
  auto q8 = at::randn({5, 96});
  q8[0].narrow(0, 0, 32).zero_();                          // an all-zero block: scale 0
  q8[1][0] = 1e30f;                                        // one huge value
  q8[2].narrow(0, 0, 32).copy_(at::arange(32) * 0.5 - 8);  // halves: roundf away from zero
  q8[2][31] = 127.0f;                                      // scale 1
  q8[3].narrow(0, 32, 32).fill_(-5.0f);                    // every value the extreme
  return {{"t.f32", at::randn({3, 5})}, {"t.f16", f16}, {"t.bf16", bf16}, {"t.q8_0", q8}};
}

TEST(GgufWriter, TheGgufPackageReadsItAndTheEncodingsAreLlamaCpps) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto dir = test::fresh_test_dir(/*create=*/true);
  const auto src = sources();
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 30);
  w.add_int32("test.int32", -7);
  w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_uint64("test.uint64", uint64_t{1} << 40);
  w.add_strings("tokenizer.ggml.tokens", {"<s>", "Ġthe", "é", ""});
  w.add_int32s("tokenizer.ggml.token_type", {3, 1, 1, 5});
  w.add_float32s("test.floats", {0.5f, -2.0f});
  const std::map<std::string, GgmlType> types = {
      {"t.f32", GgmlType::f32}, {"t.f16", GgmlType::f16}, {"t.bf16", GgmlType::bf16}, {"t.q8_0", GgmlType::q8_0}};
  size_t calls = 0;
  for (const auto& [name, type] : types) {
    const auto t = src.at(name);
    w.add_tensor(name, t.sizes().vec(), type, [t] { return t; });
  }
  w.write(dir / "out.gguf", [&](size_t i, size_t n) {
    ++calls;
    EXPECT_EQ(n, 4u);
    EXPECT_LE(i, n);
  });
  EXPECT_EQ(calls, 4u);
  EXPECT_FALSE(fs::exists(dir / "out.gguf.partial"));
  safetensors_save(dir / "source.safetensors", {src.begin(), src.end()});
  const std::string cmd = std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                          (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/gguf_check.py").string() + " " +
                          (dir / "out.gguf").string() + " " + (dir / "source.safetensors").string() + " " +
                          (dir / "out.json").string() + " > " + (dir / "log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto r = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  EXPECT_EQ(r.at("version"), 3);
  EXPECT_EQ(r.at("alignment"), 32);
  const auto& kv = r.at("kv");
  EXPECT_EQ(kv.at("general.architecture"), "llama");
  EXPECT_EQ(kv.at("llama.block_count"), 30);
  EXPECT_EQ(kv.at("test.int32"), -7);
  EXPECT_EQ(kv.at("llama.attention.layer_norm_rms_epsilon").get<float>(), 1e-5f);
  EXPECT_EQ(kv.at("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(kv.at("test.uint64").get<uint64_t>(), uint64_t{1} << 40);
  EXPECT_EQ(kv.at("tokenizer.ggml.tokens"), (nlohmann::json{"<s>", "Ġthe", "é", ""}));
  EXPECT_EQ(kv.at("tokenizer.ggml.token_type"), (nlohmann::json{3, 1, 1, 5}));
  EXPECT_EQ(kv.at("test.floats"), (nlohmann::json{0.5, -2.0}));
  for (const auto& [name, type] : types) {
    const auto& t = r.at("tensors").at(name);
    EXPECT_EQ(t.at("type"), ops::ggml_type_name(type)) << name;
    EXPECT_EQ(t.at("shape").get<std::vector<int64_t>>(), src.at(name).sizes().vec()) << name;
    EXPECT_EQ(t.at("offset").get<int64_t>() % 32, 0) << name;
    EXPECT_TRUE(t.at("equal").get<bool>()) << name << ": bytes differ from gguf.quants.quantize";
  }
  remove_tree(dir);
}

TEST(GgufWriter, RefusesWhatItCannotWrite) {
  GgufWriter w;
  w.add_uint32("a", 1);
  test::expect_error([&] { w.add_uint32("a", 2); }, "GGUF metadata key 'a' given twice");
  test::expect_error(
      [&] {
        w.add_tensor("x", {4, 48}, GgmlType::q8_0, [] { return at::zeros({4, 48}); });
      },
      "Q8_0 needs rows of a multiple of 32 values");
  w.add_tensor("y", {2, 32}, GgmlType::f16, [] { return at::zeros({3, 32}); });
  const auto dir = test::fresh_test_dir(/*create=*/true);
  test::expect_error([&] { w.write(dir / "bad.gguf"); }, "GGUF tensor 'y': made with shape [3, 32]");
  EXPECT_FALSE(fs::exists(dir / "bad.gguf")) << "nothing at the final path";
  remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::io
