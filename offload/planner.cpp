// See planner.h. A plan for a given set of offloaded layers is a sum: what stays resident, the
// slots, the activations the step keeps for backward (an offloaded layer is always checkpointed,
// since its weights leave the slot), and the largest transient on top of them, which is either
// the loss's chunk of logits or one layer's recompute and backward. `auto` tries k = 0, 1, ...
// until the sum fits.
#include "offload/planner.h"

#include "offload/blob_layout.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "offload/blob_layout.h"
#include "offload/prefetch_depth.h"

namespace qtrain::offload {
namespace {

std::string printf_string(const char* format, auto... args) {
  std::string out(static_cast<size_t>(std::snprintf(nullptr, 0, format, args...)), '\0');
  std::snprintf(out.data(), out.size() + 1, format, args...);
  return out;
}

MemoryPlan plan_with(const PlanInputs& in, const PlanRequest& request, int64_t k) {
  const auto n = static_cast<int64_t>(in.layers.size());
  MemoryPlan p;
  p.num_layers = n;
  p.auto_offload = !request.offload_layers.has_value();
  p.offloaded_layers = spread_layers(k, n);
  p.prefetch_depth = request.prefetch_depth;
  p.budget_bytes = request.budget_bytes;
  p.micro_batches_per_step = in.micro_batches_per_step;
  p.h2d_bytes_per_s = request.h2d_bytes_per_s;
  p.world_size = request.world_size;
  p.shard_base = request.shard_base;
  const int64_t world = request.world_size, unit = world * kBlobAlignment;

  std::vector<bool> offloaded(n, false);
  for (const int64_t i : p.offloaded_layers) offloaded[i] = true;
  int64_t resident = 0, saved = in.saved_outside_layers, checkpointed_saved = 0, full_saved = 0, gathered = 0;
  std::vector<int64_t> checkpointed_inputs;  // each checkpointed layer's saved input
  int64_t num_full = 0, transient = in.loss_workspace;
  std::string transient_what = "the loss's chunk of logits";
  for (int64_t i = 0; i < n; ++i) {
    const LayerCost& l = in.layers[i];
    // A sharded layer's blob is padded to N * 256 bytes and cut in N; its rank keeps one part.
    const int64_t padded = request.shard_base ? (l.blob_bytes + unit - 1) / unit * unit : l.blob_bytes;
    const int64_t kept = padded / (request.shard_base ? world : 1);
    const bool checkpointed = l.checkpointed || offloaded[i] || request.shard_base;
    if (offloaded[i]) {
      p.host_bytes += kept;
    } else {
      resident += kept;
    }
    if (offloaded[i] || request.shard_base) p.slot_bytes = std::max(p.slot_bytes, padded);
    if (request.shard_base) gathered += padded - kept;
    if (checkpointed) {
      ++p.num_checkpointed;
      checkpointed_saved += l.saved_checkpointed;
      checkpointed_inputs.push_back(l.saved_checkpointed);
    } else {
      ++num_full;
      full_saved += l.saved_full;
    }
    // A checkpointed layer's backward first rebuilds what a full layer keeps.
    const int64_t layer_transient = (checkpointed ? l.saved_full : 0) + l.backward_transient;
    if (layer_transient > transient) {
      transient = layer_transient;
      transient_what =
          std::string(checkpointed ? "recompute and backward" : "backward") + " of layer " + std::to_string(i);
    }
  }
  // With offloaded activations the device holds the largest few inputs that can be in flight.
  int64_t checkpointed_on_device = checkpointed_saved;
  p.offload_activations = request.offload_activations;
  if (request.offload_activations) {
    // The last prefetch_depth + 1 inputs never leave the device; the others cross twice.
    const auto staying =
        std::min<int64_t>(static_cast<int64_t>(checkpointed_inputs.size()), request.prefetch_depth + 1);
    p.activation_host_bytes =
        std::accumulate(checkpointed_inputs.begin(), checkpointed_inputs.end() - staying, int64_t{0});
    std::sort(checkpointed_inputs.rbegin(), checkpointed_inputs.rend());
    const auto in_flight =
        std::min<int64_t>(static_cast<int64_t>(checkpointed_inputs.size()), request.prefetch_depth + 2);
    checkpointed_on_device =
        std::accumulate(checkpointed_inputs.begin(), checkpointed_inputs.begin() + in_flight, int64_t{0});
  }
  saved += checkpointed_on_device + full_saved;
  const int64_t streamed = request.shard_base ? n : k;  // layers that pass through the slots
  p.num_slots = slots_for(streamed, request.prefetch_depth);
  p.h2d_bytes_per_step = 2 * (p.host_bytes + p.activation_host_bytes) * in.micro_batches_per_step;
  p.gather_bytes_per_step = 2 * gathered * in.micro_batches_per_step;
  p.h2d_seconds_per_step = static_cast<double>(p.h2d_bytes_per_step) / request.h2d_bytes_per_s;
  if (k > 0) {
    const auto& o = p.offloaded_layers;
    p.min_resident_gap = std::min(o.front(), n - 1 - o.back());
    for (size_t j = 1; j < o.size(); ++j) p.min_resident_gap = std::min(p.min_resident_gap, o[j] - o[j - 1] - 1);
  }

  auto& rows = p.rows;
  const std::string shards = request.shard_base ? ", 1/" + std::to_string(world) + " of each (shards)" : "";
  rows.push_back({"decoder layer weights, resident",
                  std::to_string(n - k) + " of " + std::to_string(n) + " layers" + shards,
                  resident});
  rows.push_back({"decoder layer weights, offloaded",
                  std::to_string(k) + " layers in pinned host RAM (" + format_bytes(p.host_bytes) + ")" + shards,
                  0});
  rows.push_back({request.shard_base ? "device slots for gathered layers" : "device slots for offloaded layers",
                  p.num_slots == 0 ? "none" : std::to_string(p.num_slots) + " x " + format_bytes(p.slot_bytes),
                  p.num_slots * p.slot_bytes});
  rows.push_back({"embeddings, output head, norms, biases", "always resident", in.fixed_bytes});
  rows.push_back({"LoRA weights, gradients, AdamW moments", in.lora_what, in.lora_bytes});
  const std::string checkpointed_where = request.offload_activations
                                             ? format_bytes(checkpointed_on_device) + " on the device, " +
                                                   format_bytes(p.activation_host_bytes) + " in pinned host RAM"
                                             : format_bytes(checkpointed_saved);
  rows.push_back({"activations kept for backward",
                  std::to_string(p.num_checkpointed) + " checkpointed layers (" + checkpointed_where + "), " +
                      std::to_string(num_full) + " full (" + format_bytes(full_saved) + "), loss and final norm (" +
                      format_bytes(in.saved_outside_layers) + ")",
                  saved});
  rows.push_back({"largest transient", transient_what, transient});
  rows.push_back({"cuBLAS workspaces", "", in.library_workspace});
  int64_t allocated = 0;
  for (const PlanRow& r : rows) allocated += r.bytes;
  p.allocated_bytes = allocated;
  p.activation_bytes = saved;
  p.transient_bytes = transient;
  const auto fragmentation = static_cast<int64_t>(std::ceil(static_cast<double>(allocated) * kFragmentationReserve));
  rows.push_back({"allocator fragmentation reserve",
                  printf_string("%.0f%% of the above", kFragmentationReserve * 100),
                  fragmentation});
  rows.push_back({"CUDA context", "outside the allocator", kCudaContextBytes});
  for (const PlanRow& r : rows) p.total_bytes += r.bytes;
  p.fits = p.total_bytes <= p.budget_bytes;
  return p;
}

// By how much the plan misses, and its three largest parts.
std::string shortfall(const MemoryPlan& p) {
  std::vector<const PlanRow*> rows;
  for (const PlanRow& r : p.rows) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(), [](const PlanRow* a, const PlanRow* b) { return a->bytes > b->bytes; });
  std::string out = "the step needs " + format_bytes(p.total_bytes) + ", " +
                    format_bytes(p.total_bytes - p.budget_bytes) + " more than the budget of " +
                    format_bytes(p.budget_bytes);
  if (p.auto_offload && static_cast<int64_t>(p.offloaded_layers.size()) == p.num_layers) {
    out += ", even with every layer offloaded";
  }
  out += "; the largest parts are";
  for (size_t i = 0; i < std::min<size_t>(3, rows.size()); ++i) {
    out += std::string(i == 0 ? " " : ", ") + rows[i]->what + " (" + format_bytes(rows[i]->bytes) + ")";
  }
  return out;
}

}  // namespace

std::vector<int64_t> spread_layers(int64_t k, int64_t n) {
  TORCH_CHECK(k >= 0 && k <= n, "spread_layers: cannot choose ", k, " of ", n, " layers");
  std::vector<int64_t> out;
  out.reserve(k);
  // The centre of span j of k equal spans: (2j + 1) n / 2k, rounded down. Spans are at least one
  // layer wide (k <= n), so the picks are distinct.
  for (int64_t j = 0; j < k; ++j) out.push_back((2 * j + 1) * n / (2 * k));
  return out;
}

MemoryPlan plan_memory(const PlanInputs& in, const PlanRequest& request) {
  const auto n = static_cast<int64_t>(in.layers.size());
  TORCH_CHECK(request.budget_bytes > 0,
              "the GPU memory budget is ",
              request.budget_bytes,
              " bytes; give a positive budget such as gpu_memory_limit: 24GiB");
  check_prefetch_depth(request.prefetch_depth);
  TORCH_CHECK(request.h2d_bytes_per_s > 0,
              "the host-to-device bandwidth is ",
              request.h2d_bytes_per_s,
              " bytes/s; give a positive bandwidth such as 25GB/s");
  TORCH_CHECK(
      in.micro_batches_per_step >= 1, "gradient_accumulation_steps is ", in.micro_batches_per_step, "; use 1 or more");
  TORCH_CHECK(request.world_size >= 1, "the world size is ", request.world_size, "; use 1 or more ranks");
  if (request.offload_layers) {
    const int64_t k = *request.offload_layers;
    TORCH_CHECK(k >= 0 && k <= n,
                "offload_layers is ",
                k,
                " but the model has ",
                n,
                " decoder layers; use 0 to ",
                n,
                ", or auto to offload as few as fit");
    MemoryPlan p = plan_with(in, request, k);
    if (!p.fits) p.advice = shortfall(p);
    return p;
  }
  for (int64_t k = 0; k < n; ++k) {
    MemoryPlan p = plan_with(in, request, k);
    if (p.fits) return p;
  }
  MemoryPlan p = plan_with(in, request, n);
  if (!p.fits) p.advice = shortfall(p);
  return p;
}

std::string format_bytes(int64_t bytes) {
  const double v = std::abs(static_cast<double>(bytes));
  const char* sign = bytes < 0 ? "-" : "";
  if (v < 1024) return printf_string("%s%" PRId64 " B", sign, std::abs(bytes));
  if (v < 1024.0 * 1024) return printf_string("%s%.1f KiB", sign, v / 1024);
  if (v < 1024.0 * 1024 * 1024) return printf_string("%s%.1f MiB", sign, v / (1024.0 * 1024));
  return printf_string("%s%.2f GiB", sign, v / (1024.0 * 1024 * 1024));
}

std::string format_plan(const MemoryPlan& p) {
  std::string out = p.world_size > 1
                        ? printf_string("GPU memory per step, per rank (%" PRId64 " ranks)\n", p.world_size)
                        : std::string("GPU memory per step\n");
  const auto line = [&](const std::string& what, const std::string& detail, const std::string& bytes) {
    out += printf_string("  %-40s %12s  %s\n", what.c_str(), bytes.c_str(), detail.c_str());
  };
  for (const PlanRow& r : p.rows) line(r.what, r.detail, format_bytes(r.bytes));
  out += "  " + std::string(54, '-') + "\n";
  line("total", "", format_bytes(p.total_bytes));
  line("budget",
       p.fits ? "fits, " + format_bytes(p.budget_bytes - p.total_bytes) + " to spare"
              : "does not fit: " + format_bytes(p.total_bytes - p.budget_bytes) + " over",
       format_bytes(p.budget_bytes));

  const auto k = static_cast<int64_t>(p.offloaded_layers.size());
  out += "plan: ";
  if (k == 0) {
    out += "every layer resident, nothing offloaded";
  } else {
    std::string layers;
    for (const int64_t i : p.offloaded_layers) layers += (layers.empty() ? "" : " ") + std::to_string(i);
    out += printf_string("offload %" PRId64 " of %" PRId64 " layers [%s] to pinned host RAM, %" PRId64
                         " device slots, prefetch depth %" PRId64,
                         k,
                         p.num_layers,
                         layers.c_str(),
                         p.num_slots,
                         p.prefetch_depth);
  }
  out += p.auto_offload ? " (offload_layers: auto)\n" : " (offload_layers: " + std::to_string(k) + ")\n";
  if (p.shard_base) {
    out += printf_string("  base sharded over %" PRId64 " ranks: each keeps 1/%" PRId64
                         " of every layer and gathers whole layers into %" PRId64 " device slots\n",
                         p.world_size,
                         p.world_size,
                         p.num_slots);
  }
  out += printf_string(
      "  %" PRId64 " of %" PRId64 " layers checkpointed (recomputed in backward)\n", p.num_checkpointed, p.num_layers);
  if (p.offload_activations) {
    out += "  activation offloading: their inputs wait in pinned host RAM (" + format_bytes(p.activation_host_bytes) +
           "), copied out in forward and back ahead of each recompute\n";
  }
  out += "PCIe traffic per step: " + format_bytes(p.h2d_bytes_per_step);
  if (k > 0 || p.offload_activations) {
    out += printf_string(" (%" PRId64 " layers x 2 copies%s x %" PRId64 " micro-batches), %.3f s at %.1f GB/s\n",
                         k,
                         p.offload_activations ? ", checkpointed inputs out and back" : "",
                         p.micro_batches_per_step,
                         p.h2d_seconds_per_step,
                         p.h2d_bytes_per_s / 1e9);
  }
  if (k > 0) {
    out += printf_string(
        "  each copy overlaps the compute of at least %" PRId64 " resident layer(s)%s\n",
        p.min_resident_gap,
        p.min_resident_gap == 0 ? ": copies are hidden only if one layer's compute outlasts one copy" : "");
  } else if (!p.offload_activations) {
    out += "\n";
  }
  if (p.shard_base) {
    out += "all-gather traffic per step and rank: " + format_bytes(p.gather_bytes_per_step) +
           printf_string(" received (%" PRId64 " layers x 2 gathers x %" PRId64 " micro-batches)\n",
                         p.num_layers,
                         p.micro_batches_per_step);
  }
  if (!p.fits) out += "does not fit: " + p.advice + "\n";
  return out;
}

}  // namespace qtrain::offload
