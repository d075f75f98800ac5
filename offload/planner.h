// The memory planner: given what each part of a training step costs on the GPU, decides how many
// decoder layers stream from pinned host memory (offload) so that the step fits a memory budget,
// and explains the result as a table. Pure arithmetic on byte counts: it knows layers only as
// numbered blobs with activation costs; engine/schedule/memory_estimate derives those costs from
// a model config, and engine/config/run_plan from a run config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qtrain::offload {

// Note [Memory plan margins]
// The budget is what the process may use on the device, but not all of it can hold tensors:
// - The CUDA context (driver state, the kernels of libtorch and qtrain, cuBLAS handles) takes
//   300-500 MiB outside the caching allocator, more with lazy module loading off; 512 MiB covers
//   the cards qtrain targets.
// - The caching allocator rounds every block up (512 B, and requests above 1 MiB come out of
//   2 MiB or larger segments that a smaller request splits), and a freed block serves a later
//   request only if it is large enough, so the bytes it reserves exceed the bytes in live
//   tensors. 5% of the allocated bytes is the reserve for that (the usual reserved/allocated
//   gap of a steady training loop whose tensor sizes repeat every step).
// Both are heuristics, stated in the table so that a user can see what was assumed; an
// out-of-memory error in a step reports the plan, so a wrong margin shows where it went wrong.
inline constexpr int64_t kCudaContextBytes = int64_t{512} << 20;
inline constexpr double kFragmentationReserve = 0.05;
// Pinned host-to-device copies on PCIe 4.0 x16 reach about 25 GB/s of the link's 32 GB/s.
inline constexpr double kDefaultH2dBytesPerSecond = 25e9;

// What one decoder layer costs, all in bytes.
struct LayerCost {
  int64_t blob_bytes = 0;          // its quantized base weights as one offload blob
  int64_t saved_checkpointed = 0;  // activations kept for backward when it is checkpointed (its input)
  int64_t saved_full = 0;          // activations kept for backward when it is not
  // Working set of its backward beyond what it saved: gradients, the dequantized weight,
  // attention scratch. A checkpointed layer also recomputes saved_full first.
  int64_t backward_transient = 0;
  bool checkpointed = false;  // by the run's checkpoint policy (an offloaded layer always is)
};

struct PlanInputs {
  std::vector<LayerCost> layers;      // in layer order
  int64_t fixed_bytes = 0;            // always resident: embeddings, output head, norms, biases
  int64_t lora_bytes = 0;             // LoRA weights, their gradients and AdamW's two moments
  std::string lora_what = "float32";  // how they are held, for the plan's table
  int64_t saved_outside_layers = 0;   // kept for backward outside the layers: final norm, loss input, rope tables
  int64_t loss_workspace = 0;         // the chunked cross-entropy's transient (one chunk of logits)
  int64_t library_workspace = 0;      // cuBLAS/cuBLASLt workspaces
  int64_t micro_batches_per_step = 1;
};

struct PlanRequest {
  int64_t budget_bytes = 0;               // per rank
  std::optional<int64_t> offload_layers;  // nullopt: the fewest layers that make the step fit
  int64_t prefetch_depth = 1;             // layers copied (or gathered) ahead of the compute
  double h2d_bytes_per_s = kDefaultH2dBytesPerSecond;
  int64_t world_size = 1;  // ranks of the run; each plans the same memory
  // Each rank keeps 1/world_size of every layer's blob (padded to world_size * kBlobAlignment)
  // and gathers whole layers into min(layers, prefetch_depth + 1) slots; every layer is then
  // checkpointed. Offloaded layers keep their shards in pinned host RAM.
  bool shard_base = false;
  // The checkpointed layers' inputs wait in pinned host RAM (activation offloading), but for the
  // last prefetch_depth + 1, which never leave: the device holds at most min(checkpointed layers,
  // prefetch_depth + 2) of them at once (those, or the one recomputing and those prefetched, and
  // one still leaving).
  bool offload_activations = false;
};

// One line of the table: a part of the GPU memory.
struct PlanRow {
  std::string what;
  std::string detail;
  int64_t bytes = 0;
};

struct MemoryPlan {
  int64_t num_layers = 0;
  int64_t world_size = 1;  // the bytes are per rank
  bool shard_base = false;
  bool auto_offload = false;              // the planner chose offloaded_layers
  std::vector<int64_t> offloaded_layers;  // ascending
  int64_t prefetch_depth = 1;
  // Device slots: min(offloaded layers, prefetch_depth + 1), or with shard_base min(layers,
  // prefetch_depth + 1), each the largest blob (padded) of the layers that pass through them.
  int64_t num_slots = 0;
  int64_t slot_bytes = 0;
  int64_t num_checkpointed = 0;  // the policy's layers and the offloaded ones
  std::vector<PlanRow> rows;     // GPU memory; they sum to total_bytes
  int64_t host_bytes = 0;        // pinned host memory holding the offloaded layers (their shards)
  bool offload_activations = false;
  int64_t activation_host_bytes = 0;  // pinned host memory holding the offloaded checkpointed inputs
  // The rows the CUDA allocator hands out, before its fragmentation reserve and the CUDA context:
  // what its peak of allocated bytes (peak_memory_bytes) compares with.
  int64_t allocated_bytes = 0;
  // Of those, the activations kept for backward and the largest transient on top of them; the
  // rest (weights, slots, adapters, optimizer state, workspaces) is allocated before a forward.
  int64_t activation_bytes = 0;
  int64_t transient_bytes = 0;
  int64_t total_bytes = 0;
  int64_t budget_bytes = 0;
  bool fits = false;
  // Each offloaded layer is copied in forward and again for its backward recompute, and each
  // offloaded activation out in forward and back for its recompute, in every micro-batch.
  int64_t micro_batches_per_step = 1;
  int64_t h2d_bytes_per_step = 0;
  // With shard_base: the bytes a rank receives from the others per step, each layer gathered in
  // forward and again for its recompute, in every micro-batch ((N-1)/N of its padded blob each).
  int64_t gather_bytes_per_step = 0;
  double h2d_bytes_per_s = kDefaultH2dBytesPerSecond;
  double h2d_seconds_per_step = 0;
  // Fewest resident layers between two offloaded ones (whose compute hides the next copy);
  // -1 when nothing is offloaded.
  int64_t min_resident_gap = -1;
  std::string advice;  // when it does not fit: by how much, and the largest parts
};

// Offloads `request.offload_layers` layers, or with nullopt the smallest number (0..n) that
// fits; when even all n do not fit, the plan with all n and fits == false. The bytes are those of
// one rank.
MemoryPlan plan_memory(const PlanInputs& inputs, const PlanRequest& request);

// `k` of `n` layers, evenly spaced (the centres of k equal spans), ascending: between two
// offloaded layers lie as many resident ones as possible, whose compute hides the next copy.
std::vector<int64_t> spread_layers(int64_t k, int64_t n);

// The plan as a table for people: one row per part with its size, the total against the budget,
// the chosen offload, the PCIe traffic per step, and the advice when it does not fit.
std::string format_plan(const MemoryPlan& plan);

// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace qtrain::offload
