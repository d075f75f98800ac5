// Decoding with a KV cache computes what a full forward over the whole sequence computes (Note
// [KV cache]): for every architecture's fixture, with its adapter, the logits of a prompt read at
// once and then token by token equal the full forward's at every position; a left-padded batch
// gives each row what it gives alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/causal_lm.h"
#include "engine/model/kv_cache.h"
#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "tests/reference.h"

namespace qtrain::engine::model {
namespace {

namespace fs = std::filesystem;

// The fixture folders: dense architectures and MoE cases (sliding windows: Mistral's 8 and
// Gemma's; Gemma 2's soft-caps; Gemma 4's k = v layers and expert block).
std::vector<fs::path> fixtures() {
  std::vector<fs::path> out;
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gemma4"}) {
    out.push_back(test::model_fixture(arch));
  }
  for (const char* name : {"qwen3_moe", "mixtral", "gemma4_moe"}) out.push_back(test::moe_fixture(name));
  return out;
}

CausalLM load(const fs::path& fixture) {
  auto lm = CausalLM::load(io::HfFolder::open(fixture / "base"), LoadOptions{});
  attach_lora(lm, io::load_peft_adapter(fixture / "adapter"), (fixture / "adapter").string());
  return lm;
}

// max |a - b| / max |b|.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

at::Tensor all_valid(int64_t b, int64_t t) {
  return at::ones({b, t}, at::kBool);
}

TEST(KvCache, TokenByTokenEqualsTheFullForward) {
  if (std::getenv("QTRAIN_FIXTURES") == nullptr) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
  for (const auto& fixture : fixtures()) {
    auto lm = load(fixture);
    schedule::LayerScheduler scheduler(lm);
    const auto plan = scheduler.prepare_eval();
    // Longer than Mistral's window of 8 and the Gemma fixtures' sliding windows.
    const int64_t t = 20, prompt = 6;
    const auto ids = at::randint(lm.config().vocab_size, {1, t}, at::TensorOptions().dtype(at::kLong));
    const auto full = lm.logits(scheduler.eval_hidden(plan, ids));
    KvCache cache(static_cast<int64_t>(lm.layers().size()));
    std::vector<at::Tensor> pieces = {
        lm.logits(scheduler.decode_hidden(plan, ids.narrow(1, 0, prompt), all_valid(1, prompt), cache))};
    for (int64_t i = prompt; i < t; ++i) {
      pieces.push_back(lm.logits(scheduler.decode_hidden(plan, ids.narrow(1, i, 1), all_valid(1, 1), cache)));
    }
    EXPECT_EQ(cache.length(), t);
    const auto cached = at::cat(pieces, 1);
    // float32 on both sides: the same products over fewer or more keys, in another order, and on
    // MoE models each token's expert products in GEMMs of other shapes (measured up to 1.006e-5,
    // Gemma 4's MoE fixture).
    EXPECT_LT(relative_error(cached, full), 2e-5) << fixture;
    // What qtrain plan counts for it: every layer's keys and values (Gemma 4's full layers wider).
    EXPECT_EQ(cache.bytes(), kv_cache_bytes(lm.config(), 1, t, at::kFloat)) << fixture;
  }
}

TEST(KvCache, ALeftPaddedBatchGivesEachRowWhatItGivesAlone) {
  if (std::getenv("QTRAIN_FIXTURES") == nullptr) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
  for (const auto& fixture : fixtures()) {
    auto lm = load(fixture);
    schedule::LayerScheduler scheduler(lm);
    const auto plan = scheduler.prepare_eval();
    const auto opts = at::TensorOptions().dtype(at::kLong);
    const int64_t vocab = lm.config().vocab_size;
    const std::vector<at::Tensor> prompts = {at::randint(vocab, {1, 11}, opts), at::randint(vocab, {1, 4}, opts)};
    const auto next = at::randint(vocab, {2, 3}, opts);  // three decoding steps
    // Alone: the prompt, then the three tokens one by one; the last position's logits each time.
    std::vector<at::Tensor> alone;
    for (int64_t r = 0; r < 2; ++r) {
      KvCache cache(static_cast<int64_t>(lm.layers().size()));
      const auto& p = prompts[r];
      std::vector<at::Tensor> steps = {
          lm.logits(scheduler.decode_hidden(plan, p, all_valid(1, p.size(1)), cache)).select(1, -1)};
      for (int64_t s = 0; s < 3; ++s) {
        steps.push_back(
            lm.logits(scheduler.decode_hidden(plan, next.narrow(0, r, 1).narrow(1, s, 1), all_valid(1, 1), cache))
                .select(1, -1));
      }
      alone.push_back(at::stack(steps, 1));  // [1, 4, V]
    }
    // Together: the short prompt left-padded with token 0.
    const auto padded = at::cat({at::zeros({1, 7}, opts), prompts[1]}, 1);
    auto valid = all_valid(2, 11);
    valid[1].narrow(0, 0, 7).fill_(false);
    KvCache cache(static_cast<int64_t>(lm.layers().size()));
    std::vector<at::Tensor> steps = {
        lm.logits(scheduler.decode_hidden(plan, at::cat({prompts[0], padded}, 0), valid, cache)).select(1, -1)};
    for (int64_t s = 0; s < 3; ++s) {
      steps.push_back(
          lm.logits(scheduler.decode_hidden(plan, next.narrow(1, s, 1), all_valid(2, 1), cache)).select(1, -1));
    }
    const auto together = at::stack(steps, 1);  // [2, 4, V]
    for (int64_t r = 0; r < 2; ++r) {
      EXPECT_LT(relative_error(together.narrow(0, r, 1), alone[r]), 1e-5) << fixture << " row " << r;
    }
  }
}

}  // namespace
}  // namespace qtrain::engine::model
