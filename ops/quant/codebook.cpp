// Code tables; see codebook.h.
#include "ops/quant/codebook.h"

#include <algorithm>
#include <bit>
#include <string>

#include <c10/util/Exception.h>

namespace qtrain::ops {
namespace {

constexpr std::array<float, 16> kNf4 = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// Bit 3 is the sign, bits 2..0 a magnitude in "bias 3" units, normalised by 12.
constexpr std::array<float, 16> kFp4 = {
    0.0f / 12,
    0.0625f / 12,
    8.0f / 12,
    12.0f / 12,
    4.0f / 12,
    6.0f / 12,
    2.0f / 12,
    3.0f / 12,
    0.0f / 12,
    -0.0625f / 12,
    -8.0f / 12,
    -12.0f / 12,
    -4.0f / 12,
    -6.0f / 12,
    -2.0f / 12,
    -3.0f / 12,
};

constexpr std::array<uint32_t, 256> kDynamicSignedBits = {
    0xbf7e3333u, 0xbf7a999au, 0xbf770000u, 0xbf736666u, 0xbf6fcccdu, 0xbf6c3333u, 0xbf68999au, 0xbf650000u, 0xbf616666u,
    0xbf5dcccdu, 0xbf5a3333u, 0xbf56999au, 0xbf530000u, 0xbf4f6666u, 0xbf4bcccdu, 0xbf483333u, 0xbf44999au, 0xbf410000u,
    0xbf3d6666u, 0xbf39cccdu, 0xbf363334u, 0xbf32999au, 0xbf2f0000u, 0xbf2b6666u, 0xbf27cccdu, 0xbf243334u, 0xbf20999au,
    0xbf1d0000u, 0xbf196666u, 0xbf15cccdu, 0xbf123334u, 0xbf0e999au, 0xbf0b0000u, 0xbf076666u, 0xbf03ccccu, 0xbf003333u,
    0xbef93332u, 0xbef20000u, 0xbeeaccccu, 0xbee3999au, 0xbedc6666u, 0xbed53333u, 0xbece0000u, 0xbec6ccccu, 0xbebf999au,
    0xbeb86666u, 0xbeb13333u, 0xbeaa0000u, 0xbea2ccccu, 0xbe9b999au, 0xbe946666u, 0xbe8d3334u, 0xbe860000u, 0xbe7d9999u,
    0xbe6f3333u, 0xbe60cccdu, 0xbe526666u, 0xbe440000u, 0xbe35999au, 0xbe273333u, 0xbe18cccdu, 0xbe0a6666u, 0xbdf80000u,
    0xbddb3334u, 0xbdc9eb85u, 0xbdc428f7u, 0xbdbe6667u, 0xbdb8a3d7u, 0xbdb2e148u, 0xbdad1eb8u, 0xbda75c2au, 0xbda1999au,
    0xbd9bd70au, 0xbd96147bu, 0xbd9051ebu, 0xbd8a8f5du, 0xbd84cccdu, 0xbd7e147bu, 0xbd728f5du, 0xbd670a3du, 0xbd5b851fu,
    0xbd500000u, 0xbd447ae1u, 0xbd38f5c3u, 0xbd2d70a3u, 0xbd21eb85u, 0xbd166667u, 0xbd0ae148u, 0xbcfeb852u, 0xbce7ae15u,
    0xbcd0a3d7u, 0xbcb9999au, 0xbca28f5du, 0xbc8b851fu, 0xbc68f5c3u, 0xbc3ae148u, 0xbc1f3b64u, 0xbc160418u, 0xbc0ccccdu,
    0xbc039581u, 0xbbf4bc6au, 0xbbe24dd3u, 0xbbcfdf3bu, 0xbbbd70a4u, 0xbbab020du, 0xbb989374u, 0xbb8624ddu, 0xbb676c8au,
    0xbb428f5cu, 0xbb1db22du, 0xbaf1a9fcu, 0xbaa7ef9du, 0xba7765ffu, 0xba59e83eu, 0xba3c6a80u, 0xba1eecc1u, 0xba016f01u,
    0xb9c7e283u, 0xb98ce705u, 0xb923d70bu, 0xb8ba1f4bu, 0xb88aefb3u, 0xb8378034u, 0xb7b24206u, 0xb70205ffu, 0xb65a1a94u,
    0xb513a3b7u, 0x00000000u, 0x3513a3b7u, 0x365a1a94u, 0x370205ffu, 0x37b24206u, 0x38378034u, 0x388aefb3u, 0x38ba1f4bu,
    0x3923d70bu, 0x398ce705u, 0x39c7e283u, 0x3a016f01u, 0x3a1eecc1u, 0x3a3c6a80u, 0x3a59e83eu, 0x3a7765ffu, 0x3aa7ef9du,
    0x3af1a9fcu, 0x3b1db22du, 0x3b428f5cu, 0x3b676c8au, 0x3b8624ddu, 0x3b989374u, 0x3bab020du, 0x3bbd70a4u, 0x3bcfdf3bu,
    0x3be24dd3u, 0x3bf4bc6au, 0x3c039581u, 0x3c0ccccdu, 0x3c160418u, 0x3c1f3b64u, 0x3c3ae148u, 0x3c68f5c3u, 0x3c8b851fu,
    0x3ca28f5du, 0x3cb9999au, 0x3cd0a3d7u, 0x3ce7ae15u, 0x3cfeb852u, 0x3d0ae148u, 0x3d166667u, 0x3d21eb85u, 0x3d2d70a3u,
    0x3d38f5c3u, 0x3d447ae1u, 0x3d500000u, 0x3d5b851fu, 0x3d670a3du, 0x3d728f5du, 0x3d7e147bu, 0x3d84cccdu, 0x3d8a8f5du,
    0x3d9051ebu, 0x3d96147bu, 0x3d9bd70au, 0x3da1999au, 0x3da75c2au, 0x3dad1eb8u, 0x3db2e148u, 0x3db8a3d7u, 0x3dbe6667u,
    0x3dc428f7u, 0x3dc9eb85u, 0x3ddb3334u, 0x3df80000u, 0x3e0a6666u, 0x3e18cccdu, 0x3e273333u, 0x3e35999au, 0x3e440000u,
    0x3e526666u, 0x3e60cccdu, 0x3e6f3333u, 0x3e7d9999u, 0x3e860000u, 0x3e8d3334u, 0x3e946666u, 0x3e9b999au, 0x3ea2ccccu,
    0x3eaa0000u, 0x3eb13333u, 0x3eb86666u, 0x3ebf999au, 0x3ec6ccccu, 0x3ece0000u, 0x3ed53333u, 0x3edc6666u, 0x3ee3999au,
    0x3eeaccccu, 0x3ef20000u, 0x3ef93332u, 0x3f003333u, 0x3f03ccccu, 0x3f076666u, 0x3f0b0000u, 0x3f0e999au, 0x3f123334u,
    0x3f15cccdu, 0x3f196666u, 0x3f1d0000u, 0x3f20999au, 0x3f243334u, 0x3f27cccdu, 0x3f2b6666u, 0x3f2f0000u, 0x3f32999au,
    0x3f363334u, 0x3f39cccdu, 0x3f3d6666u, 0x3f410000u, 0x3f44999au, 0x3f483333u, 0x3f4bcccdu, 0x3f4f6666u, 0x3f530000u,
    0x3f56999au, 0x3f5a3333u, 0x3f5dcccdu, 0x3f616666u, 0x3f650000u, 0x3f68999au, 0x3f6c3333u, 0x3f6fcccdu, 0x3f736666u,
    0x3f770000u, 0x3f7a999au, 0x3f7e3333u, 0x3f800000u,
};

Quantizer4bit make_quantizer(const std::array<float, 16>& code, std::array<uint8_t, 16> order) {
  Quantizer4bit q{};
  q.sorted_codes = order;
  for (int i = 0; i < 15; ++i) {
    // Same float32 arithmetic as bitsandbytes: (code[a] + code[b]) / 2.
    q.midpoints[i] = (code[order[i]] + code[order[i + 1]]) / 2.0f;
  }
  return q;
}

}  // namespace

std::string_view quant_type_name(QuantType type) {
  return type == QuantType::nf4 ? "nf4" : "fp4";
}

QuantType quant_type_from_name(std::string_view name) {
  if (name == "nf4") return QuantType::nf4;
  if (name == "fp4") return QuantType::fp4;
  TORCH_CHECK(false, "unknown 4-bit quant type '", std::string(name), "': accepted values are 'nf4' and 'fp4'");
}

const std::array<float, 16>& codebook_4bit(QuantType type) {
  return type == QuantType::nf4 ? kNf4 : kFp4;
}

const std::array<float, 16>& dequant_lut_4bit(QuantType type) {
  static const std::array<float, 16> fp4 = [] {
    auto t = kFp4;
    t[8] = -0.0f;
    return t;
  }();
  return type == QuantType::nf4 ? kNf4 : fp4;
}

const Quantizer4bit& quantizer_4bit(QuantType type) {
  static const Quantizer4bit nf4 = make_quantizer(kNf4, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  static const Quantizer4bit fp4 = make_quantizer(kFp4, {11, 10, 13, 12, 15, 14, 9, 0, 8, 1, 6, 7, 4, 5, 2, 3});
  return type == QuantType::nf4 ? nf4 : fp4;
}

const std::array<float, 256>& dynamic_map_signed() {
  static const std::array<float, 256> map = [] {
    std::array<float, 256> m{};
    std::transform(kDynamicSignedBits.begin(), kDynamicSignedBits.end(), m.begin(), [](uint32_t bits) {
      return std::bit_cast<float>(bits);
    });
    return m;
  }();
  return map;
}

}  // namespace qtrain::ops
