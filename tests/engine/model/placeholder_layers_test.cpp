// Layers loaded as placeholders (LoadOptions::reads_layer_weights, for a sharded base whose other
// ranks read them): every base linear, attention, dense MLP and each expert, has the tensors a
// full load gives it, the same dtypes and sizes, as meta tensors with no values, and the same
// stored form (4-bit type, blocksize, shape, original dtype); everything else in the layer (norms,
// biases, routers) is read as always, and the layers that are read are unchanged. Dense Llama and
// the MoE families (per-expert Qwen3-MoE, fused Qwen3-MoE, Mixtral, Gemma 4), NF4, FP4, INT8 and
// float, and bitsandbytes pre-quantized checkpoints (NF4, INT8).
#include <filesystem>
#include <functional>
#include <set>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/io/bnb_checkpoint.h"
#include "engine/io/remove_tree.h"
#include "engine/model/causal_lm.h"
#include "tests/reference.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::model {
namespace {

struct Case {
  std::string fixture;
  QuantSpec::Kind kind;
  std::string name;
  bool prequantized = false;  // the fixture as a bitsandbytes pre-quantized checkpoint
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

LoadOptions options_for(const Case& c) {
  LoadOptions o;
  o.quant.kind = c.kind;
  o.quant.double_quant = c.kind == QuantSpec::Kind::nf4;  // FP4 without it: both forms are covered
  return o;
}

std::filesystem::path folder_of(const std::string& fixture) {
  return (fixture == "llama" ? test::model_fixture(fixture) : test::moe_fixture(fixture)) / "base";
}

// `c`'s fixture as bitsandbytes writes a pre-quantized model: every base linear's weight replaced
// by its quantized tensors (the 4-bit codes and quant state, or LLM.int8's CB and SCB).
std::filesystem::path write_prequantized(const Case& c) {
  const auto base = io::HfFolder::open(folder_of(c.fixture));
  const auto lm = CausalLM::load(base, options_for(c));
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::set<std::string> replaced;
  for (const auto& layer : lm.layers()) {
    for (const auto* lin : layer.weight_linears()) {
      const auto name = lin->name + ".weight";
      const auto part = c.kind == QuantSpec::Kind::int8
                            ? io::bnb_int8_tensors(name, std::get<ops::Int8Weight>(lin->weight))
                            : io::bnb_4bit_tensors(name, std::get<ops::Packed4bit>(lin->weight));
      tensors.insert(tensors.end(), part.begin(), part.end());
      replaced.insert(name);
    }
  }
  for (const auto& name : base.tensor_names()) {
    if (!replaced.count(name)) tensors.emplace_back(name, base.tensor(name));
  }
  const auto dir = test::fresh_test_dir(true) / "base";
  io::save_hf_folder(dir, base.config(), tensors);
  return dir;
}

CausalLM load(const Case& c, const std::filesystem::path& folder, std::function<bool(int64_t)> reads) {
  auto o = options_for(c);
  o.reads_layer_weights = std::move(reads);
  return CausalLM::load(io::HfFolder::open(folder), o);
}

void expect_same_stored_form(const LinearLayer& got, const LinearLayer& want) {
  ASSERT_EQ(got.weight.index(), want.weight.index()) << want.name;
  EXPECT_EQ(got.out_features, want.out_features) << want.name;
  EXPECT_EQ(got.in_features, want.in_features) << want.name;
  if (const auto* w = std::get_if<ops::Packed4bit>(&want.weight)) {
    const auto& g = std::get<ops::Packed4bit>(got.weight);
    EXPECT_EQ(g.quant_type, w->quant_type) << want.name;
    EXPECT_EQ(g.blocksize, w->blocksize) << want.name;
    EXPECT_EQ(g.shape, w->shape) << want.name;
    EXPECT_EQ(g.dtype, w->dtype) << want.name;
    ASSERT_EQ(g.nested.has_value(), w->nested.has_value()) << want.name;
    if (w->nested) {
      EXPECT_EQ(g.nested->blocksize, w->nested->blocksize) << want.name;
    }
  }
  EXPECT_EQ(got.bias.has_value(), want.bias.has_value()) << want.name;
  if (want.bias) {
    EXPECT_TRUE(at::equal(*got.bias, *want.bias)) << want.name;
  }
}

class PlaceholderLayers : public testing::TestWithParam<Case> {};

TEST_P(PlaceholderLayers, HaveTheShapesOfALoadWithoutItsValuesAndTheReadLayersAreUnchanged) {
  const auto& c = GetParam();
  const auto folder = c.prequantized ? write_prequantized(c) : folder_of(c.fixture);
  const auto full = load(c, folder, {});
  const auto partial = load(c, folder, [](int64_t i) { return i == 0; });
  ASSERT_GT(full.layers().size(), 1u);
  ASSERT_EQ(partial.layers().size(), full.layers().size());
  int64_t placeholders = 0;
  for (size_t i = 0; i < full.layers().size(); ++i) {
    const auto want = full.layers()[i].weight_linears();
    const auto got = partial.layers()[i].weight_linears();
    ASSERT_EQ(got.size(), want.size()) << "layer " << i;
    for (size_t k = 0; k < want.size(); ++k) {
      expect_same_stored_form(*got[k], *want[k]);
      const auto w = want[k]->base_tensors(), g = got[k]->base_tensors();
      ASSERT_EQ(g.size(), w.size()) << want[k]->name;
      for (size_t t = 0; t < w.size(); ++t) {
        EXPECT_EQ(g[t].scalar_type(), w[t].scalar_type()) << want[k]->name << " tensor " << t;
        EXPECT_EQ(g[t].sizes(), w[t].sizes()) << want[k]->name << " tensor " << t;
        if (i == 0) {
          EXPECT_TRUE(test::bitwise_equal(g[t], w[t])) << want[k]->name << " tensor " << t;
        } else {
          EXPECT_TRUE(g[t].is_meta()) << want[k]->name << " tensor " << t;
          ++placeholders;
        }
      }
    }
    // The rest of the layer is read on every rank.
    EXPECT_TRUE(test::bitwise_equal(partial.layers()[i].input_norm, full.layers()[i].input_norm)) << "layer " << i;
    if (full.layers()[i].moe) {
      const auto& fm = *full.layers()[i].moe;
      const auto& pm = *partial.layers()[i].moe;
      const auto& want_router = fm.gemma4_router ? fm.gemma4_router->proj : fm.router;
      const auto& got_router = pm.gemma4_router ? pm.gemma4_router->proj : pm.router;
      EXPECT_TRUE(test::bitwise_equal(got_router, want_router)) << "layer " << i;
    }
  }
  EXPECT_GT(placeholders, 0);
  if (c.prequantized) qtrain::engine::io::remove_tree(folder.parent_path());
}

INSTANTIATE_TEST_SUITE_P(Families,
                         PlaceholderLayers,
                         testing::Values(Case{"llama", QuantSpec::Kind::nf4, "llama_nf4"},
                                         Case{"llama", QuantSpec::Kind::fp4, "llama_fp4"},
                                         Case{"llama", QuantSpec::Kind::int8, "llama_int8"},
                                         Case{"llama", QuantSpec::Kind::none, "llama_float"},
                                         Case{"qwen3_moe", QuantSpec::Kind::nf4, "qwen3_moe_nf4"},
                                         Case{"qwen3_moe_fused", QuantSpec::Kind::int8, "qwen3_moe_fused_int8"},
                                         Case{"mixtral", QuantSpec::Kind::nf4, "mixtral_nf4"},
                                         Case{"gemma4_moe", QuantSpec::Kind::nf4, "gemma4_moe_nf4"},
                                         Case{"llama", QuantSpec::Kind::nf4, "llama_bnb_nf4", true},
                                         Case{"llama", QuantSpec::Kind::int8, "llama_bnb_int8", true}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace qtrain::engine::model
