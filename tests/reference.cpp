// See reference.h.
#include "tests/reference.h"

#include <cstdlib>
#include <filesystem>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace qtrain::test {

namespace {
std::filesystem::path fixtures_dir() {
  const char* dir = std::getenv("QTRAIN_FIXTURES");
  if (dir == nullptr) {
    throw std::runtime_error("QTRAIN_FIXTURES is not set: run the tests through ctest (scripts/test.sh)");
  }
  return dir;
}
}  // namespace

const engine::io::SafetensorsFile& bnb_reference() {
  static const engine::io::SafetensorsFile file =
      engine::io::SafetensorsFile::open(fixtures_dir() / "bnb_reference.safetensors");
  return file;
}

std::filesystem::path model_fixture(const std::string& arch) {
  return fixtures_dir() / "models" / arch;
}

std::vector<nlohmann::json> reference_cases(const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& c : nlohmann::json::parse(bnb_reference().metadata().at("cases"))) {
    if (c.at("kind") == kind) out.push_back(c);
  }
  return out;
}

namespace {
at::Tensor as_bits(const at::Tensor& t) {
  return t.contiguous().reshape({-1}).view(at::kByte);  // 1-D first: a 0-dim tensor cannot change dtype
}
}  // namespace

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) return false;
  return at::equal(as_bits(a), as_bits(b));
}

int64_t count_bitwise_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.scalar_type(), b.scalar_type());
  EXPECT_EQ(a.sizes(), b.sizes());
  const auto size = c10::elementSize(a.scalar_type());
  auto ba = as_bits(a).view({-1, static_cast<int64_t>(size)});
  auto bb = as_bits(b).view({-1, static_cast<int64_t>(size)});
  return (ba != bb).any(1).sum().item<int64_t>();
}

}  // namespace qtrain::test
