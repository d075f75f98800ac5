// The code tables against the ones bitsandbytes stores in its quant states, and the float32
// float32 bit patterns of bitsandbytes' literals.
#include "ops/quant/codebook.h"

#include <bit>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tests/reference.h"

namespace qtrain::ops {
namespace {

at::Tensor as_tensor(const float* data, int64_t n) {
  return at::from_blob(const_cast<float*>(data), {n}, at::kFloat).clone();
}

TEST(Codebook, Nf4BitPatternsFromTheFormatReference) {
  const uint32_t expected[16] = {0xbf800000,
                                 0xbf3239b1,
                                 0xbf066b30,
                                 0xbeca32a0,
                                 0xbe91a24d,
                                 0xbe3d353f,
                                 0xbdba7871,
                                 0x00000000,
                                 0x3da2faff,
                                 0x3e24cae3,
                                 0x3e7c04dd,
                                 0x3ead033a,
                                 0x3ee1a4b8,
                                 0x3f1007ab,
                                 0x3f3913b3,
                                 0x3f800000};
  const auto& nf4 = codebook_4bit(QuantType::nf4);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(nf4[i]), expected[i]) << "code " << i;
}

TEST(Codebook, Nf4ThresholdsAreTheReferenceMidpoints) {
  // The 15 thresholds of bitsandbytes' CUDA tree are the float32 midpoints qtrain computes.
  const uint32_t expected[15] = {0xbf591cd8,
                                 0xbf1c5270,
                                 0xbeeb8480,
                                 0xbeadea76,
                                 0xbe703cec,
                                 0xbe0d38bc,
                                 0xbd3a7871,
                                 0x3d22faff,
                                 0x3df64862,
                                 0x3e5067e0,
                                 0x3e9582d4,
                                 0x3ec753f9,
                                 0x3f006d04,
                                 0x3f248daf,
                                 0x3f5c89da};
  const auto& q = quantizer_4bit(QuantType::nf4);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(q.midpoints[i]), expected[i]) << "threshold " << i;
}

TEST(Codebook, QuantMapsEqualBitsandbytes) {
  bool seen[2] = {false, false};
  for (const auto& c : test::reference_cases("kbit")) {
    const auto type = quant_type_from_name(c.at("quant_type").get<std::string>());
    auto& done = seen[static_cast<int>(type)];
    if (done) continue;
    const auto& code = codebook_4bit(type);
    EXPECT_TRUE(test::bitwise_equal(as_tensor(code.data(), 16),
                                    test::bnb_reference().tensor(c.at("prefix").get<std::string>() + "quant_map")))
        << quant_type_name(type);
    done = true;
  }
  EXPECT_TRUE(seen[0] && seen[1]);
}

TEST(Codebook, DynamicMapEqualsBitsandbytesNestedQuantMap) {
  for (const auto& c : test::reference_cases("kbit")) {
    if (!c.at("nested").get<bool>()) continue;
    const auto& map = dynamic_map_signed();
    EXPECT_TRUE(
        test::bitwise_equal(as_tensor(map.data(), 256),
                            test::bnb_reference().tensor(c.at("prefix").get<std::string>() + "nested_quant_map")));
    EXPECT_TRUE(std::is_sorted(map.begin(), map.end()));
    EXPECT_EQ(map[127], 0.0f);
    EXPECT_EQ(map[255], 1.0f);
    return;
  }
  FAIL() << "no nested case in the reference file";
}

TEST(Codebook, QuantTypeNames) {
  EXPECT_EQ(quant_type_from_name("nf4"), QuantType::nf4);
  EXPECT_EQ(quant_type_from_name("fp4"), QuantType::fp4);
  EXPECT_EQ(quant_type_name(QuantType::fp4), "fp4");
  try {
    quant_type_from_name("int4");
    FAIL() << "int4 accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("accepted values are 'nf4' and 'fp4'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qtrain::ops
