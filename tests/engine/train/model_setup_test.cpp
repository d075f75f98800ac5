// Tests for engine/train/model_setup's base_quantization_note: the run log names the
// quantization the base is trained in. A float checkpoint takes the run config's; one saved
// quantized by bitsandbytes keeps its own (as transformers does), and where the run config asks
// for another the note names both instead of claiming the run config's.
#include "engine/train/model_setup.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/io/bnb_checkpoint.h"
#include "tests/expect_error.h"

namespace qtrain::engine::train {
namespace {

config::RunConfig run(bool four, const std::string& type, bool eight, bool double_quant = false) {
  config::RunConfig c;
  c.load_in_4bit = four;
  c.bnb_4bit_quant_type = type;
  c.load_in_8bit = eight;
  c.bnb_4bit_use_double_quant = double_quant;
  return c;
}

nlohmann::json saved(int bits, const std::string& type, bool double_quant) {
  io::BnbQuantization q;
  q.bits = bits;
  q.quant_type = type == "fp4" ? ops::QuantType::fp4 : ops::QuantType::nf4;
  q.double_quant = double_quant;
  return {{"model_type", "llama"}, {"quantization_config", io::bnb_quantization_config(q)}};
}

struct Row {
  nlohmann::json config_json;
  config::RunConfig run;
  std::string note;
};

TEST(BaseQuantizationNote, NamesTheCheckpointsQuantizationAndARunConfigThatDiffers) {
  const nlohmann::json plain = {{"model_type", "llama"}};
  const std::string from = "m/config.json";
  const std::string ignored =
      " does not apply: the saved weights are used as they are, as transformers does. Set "
      "the run config to match, or train on the float model to quantize it your way)";
  const std::vector<Row> table = {
      {plain, run(true, "fp4", false), "fp4"},
      {plain, run(false, "nf4", true), "int8"},
      {plain, run(false, "nf4", false), "not quantized"},
      {saved(4, "nf4", true),
       run(true, "nf4", false, true),
       "nf4 with double quantization (saved quantized by bitsandbytes: m/config.json's quantization_config)"},
      {saved(4, "nf4", false),
       run(true, "fp4", false),
       "nf4 (saved quantized by bitsandbytes: m/config.json's quantization_config; the run config's load_in_4bit: "
       "true, bnb_4bit_quant_type: fp4, bnb_4bit_use_double_quant: false" +
           ignored},
      {saved(4, "fp4", true),
       run(true, "fp4", false, false),
       "fp4 with double quantization (saved quantized by bitsandbytes: m/config.json's quantization_config; the run "
       "config's load_in_4bit: true, bnb_4bit_quant_type: fp4, bnb_4bit_use_double_quant: false" +
           ignored},
      {saved(4, "nf4", false),
       run(false, "nf4", false),
       "nf4 (saved quantized by bitsandbytes: m/config.json's quantization_config; the run config's neither "
       "load_in_4bit nor load_in_8bit" +
           ignored},
      {saved(8, "nf4", false),
       run(true, "nf4", false),
       "int8 (saved quantized by bitsandbytes: m/config.json's quantization_config; the run config's load_in_4bit: "
       "true, bnb_4bit_quant_type: nf4, bnb_4bit_use_double_quant: false" +
           ignored},
      {saved(8, "nf4", false),
       run(false, "nf4", true),
       "int8 (saved quantized by bitsandbytes: m/config.json's quantization_config)"},
  };
  for (const Row& row : table) {
    SCOPED_TRACE(row.config_json.dump());
    EXPECT_EQ(base_quantization_note(row.config_json, from, row.run), row.note);
  }
}

// Only bitsandbytes checkpoints are read; another method is refused by name, never loaded as if
// it were bitsandbytes.
TEST(BaseQuantizationNote, OtherQuantizationMethodsAreRefusedByName) {
  for (const std::string method : {"gptq", "awq", "quanto", "fp8", "compressed-tensors"}) {
    test::expect_error(
        [&] {
          base_quantization_note({{"quantization_config", {{"quant_method", method}, {"bits", 4}}}},
                                 "m/config.json",
                                 run(true, "nf4", false));
        },
        "m/config.json: quantization_config.quant_method is \"" + method +
            "\"; qtrain loads bitsandbytes 4-bit / 8-bit checkpoints and float models only");
  }
}

}  // namespace
}  // namespace qtrain::engine::train
