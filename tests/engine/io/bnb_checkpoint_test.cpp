// Tests for engine/io/bnb_checkpoint: the exact tensors and JSON bytes bitsandbytes writes, round
// trips of 4-bit and 8-bit weights through model folders, every validation error, and interop with
// transformers + bitsandbytes both ways (qtrain reads their checkpoints bit for bit; they load
// qtrain's and get the same weights and logits as from their own quantization).
#include "engine/io/bnb_checkpoint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"
#include "tests/tiny_llama.h"

namespace qtrain::engine::io {
namespace {

namespace fs = std::filesystem;
using ops::QuantType;
using test::expect_error;
using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes().equals(b.sizes()) &&
         at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

std::string blob_text(const at::Tensor& blob) {
  const at::Tensor c = blob.contiguous();
  return std::string(reinterpret_cast<const char*>(c.const_data_ptr<uint8_t>()), c.numel());
}

uint32_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// Irregular values: Gaussian with a scale that changes every 32 elements.
at::Tensor irregular(std::vector<int64_t> shape, at::ScalarType dtype, uint64_t seed) {
  at::manual_seed(seed);
  const int64_t n = c10::multiply_integers(shape);
  at::Tensor scale = at::exp(at::randn({(n + 31) / 32})).repeat_interleave(32).narrow(0, 0, n);
  return (at::randn({n}) * scale).reshape(shape).to(dtype);
}

// What transformers quantizes in a Llama: every linear of the decoder layers (not lm_head).
bool is_quantized_linear(const std::string& name) {
  return name.starts_with("model.layers.") && name.ends_with("_proj.weight");
}

std::vector<std::string> tiny_llama_linears() {
  std::vector<std::string> out;
  for (const auto& [name, t] : test::tiny_llama(at::kFloat, 11)) {
    if (is_quantized_linear(name)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void expect_same_4bit(const ops::Packed4bit& a, const ops::Packed4bit& b, const std::string& what) {
  EXPECT_EQ(a.quant_type, b.quant_type) << what;
  EXPECT_EQ(a.blocksize, b.blocksize) << what;
  EXPECT_EQ(a.shape, b.shape) << what;
  EXPECT_EQ(a.dtype, b.dtype) << what;
  EXPECT_TRUE(bitwise_equal(a.packed.reshape({-1}), b.packed.reshape({-1}))) << what << ": packed codes";
  ASSERT_EQ(a.nested.has_value(), b.nested.has_value()) << what;
  if (a.nested) {
    EXPECT_TRUE(bitwise_equal(a.nested->qabsmax.reshape({-1}), b.nested->qabsmax.reshape({-1}))) << what;
    EXPECT_TRUE(bitwise_equal(a.nested->absmax2.reshape({-1}), b.nested->absmax2.reshape({-1}))) << what;
    EXPECT_TRUE(bitwise_equal(a.nested->code.reshape({-1}), b.nested->code.reshape({-1}))) << what;
    EXPECT_EQ(float_bits(a.nested->offset), float_bits(b.nested->offset)) << what;
    EXPECT_EQ(a.nested->blocksize, b.nested->blocksize) << what;
  } else {
    EXPECT_TRUE(bitwise_equal(a.absmax.reshape({-1}), b.absmax.reshape({-1}))) << what << ": absmax";
  }
}

class BnbCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir(/*create=*/true); }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  // A folder holding `tensors`; returns it opened.
  HfFolder folder_with(const Tensors& tensors, const std::string& sub = "m") {
    save_hf_folder(dir_ / sub, {{"model_type", "llama"}}, tensors);
    return HfFolder::open(dir_ / sub);
  }
  // bnb_4bit_tensors of `q` under "layer.weight", with `key`'s tensor replaced (or dropped when
  // `replacement` is undefined).
  Tensors edited(const ops::Packed4bit& q, const std::string& key, const at::Tensor& replacement) {
    Tensors out;
    for (auto& [name, t] : bnb_4bit_tensors("layer.weight", q)) {
      if (name != key) {
        out.emplace_back(name, t);
      } else if (replacement.defined()) {
        out.emplace_back(name, replacement);
      }
    }
    return out;
  }
  static at::Tensor bytes_of(const std::string& s) {
    at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
    std::memcpy(t.data_ptr(), s.data(), s.size());
    return t;
  }

  fs::path dir_;
};

TEST_F(BnbCheckpointTest, PythonFloatReprMatchesPython) {
  // Left: a double; right: Python's repr of it (checked with CPython 3).
  const std::vector<std::pair<double, std::string>> cases = {
      {2.0, "2.0"},
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {0.1, "0.1"},
      {1.5, "1.5"},
      {100.0, "100.0"},
      {123.456, "123.456"},
      {0.001, "0.001"},
      {0.0001, "0.0001"},
      {0.00012345, "0.00012345"},
      {1.5e-4, "0.00015"},
      {1e-4 * 1.5, "0.00015000000000000001"},
      {1e-05, "1e-05"},
      {-2.5e-7, "-2.5e-07"},
      {1e15, "1000000000000000.0"},
      {1234567890123456.0, "1234567890123456.0"},
      {9999999999999998.0, "9999999999999998.0"},
      {1e16, "1e+16"},
      {12345678901234567.0, "1.2345678901234568e+16"},
      {1e22, "1e+22"},
      {5e-324, "5e-324"},
      {1.7976931348623157e+308, "1.7976931348623157e+308"},
      // float32 values as double: what as_dict's offset.item() gives json.dumps.
      {static_cast<double>(0.1f), "0.10000000149011612"},
      {static_cast<double>(0.052555084228515625f), "0.052555084228515625"},
      {static_cast<double>(3e-5f), "2.9999999242136255e-05"},
  };
  for (const auto& [value, repr] : cases) EXPECT_EQ(python_float_repr(value), repr) << value;
  expect_error([] { python_float_repr(std::numeric_limits<double>::infinity()); }, "inf is not finite");
  expect_error([] { python_float_repr(std::nan("")); }, "is not finite");
}

// The golden vector of bitsandbytes-format.md §1.5: 151 values, blocksize 64, double quant.
TEST_F(BnbCheckpointTest, TensorsAndBlobAreWhatBitsandbytesWrites) {
  at::Tensor x = at::empty({151}, at::kFloat);
  for (int i = 0; i < 151; ++i) {
    x[i] = static_cast<float>(((i * 37) % 17) - 8) / 8 * static_cast<float>(i / 64 + 1);
  }
  const ops::Packed4bit q = ops::quantize_4bit(x, QuantType::nf4, 64, /*double_quant=*/true);
  const Tensors tensors = bnb_4bit_tensors("w.weight", q);
  const std::vector<std::tuple<std::string, at::ScalarType, std::vector<int64_t>>> layout = {
      {"w.weight", at::kByte, {76, 1}},
      {"w.weight.absmax", at::kByte, {3}},
      {"w.weight.quant_map", at::kFloat, {16}},
      {"w.weight.nested_absmax", at::kFloat, {1}},
      {"w.weight.nested_quant_map", at::kFloat, {256}},
      {"w.weight.quant_state.bitsandbytes__nf4", at::kByte, {148}},
  };
  ASSERT_EQ(tensors.size(), layout.size());
  for (size_t i = 0; i < layout.size(); ++i) {
    EXPECT_EQ(tensors[i].first, std::get<0>(layout[i]));
    EXPECT_EQ(tensors[i].second.scalar_type(), std::get<1>(layout[i])) << tensors[i].first;
    EXPECT_EQ(tensors[i].second.sizes().vec(), std::get<2>(layout[i])) << tensors[i].first;
  }
  EXPECT_EQ(blob_text(tensors[5].second),
            R"({"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [151], )"
            R"("nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 2.0})");
  EXPECT_EQ(tensors[2].second[1].item<float>(), -0.6961928009986877f);
  EXPECT_EQ(tensors[4].second[255].item<float>(), 1.0f);

  // Without double quantization: absmax stays float32 and the blob has no nested fields.
  const ops::Packed4bit plain = ops::quantize_4bit(irregular({64, 128}, at::kBFloat16, 1), QuantType::fp4, 128);
  const Tensors p = bnb_4bit_tensors("m.weight", plain);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[1].first, "m.weight.absmax");
  EXPECT_EQ(p[1].second.scalar_type(), at::kFloat);
  EXPECT_EQ(p[1].second.sizes().vec(), (std::vector<int64_t>{64}));
  EXPECT_EQ(p[2].second[8].item<float>(), 0.0f);
  EXPECT_FALSE(std::signbit(p[2].second[8].item<float>()));  // bitsandbytes stores FP4's zero as +0.0
  EXPECT_EQ(p[3].first, "m.weight.quant_state.bitsandbytes__fp4");
  EXPECT_EQ(blob_text(p[3].second),
            R"({"quant_type": "fp4", "blocksize": 128, "dtype": "bfloat16", "shape": [64, 128]})");
}

TEST_F(BnbCheckpointTest, FourBitRoundTripsThroughAFolder) {
  struct Case {
    QuantType type;
    int64_t blocksize;
    bool nested;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {QuantType::nf4, 64, true, at::kBFloat16, {96, 80}},
      {QuantType::nf4, 32, false, at::kFloat, {7, 37}},  // odd element count: a padding nibble
      {QuantType::fp4, 128, true, at::kHalf, {3, 300}},
      {QuantType::fp4, 4096, false, at::kFloat, {5000}},
      {QuantType::nf4, 64, true, at::kFloat, {300, 256}},  // 1200 blocks: 5 nested blocks
  };
  Tensors tensors;
  std::vector<ops::Packed4bit> quantized;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    quantized.push_back(ops::quantize_4bit(irregular(c.shape, c.dtype, 100 + i), c.type, c.blocksize, c.nested));
    for (auto& t : bnb_4bit_tensors("l" + std::to_string(i) + ".weight", quantized.back())) tensors.push_back(t);
  }
  tensors.emplace_back("l0.bias", at::ones({96}));
  const HfFolder folder = folder_with(tensors);

  std::vector<std::string> names;
  for (size_t i = 0; i < cases.size(); ++i) names.push_back("l" + std::to_string(i) + ".weight");
  EXPECT_EQ(bnb_4bit_weight_names(folder), names);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(names[i]);
    ASSERT_TRUE(is_bnb_4bit(folder, names[i]));
    const ops::Packed4bit q = read_bnb_4bit(folder, names[i]);
    expect_same_4bit(q, quantized[i], names[i]);
    // Zero-copy: the packed codes and absmax are the mapped bytes of the file.
    EXPECT_EQ(q.packed.data_ptr(), folder.tensor(names[i]).data_ptr());
    const at::Tensor absmax = q.nested ? q.nested->qabsmax : q.absmax;
    EXPECT_EQ(absmax.data_ptr(), folder.tensor(names[i] + ".absmax").data_ptr());
    EXPECT_TRUE(bitwise_equal(ops::dequantize_4bit(q), ops::dequantize_4bit(quantized[i])));
    // Writing what was read gives the file's tensors back, byte for byte.
    for (const auto& [key, t] : bnb_4bit_tensors(names[i], q)) {
      EXPECT_TRUE(bitwise_equal(t, folder.tensor(key))) << key;
    }
  }
  EXPECT_FALSE(is_bnb_4bit(folder, "l0.bias"));
}

TEST_F(BnbCheckpointTest, ReadsPackedCodesStoredInAnotherQuantStorage) {
  // FSDP-QLoRA checkpoints (bnb_4bit_quant_storage=bfloat16) hold the same bytes as bf16 [n/4, 1].
  const ops::Packed4bit q = ops::quantize_4bit(irregular({64, 64}, at::kBFloat16, 5), QuantType::nf4, 64, true);
  const at::Tensor as_bf16 = q.packed.reshape({-1}).view(at::kBFloat16).reshape({-1, 1});
  ASSERT_EQ(as_bf16.sizes().vec(), (std::vector<int64_t>{1024, 1}));
  const HfFolder folder = folder_with(edited(q, "layer.weight", as_bf16));
  const ops::Packed4bit read = read_bnb_4bit(folder, "layer.weight");
  EXPECT_EQ(read.packed.scalar_type(), at::kByte);
  EXPECT_EQ(read.packed.data_ptr(), folder.tensor("layer.weight").data_ptr());
  expect_same_4bit(read, q, "bf16 storage");
}

// --- 4-bit errors ----------------------------------------------------------------------------

TEST_F(BnbCheckpointTest, RejectsCustomQuantMap) {
  const ops::Packed4bit q = ops::quantize_4bit(irregular({8, 64}, at::kFloat, 6), QuantType::nf4, 64, true);
  at::Tensor map = at::from_blob(const_cast<float*>(ops::codebook_4bit(QuantType::nf4).data()), {16}).clone();
  map[3] = 0.5f;
  const HfFolder folder = folder_with(edited(q, "layer.weight.quant_map", map));
  expect_error([&] { read_bnb_4bit(folder, "layer.weight"); },
               "model.safetensors: 'layer.weight.quant_map' entry 3 is 0.5 but bitsandbytes' nf4 table has");
  expect_error([&] { read_bnb_4bit(folder, "layer.weight"); }, "uses a custom code table, which qtrain cannot");
  // The FP4 table in an NF4 checkpoint is the same mistake.
  const at::Tensor fp4 = at::from_blob(const_cast<float*>(ops::codebook_4bit(QuantType::fp4).data()), {16}).clone();
  const HfFolder swapped = folder_with(edited(q, "layer.weight.quant_map", fp4), "swapped");
  expect_error([&] { read_bnb_4bit(swapped, "layer.weight"); }, "entry 0 is 0 but bitsandbytes' nf4 table has -1");
}

TEST_F(BnbCheckpointTest, RejectsWeightWithoutQuantStateBlob) {
  const ops::Packed4bit q = ops::quantize_4bit(irregular({8, 64}, at::kFloat, 7), QuantType::nf4, 64, true);
  Tensors tensors = edited(q, "layer.weight.quant_state.bitsandbytes__nf4", at::Tensor());
  tensors.emplace_back("float.weight", at::ones({4, 4}));
  const HfFolder folder = folder_with(tensors);
  EXPECT_FALSE(is_bnb_4bit(folder, "layer.weight"));
  expect_error([&] { read_bnb_4bit(folder, "layer.weight"); },
               "model.safetensors: 'layer.weight' (Byte [256, 1]) has no quant_state "
               "('layer.weight.quant_state.bitsandbytes__nf4' or 'layer.weight.quant_state.bitsandbytes__fp4'), so "
               "it is not a bitsandbytes 4-bit weight");
  expect_error([&] { read_bnb_4bit(folder, "float.weight"); }, "'float.weight' (Float [4, 4]) has no quant_state");
  expect_error([&] { read_bnb_4bit(folder, "missing.weight"); }, "the model has no tensor 'missing.weight'");
}

TEST_F(BnbCheckpointTest, RejectsBadQuantStateBlobs) {
  const ops::Packed4bit q = ops::quantize_4bit(irregular({8, 64}, at::kFloat, 8), QuantType::nf4, 64, true);
  const std::string key = "layer.weight.quant_state.bitsandbytes__nf4";
  const std::string good = blob_text(bnb_4bit_tensors("layer.weight", q).back().second);
  const auto with_blob = [&](const std::string& name, const std::string& text) {
    return folder_with(edited(q, key, bytes_of(text)), name);
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  const std::string where = "model.safetensors: '" + key + "': ";
  expect_error([&] { read_bnb_4bit(with_blob("a", "{\"quant_type\": "), "layer.weight"); }, where + "not valid JSON");
  expect_error(
      [&] {
        read_bnb_4bit(with_blob("b", replaced("\"dtype\": \"float32\"", "\"dtype\": \"float64\"")), "layer.weight");
      },
      where + "dtype \"float64\" is not supported");
  expect_error([&] { read_bnb_4bit(with_blob("c", replaced("[8, 64]", "[8, 66]")), "layer.weight"); },
               "'layer.weight' holds 256 bytes of packed 4-bit codes, but its quant_state shape [8, 66] (528 "
               "elements) needs 264");
  expect_error(
      [&] { read_bnb_4bit(with_blob("d", replaced("\"blocksize\": 64", "\"blocksize\": 48")), "layer.weight"); },
      where + "blocksize 48 is not a bitsandbytes 4-bit blocksize");
  expect_error([&] { read_bnb_4bit(with_blob("e", replaced("{", "{\"extra\": 1, ")), "layer.weight"); },
               where + "unknown field \"extra\"");
  expect_error(
      [&] {
        read_bnb_4bit(with_blob("f", replaced("\"quant_type\": \"nf4\"", "\"quant_type\": \"fp4\"")), "layer.weight");
      },
      where + "quant_type is \"fp4\" but the key says \"nf4\"");
  expect_error([&] { read_bnb_4bit(with_blob("g", replaced(", \"nested_dtype\": \"float32\"", "")), "layer.weight"); },
               where + "nested_blocksize, nested_dtype and nested_offset must be all present");
}

TEST_F(BnbCheckpointTest, RejectsMissingOrMistypedStateTensors) {
  const ops::Packed4bit q = ops::quantize_4bit(irregular({8, 64}, at::kFloat, 9), QuantType::nf4, 64, true);
  expect_error(
      [&] { read_bnb_4bit(folder_with(edited(q, "layer.weight.nested_absmax", at::Tensor()), "a"), "layer.weight"); },
      "has no tensor 'layer.weight.nested_absmax' (float32 absmax of the absmax codes");
  expect_error(
      [&] { read_bnb_4bit(folder_with(edited(q, "layer.weight.absmax", at::ones({8})), "b"), "layer.weight"); },
      "'layer.weight.absmax' is Float [8] but must be Byte with 8 elements (uint8 codes of the "
      "double-quantized absmax");
  expect_error([&] { read_bnb_4bit(folder_with(edited(q, "layer.weight", at::Tensor()), "c"), "layer.weight"); },
               "'layer.weight.quant_state.bitsandbytes__nf4' exists but its packed weight 'layer.weight' does not");
}

// --- 8-bit ---------------------------------------------------------------------------------

TEST_F(BnbCheckpointTest, Int8RoundTripsThroughAFolder) {
  const ops::Int8Weight w = ops::Int8Weight::from_float(irregular({48, 96}, at::kBFloat16, 12));
  const Tensors tensors = bnb_int8_tensors("model.layers.0.mlp.down_proj.weight", w);
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].first, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(tensors[1].first, "model.layers.0.mlp.down_proj.SCB");
  EXPECT_EQ(tensors[1].second.scalar_type(), at::kFloat);
  EXPECT_EQ(tensors[1].second.sizes().vec(), (std::vector<int64_t>{48}));
  EXPECT_EQ(tensors[2].first, "model.layers.0.mlp.down_proj.weight_format");
  EXPECT_EQ(tensors[2].second.scalar_type(), at::kByte);
  EXPECT_EQ(tensors[2].second.dim(), 0);
  EXPECT_EQ(tensors[2].second.item<int64_t>(), 0);

  Tensors all = tensors;
  all.emplace_back("model.norm.weight", at::ones({8}));
  const HfFolder folder = folder_with(all);
  EXPECT_EQ(bnb_int8_weight_names(folder), (std::vector<std::string>{"model.layers.0.mlp.down_proj.weight"}));
  EXPECT_TRUE(is_bnb_int8(folder, "model.layers.0.mlp.down_proj.weight"));
  EXPECT_FALSE(is_bnb_int8(folder, "model.norm.weight"));
  const ops::Int8Weight read = read_bnb_int8(folder, "model.layers.0.mlp.down_proj.weight");
  EXPECT_TRUE(bitwise_equal(read.cb(), w.cb()));
  EXPECT_TRUE(bitwise_equal(read.scb(), w.scb()));
  EXPECT_EQ(read.cb().data_ptr(), folder.tensor("model.layers.0.mlp.down_proj.weight").data_ptr());
  // Without weight_format (bitsandbytes < 0.45 wrote none to safetensors) the row layout is implied.
  const HfFolder old = folder_with({tensors[0], tensors[1]}, "old");
  EXPECT_TRUE(bitwise_equal(read_bnb_int8(old, tensors[0].first).scb(), w.scb()));
}

TEST_F(BnbCheckpointTest, Int8RejectsMissingScbAndTiledFormats) {
  const ops::Int8Weight w = ops::Int8Weight::from_float(irregular({16, 32}, at::kFloat, 13));
  const Tensors tensors = bnb_int8_tensors("proj.weight", w);
  const HfFolder no_scb = folder_with({tensors[0], tensors[2]}, "no_scb");
  expect_error([&] { read_bnb_int8(no_scb, "proj.weight"); },
               "model.safetensors: 'proj.weight' (expected its SCB at 'proj.SCB'): int8 weight has no SCB (row "
               "absmax). SCB cannot be recovered from the int8 codes");

  const HfFolder tiled =
      folder_with({tensors[0], tensors[1], {"proj.weight_format", at::full({}, 2, at::kByte)}}, "tiled");
  expect_error([&] { read_bnb_int8(tiled, "proj.weight"); },
               "model.safetensors: 'proj.weight_format' is 2 (\"col_turing\"), but only 0 (\"row\") is a portable "
               "layout");
  const HfFolder bad_scb = folder_with({tensors[0], {"proj.SCB", at::ones({15})}}, "bad_scb");
  expect_error([&] { read_bnb_int8(bad_scb, "proj.weight"); },
               "'proj.weight': SCB must be float32 [16], got Float [15]");
  expect_error([&] { read_bnb_int8(tiled, "proj.SCB"); }, "'proj.SCB' is not the weight of a module");
}

// --- quantization_config ---------------------------------------------------------------------

TEST_F(BnbCheckpointTest, QuantizationConfigIsTransformers) {
  // config.json of transformers 5.23 after BitsAndBytesConfig(load_in_4bit=True,
  // bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True) and save_pretrained.
  const auto four = nlohmann::json::parse(R"({
    "_load_in_4bit": true, "_load_in_8bit": false, "bnb_4bit_compute_dtype": "float32",
    "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true,
    "llm_int8_enable_fp32_cpu_offload": false, "llm_int8_has_fp16_weight": false,
    "llm_int8_skip_modules": null, "llm_int8_threshold": 6.0, "load_in_4bit": true, "load_in_8bit": false,
    "quant_method": "bitsandbytes"})");
  EXPECT_EQ(bnb_quantization_config({}), four);
  const BnbQuantization parsed = parse_bnb_quantization_config(four, "config.json");
  EXPECT_EQ(parsed.bits, 4);
  EXPECT_EQ(parsed.quant_type, QuantType::nf4);
  EXPECT_TRUE(parsed.double_quant);
  EXPECT_EQ(parsed.compute_dtype, at::kFloat);
  EXPECT_FALSE(parsed.skip_modules.has_value());

  BnbQuantization eight;
  eight.bits = 8;
  eight.quant_type = QuantType::fp4;
  eight.double_quant = false;
  eight.skip_modules = std::vector<std::string>{"lm_head", "mlp.gate"};
  const nlohmann::json j8 = bnb_quantization_config(eight);
  EXPECT_EQ(j8.at("load_in_8bit"), true);
  EXPECT_EQ(j8.at("_load_in_4bit"), false);
  EXPECT_EQ(j8.at("llm_int8_skip_modules"), nlohmann::json({"lm_head", "mlp.gate"}));
  EXPECT_EQ(bnb_quantization_config(parse_bnb_quantization_config(j8, "x")), j8);
  // An old config with only the public flags and defaults left out: BitsAndBytesConfig's defaults.
  const BnbQuantization old = parse_bnb_quantization_config(
      {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}, {"bnb_4bit_compute_dtype", "bfloat16"}}, "x");
  EXPECT_EQ(old.quant_type, QuantType::fp4);
  EXPECT_FALSE(old.double_quant);
  EXPECT_EQ(old.compute_dtype, at::kBFloat16);
  EXPECT_EQ(old.llm_int8_threshold, 6.0);

  expect_error(
      [] {
        parse_bnb_quantization_config({{"quant_method", "gptq"}}, "m/config.json");
      },
      "m/config.json: quantization_config.quant_method is \"gptq\"; qtrain loads bitsandbytes");
  expect_error(
      [] {
        parse_bnb_quantization_config({{"quant_method", "bitsandbytes"}}, "c");
      },
      "has load_in_4bit = 0 and load_in_8bit = 0; exactly one of them must be true");
  expect_error(
      [] {
        parse_bnb_quantization_config(
            {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}, {"bnb_4bit_quant_type", "int4"}}, "c");
      },
      "c: quantization_config.bnb_4bit_quant_type is \"int4\"");
}

// --- interop with transformers + bitsandbytes ------------------------------------------------

fs::path reference_script() {
  // QTRAIN_SOURCE_DIR: the repository root, a compile definition of the test target (__FILE__
  // can be relative under ccache's base_dir).
  return fs::path(QTRAIN_SOURCE_DIR) / "scripts" / "reference" / "bnb_checkpoint_reference.py";
}

class BnbCheckpointInteropTest : public BnbCheckpointTest {
 protected:
  void SetUp() override {
    BnbCheckpointTest::SetUp();
    const char* python = std::getenv("QTRAIN_PYTHON");
    if (python == nullptr || *python == '\0') {
      GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
    }
    python_ = python;
  }

  // Runs a subcommand of scripts/reference/bnb_checkpoint_reference.py on dir_; fails the test
  // with the script's output unless it exits 0.
  void run_reference(const std::string& command) {
    ASSERT_TRUE(fs::exists(reference_script())) << reference_script();
    const fs::path log = dir_ / (command + ".log");
    const std::string line = "'" + python_ + "' '" + reference_script().string() + "' " + command + " --dir '" +
                             dir_.string() + "' > '" + log.string() + "' 2>&1";
    const int status = std::system(line.c_str());
    ASSERT_EQ(status, 0) << line << "\n" << read_text(log);
  }

  std::string python_;
};

// transformers quantizes a random tiny Llama (bf16) on the CPU and saves it; qtrain reads every
// quantized linear and gets bitsandbytes' dequantized weights, CB and SCB bit for bit, quantizes
// the float weights to the same bytes, and writes the same tensors and JSON blobs back.
TEST_F(BnbCheckpointInteropTest, ReadsTransformersCheckpoints) {
  run_reference("make-quantized");
  const HfFolder fp = HfFolder::open(dir_ / "fp");
  const SafetensorsFile reference = SafetensorsFile::open(dir_ / "reference.safetensors");
  const std::vector<std::string> linears = tiny_llama_linears();

  struct Case {
    std::string name;
    QuantType type;
    bool nested;
    at::ScalarType compute_dtype;
  };
  for (const Case& c :
       {Case{"nf4", QuantType::nf4, true, at::kFloat}, Case{"fp4", QuantType::fp4, false, at::kBFloat16}}) {
    SCOPED_TRACE(c.name);
    const HfFolder folder = HfFolder::open(dir_ / c.name);
    const nlohmann::json& config = folder.config().at("quantization_config");
    const BnbQuantization parsed = parse_bnb_quantization_config(config, "config.json");
    EXPECT_EQ(parsed.bits, 4);
    EXPECT_EQ(parsed.quant_type, c.type);
    EXPECT_EQ(parsed.double_quant, c.nested);
    EXPECT_EQ(parsed.compute_dtype, c.compute_dtype);
    EXPECT_EQ(bnb_quantization_config(parsed), config);

    ASSERT_EQ(bnb_4bit_weight_names(folder), linears);
    size_t bnb_keys = 0;
    for (const std::string& w : linears) {
      SCOPED_TRACE(w);
      const ops::Packed4bit q = read_bnb_4bit(folder, w);
      EXPECT_EQ(q.dtype, at::kBFloat16);
      EXPECT_EQ(q.shape, fp.shape(w));
      EXPECT_EQ(q.packed.data_ptr(), folder.tensor(w).data_ptr());
      EXPECT_TRUE(bitwise_equal(ops::dequantize_4bit(q), reference.tensor(c.name + "/" + w + ".dq")));
      expect_same_4bit(ops::quantize_4bit(fp.tensor(w), c.type, 64, c.nested), q, "qtrain's quantization");
      for (const auto& [key, t] : bnb_4bit_tensors(w, q)) {
        ASSERT_TRUE(folder.contains(key)) << key;
        EXPECT_TRUE(bitwise_equal(t, folder.tensor(key))) << key;
        ++bnb_keys;
      }
    }
    // Everything else is the float model unchanged; nothing of the quantized state is left unread.
    for (const std::string& name : folder.tensor_names()) {
      if (fp.contains(name) && !is_quantized_linear(name)) {
        EXPECT_TRUE(bitwise_equal(folder.tensor(name), fp.tensor(name))) << name;
        ++bnb_keys;
      }
    }
    EXPECT_EQ(bnb_keys, folder.tensor_names().size());
  }

  const HfFolder int8 = HfFolder::open(dir_ / "int8");
  const nlohmann::json& config = int8.config().at("quantization_config");
  const BnbQuantization parsed = parse_bnb_quantization_config(config, "config.json");
  EXPECT_EQ(parsed.bits, 8);
  EXPECT_EQ(parsed.llm_int8_threshold, 6.0);
  EXPECT_EQ(bnb_quantization_config(parsed), config);
  ASSERT_EQ(bnb_int8_weight_names(int8), linears);
  for (const std::string& w : linears) {
    SCOPED_TRACE(w);
    const ops::Int8Weight q = read_bnb_int8(int8, w);
    EXPECT_TRUE(bitwise_equal(q.cb(), reference.tensor("int8/" + w + ".CB")));
    EXPECT_TRUE(bitwise_equal(q.scb(), reference.tensor("int8/" + w + ".SCB")));
    const ops::Int8Weight mine = ops::Int8Weight::from_float(fp.tensor(w));
    EXPECT_TRUE(bitwise_equal(mine.cb(), q.cb()));
    EXPECT_TRUE(bitwise_equal(mine.scb(), q.scb()));
    for (const auto& [key, t] : bnb_int8_tensors(w, q)) {
      ASSERT_TRUE(int8.contains(key)) << key;
      EXPECT_TRUE(bitwise_equal(t, int8.tensor(key))) << key;
    }
  }
}

// qtrain quantizes a float32 tiny Llama and writes NF4 (double quant, sharded), FP4 and int8
// folders; transformers loads each and the script checks the quant_state, the dequantized weights,
// CB/SCB and the logits against qtrain's values and against bitsandbytes' own quantization.
TEST_F(BnbCheckpointInteropTest, TransformersLoadsQtrainCheckpoints) {
  const Tensors fp = test::tiny_llama(at::kFloat, 11);
  const nlohmann::json config = test::tiny_llama_config("float32");
  save_hf_folder(dir_ / "fp", config, fp);

  Tensors expected;
  nlohmann::json weights;
  struct Case {
    std::string name;
    int bits;
    QuantType type;
    bool nested;
    at::ScalarType compute_dtype;
    int64_t max_shard_bytes;
  };
  const std::vector<Case> cases = {{"nf4", 4, QuantType::nf4, true, at::kFloat, 20'000},
                                   {"fp4", 4, QuantType::fp4, false, at::kBFloat16, kDefaultMaxShardBytes},
                                   {"int8", 8, QuantType::fp4, false, at::kFloat, kDefaultMaxShardBytes}};
  for (const Case& c : cases) {
    Tensors tensors;
    for (const auto& [name, t] : fp) {
      if (!is_quantized_linear(name)) {
        tensors.emplace_back(name, t);
      } else if (c.bits == 8) {
        const ops::Int8Weight w = ops::Int8Weight::from_float(t);
        for (auto& entry : bnb_int8_tensors(name, w)) tensors.push_back(entry);
        expected.emplace_back(c.name + "/" + name + ".CB", w.cb());
        expected.emplace_back(c.name + "/" + name + ".SCB", w.scb());
        weights[c.name][name] = nlohmann::json::object();
      } else {
        const ops::Packed4bit q = ops::quantize_4bit(t, c.type, 64, c.nested);
        for (auto& entry : bnb_4bit_tensors(name, q)) tensors.push_back(entry);
        expected.emplace_back(c.name + "/" + name + ".dq", ops::dequantize_4bit(q));
        if (q.nested) expected.emplace_back(c.name + "/" + name + ".offset", at::full({1}, q.nested->offset));
        weights[c.name][name] = {{"quant_type", c.type == QuantType::nf4 ? "nf4" : "fp4"},
                                 {"blocksize", 64},
                                 {"dtype", "float32"},
                                 {"shape", t.sizes().vec()},
                                 {"nested", c.nested}};
      }
    }
    nlohmann::json qconfig = config;
    BnbQuantization quantization;
    quantization.bits = c.bits;
    quantization.quant_type = c.type;
    quantization.double_quant = c.nested;
    quantization.compute_dtype = c.compute_dtype;
    qconfig["quantization_config"] = bnb_quantization_config(quantization);
    save_hf_folder(dir_ / ("qtrain_" + c.name), qconfig, tensors, c.max_shard_bytes);
  }
  ASSERT_TRUE(HfFolder::open(dir_ / "qtrain_nf4").sharded());
  safetensors_save(dir_ / "expected.safetensors", expected, {{"weights", weights.dump()}});

  run_reference("check-qtrain");
  EXPECT_NE(read_text(dir_ / "check-qtrain.log").find("int8: checked 14 quantized linears and the logits"),
            std::string::npos)
      << read_text(dir_ / "check-qtrain.log");
}

}  // namespace
}  // namespace qtrain::engine::io
