// See device_plan.h.
#include "engine/train/device_plan.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "engine/config/byte_size.h"
#include "engine/schedule/offloaded_weights.h"
#include "engine/train/memory_stats.h"
#include "engine/train/run_plan.h"
#include "engine/train/run_vocabulary.h"
#include "offload/copy_bandwidth.h"
#include "offload/simulated_copy_engine.h"

namespace qtrain::engine::train {
namespace {

// The budget of a plan made on the CPU, where there is no device memory to fit: it always fits.
constexpr int64_t kNoBudget = int64_t{1} << 62;

schedule::ResidencyPlan residency_plan(const config::RunConfig& c,
                                       const model::ModelConfig& model,
                                       std::vector<int64_t> host_layers) {
  return schedule::ResidencyPlan(
      model.num_layers,
      schedule::ResidencyRequest{
          std::move(host_layers), c.shard_base, c.offload_prefetch_depth, c.activation_offloading});
}

}  // namespace

DevicePlan plan_device(const config::RunConfig& c, const at::Device& device, int64_t world_size, std::FILE* log) {
  DevicePlan p;
  p.device = device;
  const bool offload = c.offload_layers_auto || c.offload_layers > 0;
  const auto model = run_model_config(c);
  if (!device.is_cuda() && !offload) {
    // Offloaded activations alone pass through the simulated copy engine on the CPU.
    if (c.activation_offloading) p.copy_engine = std::make_shared<offload::SimulatedCopyEngine>();
    p.residency = residency_plan(c, model, {});
    return p;
  }
  TORCH_CHECK(device.is_cuda() || !c.offload_layers_auto,
              "offload_layers: auto plans GPU memory, but this run is on ",
              device,
              "; give a number of layers (on the CPU they pass through the simulated copy engine, "
              "which tests the machinery and saves no memory), or set offload_layers: 0");
  if (!device.is_cuda()) {
    // No device memory to plan, but the same planner chooses the layers, against no budget.
    auto plan = plan_run(c, model, kNoBudget, offload::kDefaultH2dBytesPerSecond, world_size);
    p.residency = residency_plan(c, model, plan.offloaded_layers);
    p.memory = std::move(plan);
    p.copy_engine = std::make_shared<offload::SimulatedCopyEngine>();
    return p;
  }
  const int64_t total = device_memory_bytes(device);
  TORCH_CHECK(c.gpu_memory_limit <= total,
              "gpu_memory_limit is ",
              config::format_byte_size(c.gpu_memory_limit),
              " but ",
              device,
              " has ",
              config::format_byte_size(total),
              "; lower gpu_memory_limit or remove it to use the whole device");
  const int64_t budget = c.gpu_memory_limit > 0 ? c.gpu_memory_limit : total;
  if (offload || c.activation_offloading) {
    // The measured bandwidth, so the plan's transfer time is this machine's.
    p.copy_engine = offload::make_cuda_copy_engine(device);
    p.h2d_bytes_per_s = offload::measure_copy_bandwidth(*p.copy_engine, int64_t{256} << 20);
    std::fprintf(log, "offload: pinned host-to-device copies at %.1f GB/s\n", p.h2d_bytes_per_s / 1e9);
  }
  auto plan = plan_run(
      c, model, budget, p.h2d_bytes_per_s > 0 ? p.h2d_bytes_per_s : offload::kDefaultH2dBytesPerSecond, world_size);
  TORCH_CHECK(plan.fits,
              "the run does not fit ",
              config::format_byte_size(budget),
              " of ",
              device,
              " by qtrain's memory plan (nothing was loaded yet):\n",
              offload::format_plan(plan));
  const std::string pinned = pinned_memory_problem(plan, host_memory_available_bytes());
  TORCH_CHECK(pinned.empty(), pinned, "\n", offload::format_plan(plan));
  limit_device_memory(device, budget);
  std::fprintf(log, "%s", offload::format_plan(plan).c_str());
  std::fflush(log);
  p.residency = residency_plan(c, model, plan.offloaded_layers);
  p.memory = std::move(plan);
  return p;
}

std::shared_ptr<schedule::StreamedWeights> make_residency(const DevicePlan& p,
                                                          model::CausalLM& model,
                                                          std::shared_ptr<dist::ShardedBase> sharded,
                                                          std::FILE* log) {
  const auto& plan = p.residency;
  if (plan.streamed_layers().empty()) return nullptr;
  TORCH_CHECK(plan.shard_base() == (sharded != nullptr), "the sharded base and the residency plan disagree");
  const auto residency = sharded ? std::make_shared<schedule::StreamedWeights>(model, plan, sharded)
                                 : schedule::offload_to_host(model, plan, p.copy_engine);
  const auto s = residency->stats();
  const bool gpu = p.device.is_cuda();
  if (sharded) {
    std::fprintf(log,
                 "shard_base: each layer gathered into one of %lld device slots of %s, prefetch depth %lld\n",
                 static_cast<long long>(s.num_slots),
                 offload::format_bytes(s.slot_bytes).c_str(),
                 static_cast<long long>(plan.prefetch_depth()));
  } else {
    std::fprintf(log,
                 "offload: %zu of %lld layers in %s host memory (%s), %lld device slots of %s, prefetch depth %lld%s\n",
                 plan.host_layers().size(),
                 static_cast<long long>(plan.num_layers()),
                 gpu ? "pinned" : "simulated",
                 offload::format_bytes(s.held_bytes).c_str(),
                 static_cast<long long>(s.num_slots),
                 offload::format_bytes(s.slot_bytes).c_str(),
                 static_cast<long long>(plan.prefetch_depth()),
                 gpu ? "" : " (CPU run: no memory saved)");
  }
  std::fflush(log);
  return residency;
}

std::string pinned_memory_problem(const offload::MemoryPlan& plan, int64_t available_bytes) {
  const int64_t pinned = plan.host_bytes + plan.activation_host_bytes;
  if (pinned == 0 || available_bytes < 0 || pinned <= available_bytes / 4 * 3) return "";
  return "the plan pins " + offload::format_bytes(pinned) + " of host RAM (" + offload::format_bytes(plan.host_bytes) +
         " for offloaded layers, " + offload::format_bytes(plan.activation_host_bytes) +
         " for offloaded activations), more than three quarters of the " + offload::format_bytes(available_bytes) +
         " this machine has available (MemAvailable in /proc/meminfo); pinned memory cannot be swapped out. Offload "
         "fewer layers (offload_layers), set activation_offloading: false, or lower sequence_len or "
         "micro_batch_size";
}

int64_t host_memory_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

std::string out_of_memory_report(const DevicePlan& p,
                                 const config::RunConfig& c,
                                 int64_t step,
                                 const std::string& allocator_message) {
  std::string msg = "out of memory on " + p.device.str() + " in step " + std::to_string(step) + ": " +
                    allocator_message.substr(0, allocator_message.find('\n')) + "\n";
  if (p.memory) msg += "The plan for this run was:\n" + offload::format_plan(*p.memory);
  msg +=
      "The plan's estimate was too low for this step. What to change, most effective first: "
      "offload_layers: auto (or more layers than " +
      std::to_string(p.residency.host_layers().size()) +
      "), gradient_checkpointing: true, a lower micro_batch_size (now " + std::to_string(c.micro_batch_size) +
      ") with a higher gradient_accumulation_steps, a lower sequence_len (now " + std::to_string(c.sequence_len) +
      "), or a lower gpu_memory_limit so that the plan keeps more room. Checkpoints already in " +
      c.output_dir.string() + " are intact.";
  return msg;
}

}  // namespace qtrain::engine::train
