// A base sharded across ranks (threads of this process over Gloo): each rank keeps 1/N of every
// layer's quantized bytes, and training through the gathered layers gives losses and LoRA
// gradients bitwise identical to the unsharded model (float, NF4 and INT8 bases; 1, 2 and 3
// ranks), with every layer recomputed even with checkpointing off. Each rank reads only its own
// layers from the checkpoint. Between acquisitions a layer's base tensors hold no bytes; a rank
// without an evaluation batch keeps in step with skip_eval.
#include "engine/dist/sharded_base.h"

#include <cmath>
#include <filesystem>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/io/hf_folder.h"
#include "engine/io/remove_tree.h"
#include "engine/schedule/streamed_weights.h"
#include "offload/simulated_copy_engine.h"
#include "tests/expect_error.h"
#include "tests/offload_training.h"
#include "tests/temp_dir.h"
#include "tests/thread_ranks.h"

namespace qtrain::engine::dist {
namespace {

using model::QuantSpec;
using schedule::CheckpointPolicy;

struct Variant {
  QuantSpec::Kind kind;
  int64_t world;
  int64_t depth;
  std::string name;
  friend void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }
};

// Every layer of the test llama sharded, gathered `depth` layers ahead.
schedule::ResidencyPlan sharded_plan(int64_t depth = 1) {
  const auto config = io::read_config_json(test::llama_fixture().base);
  return schedule::ResidencyPlan(model::ModelConfig::from_json(config, "config.json").num_layers,
                                 {{}, /*shard_base=*/true, depth, false});
}

// LoRA dropout off: the ranks are threads sharing the global generator.
model::CausalLM load_sharded(QuantSpec::Kind kind, ShardedBase& base, const std::filesystem::path& folder = {}) {
  auto lm = test::load_llama_with_lora(
      kind, at::kFloat, at::kCPU, 0.0, [&](model::LoadOptions& o) { base.prepare_load(o); }, {}, folder);
  base.bind_model(lm);
  return lm;
}

// One rank's test llama over a sharded base (from `folder`, default the fixture's), its layers
// streamed through gathers. Built in place: `weights` refers to `lm`.
struct ShardedRun {
  ShardedRun(Comm& comm, QuantSpec::Kind kind, int64_t depth = 1, const std::filesystem::path& folder = {})
      : plan(sharded_plan(depth)),
        base(std::make_shared<ShardedBase>(comm, plan)),
        lm(load_sharded(kind, *base, folder)),
        weights(std::make_shared<schedule::StreamedWeights>(lm, plan, base)) {}
  ShardedRun(const ShardedRun&) = delete;
  ShardedRun& operator=(const ShardedRun&) = delete;

  schedule::ResidencyPlan plan;
  std::shared_ptr<ShardedBase> base;
  model::CausalLM lm;
  std::shared_ptr<schedule::StreamedWeights> weights;
};

// The test llama with every base linear weight of the layers `poisoned` holding a NaN: a
// reader refuses such a weight the moment it reads it (HfFolder::tensor), so a load that
// succeeds never read them.
std::filesystem::path fixture_poisoning(const std::filesystem::path& dir, const std::vector<int64_t>& poisoned) {
  const auto base = io::HfFolder::open(test::llama_fixture().base);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& name : base.tensor_names()) {
    auto t = base.tensor(name).clone();
    for (const int64_t l : poisoned) {
      const auto prefix = "model.layers." + std::to_string(l) + ".";
      const bool linear = name.rfind(prefix, 0) == 0 && name.find("_proj.weight") != std::string::npos;
      if (linear) t.view(-1)[0] = std::nan("");
    }
    tensors.emplace_back(name, t);
  }
  io::save_hf_folder(dir, base.config(), tensors);
  return dir;
}

int64_t base_bytes(const model::CausalLM& lm) {
  int64_t total = 0;
  for (const auto& layer : lm.layers()) {
    for (const auto* lin : layer.weight_linears()) {
      for (const auto& t : lin->base_tensors()) total += t.nbytes();
    }
  }
  return total;
}

class ShardedEquivalence : public testing::TestWithParam<Variant> {};

TEST_P(ShardedEquivalence, LossesAndEveryLoraGradientAreBitwiseIdenticalOnEveryRank) {
  const auto& v = GetParam();
  auto resident = test::load_llama_with_lora(v.kind, at::kFloat, at::kCPU, 0.0);
  const int64_t whole = base_bytes(resident);
  const auto want = test::two_steps(resident, nullptr, CheckpointPolicy::none);
  EXPECT_EQ(want.checkpointed, 0);
  std::vector<test::StepsResult> got(v.world);
  std::vector<int64_t> shard_bytes(v.world), gathers(v.world), unprepared(v.world);
  test::run_ranks(v.world, std::chrono::seconds(60), [&](Comm& comm) {
    ShardedRun run(comm, v.kind, v.depth);
    auto& lm = run.lm;
    const auto& sharded = run.weights;
    // Outside an acquisition the layers hold shapes, not bytes.
    for (const auto* lin : lm.layers()[0].weight_linears()) {
      for (const auto& t : lin->base_tensors()) EXPECT_TRUE(t.is_meta()) << lin->name;
    }
    got[comm.rank()] = test::two_steps(lm, sharded, CheckpointPolicy::none);
    shard_bytes[comm.rank()] = run.base->shard_bytes();
    gathers[comm.rank()] = sharded->stats().ring.copies;
    unprepared[comm.rank()] = sharded->stats().unprepared_acquisitions;
  });
  const int64_t layers = static_cast<int64_t>(resident.layers().size());
  for (int64_t r = 0; r < v.world; ++r) {
    const std::string what = v.name + ", rank " + std::to_string(r);
    // Every layer is recomputed in backward even with checkpointing off: its slot is reused.
    EXPECT_EQ(got[r].checkpointed, layers) << what;
    ASSERT_EQ(got[r].losses.size(), want.losses.size()) << what;
    for (size_t s = 0; s < want.losses.size(); ++s) {
      EXPECT_TRUE(test::bitwise_equal(got[r].losses[s], want.losses[s]))
          << what << ", step " << s << ": " << got[r].losses[s].item<double>() << " vs "
          << want.losses[s].item<double>();
    }
    ASSERT_EQ(got[r].grads.size(), want.grads.size()) << what;
    for (size_t i = 0; i < want.grads.size(); ++i) {
      ASSERT_GT(want.grads[i].abs().sum().item<double>(), 0) << "gradient " << i << " is zero";
      EXPECT_TRUE(test::bitwise_equal(got[r].grads[i], want.grads[i])) << what << ", gradient " << i;
    }
    // 1/N of the bytes, up to the blob alignment and the padding to N * 256 bytes per layer.
    const int64_t slack = layers * (64 * offload::kBlobAlignment + v.world * offload::kBlobAlignment);
    EXPECT_LE(shard_bytes[r] * v.world, whole + slack) << what;
    EXPECT_GE(shard_bytes[r] * v.world, whole) << what;
    // Two steps, each a forward and a recompute per layer; a layer still in one of the k slots
    // is not gathered again (the last k of a forward for their recompute, the first k of the
    // next forward), and with a slot for every layer each is gathered once.
    const int64_t k = std::min<int64_t>(layers, v.depth + 1);
    EXPECT_LE(gathers[r], 2 * 2 * layers) << what;
    EXPECT_GE(gathers[r], k == layers ? layers : 2 * 2 * (layers - k)) << what;
    EXPECT_EQ(gathers[r], gathers[0]) << what;
    // Every acquisition found its layer gathered ahead (or being gathered) by the announced order.
    EXPECT_EQ(unprepared[r], 0) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Bases,
                         ShardedEquivalence,
                         testing::Values(Variant{QuantSpec::Kind::nf4, 2, 1, "nf4_2ranks"},
                                         Variant{QuantSpec::Kind::nf4, 3, 2, "nf4_3ranks_depth2"},
                                         Variant{QuantSpec::Kind::int8, 2, 1, "int8_2ranks"},
                                         Variant{QuantSpec::Kind::none, 1, 1, "float_1rank"}),
                         [](const auto& info) { return info.param.name; });

// A sharded base with offloaded activations: every rank's checkpointed inputs go through its own
// copy engine and back, and the ranks still train bitwise as the resident model.
TEST(ShardedBase, OffloadedActivationsTrainBitwiseAsTheResidentModel) {
  auto resident = test::load_llama_with_lora(QuantSpec::Kind::nf4, at::kFloat, at::kCPU, 0.0);
  const auto want = test::two_steps(resident, nullptr, CheckpointPolicy::none);
  std::vector<test::StepsResult> got(2);
  std::vector<int64_t> copies_out(2);
  test::run_ranks(2, std::chrono::seconds(60), [&](Comm& comm) {
    ShardedRun run(comm, QuantSpec::Kind::nf4);
    auto& lm = run.lm;
    const auto& sharded = run.weights;
    auto engine = std::make_shared<offload::SimulatedCopyEngine>(
        offload::SimulatedCopyOptions{std::chrono::milliseconds(1), false});
    auto activations = std::make_shared<schedule::OffloadedActivations>(engine, 1);
    got[comm.rank()] = test::two_steps(lm, sharded, CheckpointPolicy::none, activations);
    copies_out[comm.rank()] = activations->copies_out();
  });
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(copies_out[r], got[r].checkpointed - 2) << "rank " << r << ": all but the last two (depth + 1) left";
    test::expect_same_steps(got[r], want, "rank " + std::to_string(r));
  }
}

// A sharded base with tiled MLPs: the ranks train bitwise as the resident model tiled alike.
TEST(ShardedBase, TiledMlpsTrainBitwiseAsTheResidentModel) {
  auto resident = test::load_llama_with_lora(QuantSpec::Kind::nf4, at::kFloat, at::kCPU, 0.0);
  const auto want =
      test::two_steps(resident, nullptr, CheckpointPolicy::none, nullptr, std::make_shared<schedule::TiledMlp>(3));
  std::vector<test::StepsResult> got(2);
  test::run_ranks(2, std::chrono::seconds(60), [&](Comm& comm) {
    ShardedRun run(comm, QuantSpec::Kind::nf4);
    auto& lm = run.lm;
    const auto& sharded = run.weights;
    got[comm.rank()] =
        test::two_steps(lm, sharded, CheckpointPolicy::none, nullptr, std::make_shared<schedule::TiledMlp>(3));
  });
  for (int64_t r = 0; r < 2; ++r) test::expect_same_steps(got[r], want, "rank " + std::to_string(r));
}

// Each rank reads only the layers it is the reader of (layer i: rank i mod 2): its own folder
// has NaN in every other layer's weights, which no reader would let through. The shards it gets
// from the other readers (bytes and nested offsets) still train bitwise as the resident model.
TEST(ShardedBase, EachRankReadsOnlyItsOwnLayersAndTheOthersSendItsShards) {
  const int64_t world = 2;
  auto resident = test::load_llama_with_lora(QuantSpec::Kind::nf4, at::kFloat, at::kCPU, 0.0);
  const auto want = test::two_steps(resident, nullptr, CheckpointPolicy::none);
  const int64_t layers = static_cast<int64_t>(resident.layers().size());
  ASSERT_GT(layers, world);  // some rank reads two layers
  const auto dir = test::fresh_test_dir(true);
  std::vector<std::filesystem::path> folders;
  for (int64_t r = 0; r < world; ++r) {
    std::vector<int64_t> others;
    for (int64_t l = 0; l < layers; ++l) {
      if (l % world != r) others.push_back(l);
    }
    folders.push_back(fixture_poisoning(dir / ("rank" + std::to_string(r)), others));
  }
  // The poison works: the whole model cannot be read from rank 0's folder.
  test::expect_error(
      [&] { test::load_llama_with_lora(QuantSpec::Kind::nf4, at::kFloat, at::kCPU, 0.0, {}, {}, folders[0]); }, "NaN");
  std::vector<test::StepsResult> got(world);
  test::run_ranks(world, std::chrono::seconds(60), [&](Comm& comm) {
    ShardedRun run(comm, QuantSpec::Kind::nf4, 1, folders[comm.rank()]);
    EXPECT_EQ(run.base->reader_of(2), 0);
    auto& lm = run.lm;
    const auto& sharded = run.weights;
    got[comm.rank()] = test::two_steps(lm, sharded, CheckpointPolicy::none);
  });
  for (int64_t r = 0; r < world; ++r) test::expect_same_steps(got[r], want, "rank " + std::to_string(r));
  qtrain::engine::io::remove_tree(dir);
}

// Ranks that build a layer differently (here: another quantization) are told so by name at
// bind_model, instead of gathering bytes that mean something else.
TEST(ShardedBase, RanksThatDisagreeOnALayersLayoutAreRefusedByName) {
  std::vector<std::string> errors(2);
  test::run_ranks(2, std::chrono::seconds(60), [&](Comm& comm) {
    ShardedBase base(comm, sharded_plan());
    try {
      load_sharded(comm.rank() == 0 ? QuantSpec::Kind::nf4 : QuantSpec::Kind::fp4, base);
    } catch (const std::exception& e) {
      errors[comm.rank()] = e.what();
    }
  });
  // Each rank finds the other's layer unlike its own placeholders.
  for (int r = 0; r < 2; ++r) {
    const auto other = std::to_string(1 - r);
    EXPECT_NE(errors[r].find("layer " + other + ": rank " + other + " read its base weights as"), std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("same quantization settings"), std::string::npos) << errors[r];
  }
}

TEST(ShardedBase, ARankWithoutAnEvaluationBatchKeepsInStepWithSkipEval) {
  auto resident = test::load_llama_with_lora(QuantSpec::Kind::nf4, at::kFloat, at::kCPU, 0.0);
  const auto& ref = test::llama_fixture();
  schedule::LayerScheduler plain(resident);
  const auto want = plain.eval_loss(plain.prepare_eval(), ref.ids, ref.labels);
  std::vector<at::Tensor> losses(2);
  test::run_ranks(2, std::chrono::seconds(60), [&](Comm& comm) {
    ShardedRun run(comm, QuantSpec::Kind::nf4);
    auto& lm = run.lm;
    const auto& sharded = run.weights;
    schedule::LayerScheduler scheduler(lm, sharded);
    const auto plan = scheduler.prepare_eval();
    // Rank 0 evaluates two batches, rank 1 one: its second pass gathers without computing.
    for (int pass = 0; pass < 2; ++pass) {
      if (comm.rank() == 0 || pass == 0) {
        losses[comm.rank()] = scheduler.eval_loss(plan, ref.ids, ref.labels).loss_sum;
      } else {
        scheduler.skip_eval(plan);
      }
    }
    // Two slots, more layers: the second pass finds none of its layers still gathered.
    ASSERT_GT(lm.layers().size(), 2u);
    EXPECT_EQ(sharded->stats().ring.copies, 2 * static_cast<int64_t>(lm.layers().size()));
  });
  for (const auto& l : losses) EXPECT_TRUE(test::bitwise_equal(l, want.loss_sum));
}

TEST(ShardedBase, AForwardOutsideAnAcquisitionFailsInsteadOfReadingASlot) {
  DistEnv one;
  Comm comm(one, std::chrono::seconds(1));
  ShardedRun run(comm, QuantSpec::Kind::nf4);
  auto& lm = run.lm;
  auto& sharded = *run.weights;
  const auto& layer = lm.layers()[0];
  const auto x = at::randn({1, 3, lm.config().hidden_size});
  EXPECT_ANY_THROW(layer.q.forward(x, false));
  test::expect_error([&] { sharded.release(0); }, "layer 0 is released but was not acquired");
  sharded.acquire(0);
  EXPECT_EQ(layer.q.forward(x, false).sizes(), x.sizes());  // q_proj: hidden -> heads * head_dim = hidden
  sharded.release(0);
  EXPECT_ANY_THROW(layer.q.forward(x, false));
}

}  // namespace
}  // namespace qtrain::engine::dist
