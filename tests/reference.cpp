// See reference.h.
#include "tests/reference.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"

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

ScriptTensors run_reference_script(const std::string& script, const std::string& mode) {
  namespace fs = std::filesystem;
  ScriptTensors r;
  const char* python = std::getenv("QTRAIN_PYTHON");
  if (python == nullptr || *python == '\0') {
    r.skipped = true;
    return r;
  }
  const fs::path dir = fs::temp_directory_path() / ("qtrain_" + mode + "_reference_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / (mode + ".safetensors");
  const std::string command = "'" + std::string(python) + "' '" +
                              (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference" / script).string() + "' " + mode +
                              " --out '" + file.string() + "' > '" + (dir / "log").string() + "' 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::stringstream log;
    log << std::ifstream(dir / "log").rdbuf();
    r.error = command + "\n" + log.str();
  } else {
    // The tensors map the file, which stays readable after the folder is removed.
    r.tensors = engine::io::safetensors_load(file);
  }
  qtrain::engine::io::remove_tree(dir);
  return r;
}

std::filesystem::path model_fixture(const std::string& arch) {
  return fixtures_dir() / "models" / arch;
}

std::filesystem::path moe_fixture(const std::string& name) {
  return fixtures_dir() / "moe" / name;
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

at::Tensor peft_logits_of_written_adapter(const std::filesystem::path& base,
                                          const engine::lora::LoraConfig& config,
                                          const std::map<std::string, engine::lora::LoraAdapter>& adapters,
                                          const at::Tensor& ids,
                                          const std::filesystem::path& dir,
                                          const std::map<std::string, at::Tensor>& saved_modules) {
  std::filesystem::create_directories(dir);
  engine::io::save_peft_adapter(
      dir / "adapter", config, adapters, base.string(), at::kFloat, engine::io::AdapterFolder::own, saved_modules);
  engine::io::safetensors_save(dir / "ids.safetensors", {{"ids", ids}});
  const auto cmd = std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                   (std::filesystem::path(QTRAIN_SOURCE_DIR) / "scripts/reference/adapter_logits.py").string() + " " +
                   base.string() + " " + (dir / "adapter").string() + " " + (dir / "ids.safetensors").string() + " " +
                   (dir / "peft.safetensors").string() + " 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return engine::io::SafetensorsFile::open(dir / "peft.safetensors").tensor("logits");
}

}  // namespace qtrain::test
