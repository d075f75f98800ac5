// What the trainer does differently when it is one of several ranks (engine/dist/comm.h). See
// Note [Data-parallel steps].
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "engine/dist/comm.h"

namespace qtrain::engine::train {

// Note [Data-parallel steps]
// A global step takes world_size * gradient_accumulation_steps micro-batches from the loader, on
// every rank: each rank keeps the same seeded loader and reads every batch of the step, so the
// samples of a step, the loader's position (checkpoints) and the step's trained-token count do
// not depend on the world size. Rank r runs micro-batches [r * accumulation, (r + 1) *
// accumulation), contiguous so that the sum over ranks adds the partial gradients in the order one
// rank accumulates them. Each micro-batch's summed loss is divided by the whole step's token count,
// as on one rank, so the sum of the ranks' gradients is the one-rank gradient of the same step:
// N ranks with accumulation g train as one rank with accumulation N * g. With two ranks and g = 1
// the sum g0 + g1 is the one-rank accumulation itself, bit for bit; otherwise the grouping
// (g0 + g1) + (g2 + g3) differs from ((g0 + g1) + g2) + g3 by float rounding. The sum is the same
// bits on every rank, so clipping and AdamW, run on every rank, keep the replicas identical. The
// step's loss sum and the stop request travel in one more (float64) sum; every rank therefore
// makes the same skip, stop, save and evaluation decisions and calls the same collectives.
// lora_dropout draws from each rank's own generator (seeded alike, as accelerate's set_seed
// does), so with dropout the masks, and the update, depend on the world size.

// The micro-batches of a global step that this rank runs: [first, first + count) of the step's
// world_size * accumulation.
struct StepShare {
  int64_t first = 0;
  int64_t count = 0;
};
StepShare step_share(const dist::Comm& comm, int64_t accumulation);

// The device of this rank: in a run of several on CUDA, the GPU of its LOCAL_RANK (device: auto
// or cuda); `device: cuda:N` would put every rank on one GPU and is an error there.
// Known before the communicator, which needs it for NCCL.
at::Device rank_device(const at::Device& resolved, const std::string& device_key, const dist::DistEnv& env);

// Sums the gradients of `params` over the ranks, in place, through one flat buffer per dtype (an
// undefined gradient counts as zeros). Nothing happens in a run of one.
void sum_gradients(dist::Comm& comm, const std::vector<at::Tensor>& params, const std::string& what);

// Each value summed over the ranks, in float64.
std::vector<double> sum_over_ranks(dist::Comm& comm, const std::vector<double>& values, const std::string& what);

// Rank 0's `text` on every rank (the others' `text` is ignored). Nothing happens in a run of one.
std::string text_from_rank0(dist::Comm& comm, const std::string& text, const std::string& what);

// Every rank's `state` (a generator's state, the same size on every rank), in rank order.
std::vector<at::Tensor> gather_states(dist::Comm& comm, const at::Tensor& state, const std::string& what);

// Where a rank prints progress and summaries: stdout on rank 0, /dev/null on the others, so that
// a run prints each line once.
class RankConsole {
 public:
  explicit RankConsole(const dist::Comm& comm);
  ~RankConsole();
  RankConsole(const RankConsole&) = delete;
  RankConsole& operator=(const RankConsole&) = delete;
  std::FILE* get() const { return out_; }

 private:
  std::FILE* out_;
};

}  // namespace qtrain::engine::train
