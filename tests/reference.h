// Access to the reference outputs that scripts/reference/*.py write with the Python stack
// (bitsandbytes, transformers, peft), and comparisons used by the parity tests.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"
#include "engine/lora/lora_config.h"
#include "engine/lora/lora_linear.h"

namespace qtrain::test {

// $QTRAIN_FIXTURES/bnb_reference.safetensors (ctest sets QTRAIN_FIXTURES).
const engine::io::SafetensorsFile& bnb_reference();
// The cases of that file whose "kind" is `kind` (the file's "cases" metadata).
std::vector<nlohmann::json> reference_cases(const std::string& kind);

// $QTRAIN_FIXTURES/models/<arch>: base/ (HF folder), adapter/ (PEFT), reference.safetensors,
// written by scripts/reference/model_reference.py.
std::filesystem::path model_fixture(const std::string& arch);
// $QTRAIN_FIXTURES/moe/<case>: base/, adapter_attn/, adapter/ (PEFT), reference.safetensors,
// written by scripts/reference/moe_reference.py.
std::filesystem::path moe_fixture(const std::string& name);

// What `$QTRAIN_PYTHON scripts/reference/<script> <mode> --out FILE` wrote: its tensors, or why
// there are none (QTRAIN_PYTHON unset: skipped; the script failed: the command and its output).
struct ScriptTensors {
  bool skipped = false;
  std::string error;
  std::map<std::string, at::Tensor> tensors;
};
ScriptTensors run_reference_script(const std::string& script, const std::string& mode);

// The logits PEFT computes for `ids` (scripts/reference/adapter_logits.py under $QTRAIN_PYTHON)
// on the model in `base` with the adapter qtrain writes from `config` and `adapters` into
// `dir`/adapter (left there for the caller). The caller skips when QTRAIN_PYTHON is unset; a
// script that fails fails the test.
// `saved_modules`: the modules trained in full it writes beside the adapters.
at::Tensor peft_logits_of_written_adapter(const std::filesystem::path& base,
                                          const engine::lora::LoraConfig& config,
                                          const std::map<std::string, engine::lora::LoraAdapter>& adapters,
                                          const at::Tensor& ids,
                                          const std::filesystem::path& dir,
                                          const std::map<std::string, at::Tensor>& saved_modules = {});

// Same dtype, shape and bytes: the test of byte compatibility. NaNs compare by bit pattern.
bool bitwise_equal(const at::Tensor& a, const at::Tensor& b);
// How many elements differ bitwise (same shape and dtype required).
int64_t count_bitwise_diff(const at::Tensor& a, const at::Tensor& b);

}  // namespace qtrain::test
