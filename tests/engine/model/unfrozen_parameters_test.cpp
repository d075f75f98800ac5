// axolotl's unfrozen_parameters read as Note [Unfrozen parameters] says: patterns on the base's
// names (and peft's), row ranges, and the parameters qtrain refuses to train in full, by name.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/io/hf_folder.h"
#include "engine/model/causal_lm.h"
#include "engine/model/saved_modules.h"
#include "engine/model/unfrozen_parameters.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::engine::model {
namespace {

class UnfrozenParameters : public ::testing::Test {
 protected:
  UnfrozenParameters()
      : folder_(io::HfFolder::open(test::model_fixture("llama") / "base")), lm_(CausalLM::load(folder_, {})) {}
  Unfrozen unfrozen(const std::vector<std::string>& patterns) const {
    return unfrozen_parameters(lm_, folder_.tensor_names(), patterns, "run.yaml");
  }
  io::HfFolder folder_;
  CausalLM lm_;
};

TEST_F(UnfrozenParameters, TheEmbeddingsAndTheHeadTrainByTheirBaseOrPeftNamesWithRowRanges) {
  // '.' is literal, re.match anchors at the start only; the peft-wrapped name matches too; a
  // pattern for another layout (a multimodal model's) matches nothing and is reported.
  const auto u =
      unfrozen({"^model.embed_tokens.weight$[100:]", "^base_model.model.lm_head", "^model.language_model.*"});
  EXPECT_EQ(u.modules_to_save, (std::vector<std::string>{"embed_tokens", "lm_head"}));
  EXPECT_EQ(u.embed_rows, (std::vector<RowRange>{{100, 160}}));
  EXPECT_TRUE(u.head_rows.empty());
  EXPECT_EQ(u.unmatched, std::vector<std::string>{"^model.language_model.*"});
  // "model.embed_tokensXweight" is no match for a literal '.'.
  EXPECT_EQ(unfrozen({"^model.embed_tokensXweight"}).unmatched.size(), 1u);
  EXPECT_EQ(unfrozen({"^lm_head.weight[3]"}).head_rows, (std::vector<RowRange>{{3, 4}}));
}

// Norms train by their module paths, which join modules_to_save (peft's suffix rule then names
// just them).
TEST_F(UnfrozenParameters, NormsTrainByTheirModulePaths) {
  const auto u = unfrozen({"^model.layers.+.input_layernorm", "^model.norm.weight$", "^model.layers.1.post_attention"});
  EXPECT_EQ(u.modules_to_save,
            (std::vector<std::string>{"model.layers.0.input_layernorm",
                                      "model.layers.1.input_layernorm",
                                      "model.layers.2.input_layernorm",
                                      "model.norm",
                                      "model.layers.1.post_attention_layernorm"}));
  EXPECT_TRUE(u.unmatched.empty());
}

TEST_F(UnfrozenParameters, OtherParametersAreRefusedByNameWithWhy) {
  test::expect_error([&] { unfrozen({"^model.layers.0.self_attn.q_proj.weight"}); },
                     "run.yaml: unfrozen_parameters entry '^model.layers.0.self_attn.q_proj.weight' matches "
                     "model.layers.0.self_attn.q_proj.weight, a linear weight of the base");
  test::expect_error([&] { unfrozen({"^model.norm.weight[0:2]"}); },
                     "gives a row range for the norm model.norm.weight; row ranges apply to the token embeddings "
                     "and the output head");
  test::expect_error([&] { unfrozen({"^lm_head.weight[150:170]"}); },
                     "ends at row 170 but lm_head.weight has 160 rows");
  const auto qwen2 = io::HfFolder::open(test::model_fixture("qwen2") / "base");
  const auto biased = CausalLM::load(qwen2, {});
  test::expect_error(
      [&] { unfrozen_parameters(biased, qwen2.tensor_names(), {"^model.layers.0.self_attn.q_proj.bias"}, "run.yaml"); },
      "matches model.layers.0.self_attn.q_proj.bias, a bias, which stays frozen: peft's adapter format saves trained "
      "biases only all together");
}

// A row range keeps the other rows' gradient at zero, as axolotl's hook does.
TEST_F(UnfrozenParameters, ARowRangeZeroesTheOtherRowsGradient) {
  auto w = at::randn({6, 3}).requires_grad_(true);
  train_rows_only(w, {{1, 3}, {5, 6}});
  (w * w).sum().backward();
  const auto expected = 2 * w.detach() * at::tensor({0, 1, 1, 0, 0, 1}, at::kFloat).view({6, 1});
  EXPECT_TRUE(at::equal(w.grad(), expected));
}

}  // namespace
}  // namespace qtrain::engine::model
