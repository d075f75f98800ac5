// The run config table's keys of memory, precision and device (Note [Run config table] in run_config_table.h).
#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "engine/config/byte_size.h"
#include "engine/config/config_entries.h"
#include "engine/config/config_reader.h"
#include "engine/config/run_config_table.h"
#include "engine/config/run_limits.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {

std::vector<RunConfigKey> memory_keys() {
  const std::string section = "Memory, precision, device";
  return {
      {"gradient_checkpointing",
       section,
       R"md(`true` \| `false` \| `offload` \| `every_kth`)md",
       R"md(`true`)md",
       "axolotl (`every_kth`: qtrain)",
       R"md(Recompute layers in backward instead of keeping their activations: every layer, none, or every k-th layer. `offload` is axolotl's older spelling of `true` with `activation_offloading: true`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key}, [&] {
           if (const Entry* e = r.find(key)) {
             const std::optional<bool> on = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
             if (on) {
               c.gradient_checkpointing = *on ? GradientCheckpointing::every_layer : GradientCheckpointing::off;
             } else if (e->value.IsScalar() && e->value.Scalar() == "every_kth") {
               c.gradient_checkpointing = GradientCheckpointing::every_kth;
             } else if (e->value.IsScalar() && e->value.Scalar() == "offload") {
               // axolotl's older spelling of activation_offloading: true.
               c.gradient_checkpointing = GradientCheckpointing::every_layer;
               c.activation_offloading = true;
             } else {
               e->fail_value("expected true, false, offload or every_kth, got " + shown(e->value));
             }
           }
         });
       },
       [](const RunConfig& c) -> std::string {
         switch (c.gradient_checkpointing) {
           case GradientCheckpointing::off:
             return "false";
           case GradientCheckpointing::every_layer:
             return "true";
           case GradientCheckpointing::every_kth:
             return "every_kth";
         }
         return "true";
       }},
      {"gradient_checkpointing_every_k",
       section,
       R"md(int >= 1)md",
       R"md(`1`)md",
       "qtrain",
       R"md(The k of `every_kth`. A value other than 1 without `gradient_checkpointing: every_kth` is an error.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.gradient_checkpointing_every_k =
             r.integer(key, c.gradient_checkpointing_every_k, at_least(1), "use 1 (every layer) or more");
         r.guard({key, "gradient_checkpointing"}, [&] {
           if (const Entry* e = r.find_written(key); e && c.gradient_checkpointing_every_k != 1 &&
                                                     c.gradient_checkpointing != GradientCheckpointing::every_kth) {
             fail(e->key_place(),
                  e->key,
                  std::to_string(c.gradient_checkpointing_every_k) +
                      " has no effect unless gradient_checkpointing: every_kth; set that, or remove this key");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.gradient_checkpointing_every_k); }},
      {"activation_offloading",
       section,
       R"md(`true` \| `false` \| `legacy` \| `hidden_states` \| `disk`)md",
       R"md(`false`)md",
       "axolotl",
       R"md(The input each checkpointed layer keeps for its recompute leaves the device for pinned host memory on the copy stream as soon as the next layer has it, and comes back `offload_prefetch_depth` + 1 layers ahead of the recompute (the last `offload_prefetch_depth` + 1 inputs stay on the device, and the device holds at most `offload_prefetch_depth` + 2 of them, those still on their way out included), through the copy engine that streams offloaded layers ([docs/OFFLOAD.md](OFFLOAD.md#activation-offloading)); the step trains bitwise as without it. `legacy` (axolotl's synchronous copies) and `hidden_states` (axolotl's offloading of only the checkpointed hidden states) are read as `true` and named; `disk` is refused. Needs `gradient_checkpointing`; on the CPU the copies pass through the simulated copy engine and save nothing.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key, "gradient_checkpointing"}, [&] {
           const Entry* e = r.find(key);
           if (e == nullptr) return;
           const std::string value = e->value.IsScalar() ? e->value.Scalar() : std::string();
           if (const std::optional<bool> on = parse_bool(value)) {
             c.activation_offloading = c.activation_offloading || *on;
           } else if (value == "legacy" || value == "hidden_states") {
             // Both are what qtrain does for true: axolotl's legacy copies synchronously and its
             // hidden_states offloads only the checkpointed layers' inputs; qtrain's copies always
             // overlap the compute, and the checkpointed inputs are all a step keeps between layers.
             c.activation_offloading = true;
             c.ignored_keys.push_back(
                 "activation_offloading: " + value +
                 " (read as true: the checkpointed layers' inputs wait in pinned host memory, copied "
                 "on the copy stream while the compute runs)");
           } else if (value == "disk") {
             e->fail_value(
                 "disk (activations written to files) is not supported; use true: the inputs wait in pinned host "
                 "memory");
           } else {
             e->fail_value("expected true, false, legacy, hidden_states or disk, got " + shown(e->value));
           }
           if (c.activation_offloading && c.gradient_checkpointing == GradientCheckpointing::off) {
             fail(e->key_place(),
                  e->key,
                  "needs gradient_checkpointing (it offloads the inputs checkpointed layers keep for their recompute), "
                  "and gradient_checkpointing is false; set gradient_checkpointing: true, or remove this key");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return c.activation_offloading ? "true" : "false"; }},
      {"tiled_mlp",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Each layer's dense MLP runs forward and backward in chunks of tokens, so that its gate, up and activation outputs and their gradients are held one chunk at a time; forward keeps only the MLP's input, backward recomputes each chunk (the RNG replayed, so LoRA dropout draws the forward's masks) ([docs/OFFLOAD.md](OFFLOAD.md#tiled-mlp)). Losses are the untiled ones; LoRA gradients differ by float32 rounding (sums over chunks); with `lora_dropout` the masks are drawn per chunk. MoE experts are not tiled.)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.tiled_mlp = r.boolean(key, c.tiled_mlp); },
       [](const RunConfig& c) -> std::string { return c.tiled_mlp ? "true" : "false"; }},
      {"tiled_mlp_num_shards",
       section,
       R"md(int >= 0)md",
       R"md(`0`)md",
       "axolotl",
       R"md(The chunks per MLP call; `0`: chunks of at most 4,096 tokens of the micro-batch (axolotl's default aims at 32,768 tokens per chunk, for its MoE kernel's speed). A value without `tiled_mlp: true` is an error.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.tiled_mlp_num_shards = r.integer(
             key, c.tiled_mlp_num_shards, at_least(0), "use a number of chunks, or 0 (chunks of at most 4096 tokens)");
         r.guard({key, "tiled_mlp"}, [&] {
           if (const Entry* e = r.find_written(key); e && c.tiled_mlp_num_shards > 0 && !c.tiled_mlp) {
             fail(e->key_place(), e->key, "has no effect unless tiled_mlp: true; set that, or remove this key");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.tiled_mlp_num_shards); }},
      {"bf16",
       section,
       R"md(`true` \| `false` \| `auto`)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Compute in bfloat16; `auto`: bfloat16 where the device supports it.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key}, [&] {
           if (const Entry* e = r.find(key)) {
             const std::optional<bool> on = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
             if (on) {
               c.bf16 = *on ? Bf16::on : Bf16::off;
             } else if (e->value.IsScalar() && e->value.Scalar() == "auto") {
               c.bf16 = Bf16::automatic;
             } else {
               e->fail_value("expected true, false or auto, got " + shown(e->value));
             }
           }
         });
       },
       [](const RunConfig& c) -> std::string {
         switch (c.bf16) {
           case Bf16::off:
             return "false";
           case Bf16::on:
             return "true";
           case Bf16::automatic:
             return "auto";
         }
         return "auto";
       }},
      {"bfloat16",
       section,
       R"md(`true` \| `false` \| `auto`)md",
       R"md(none)md",
       "axolotl",
       R"md(axolotl's switch for bfloat16 without mixed precision. qtrain has no mixed precision to leave out (it computes in one dtype, with float32 LoRA weights, either way), so it means `bf16` with the same value; an error where `bf16` is also given and differs. Written back as `bf16`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key}, [&] {
           const Entry* e = r.find(key);
           if (!e || (e->value.IsScalar() && e->value.Scalar().empty())) return;
           const std::optional<bool> on = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
           Bf16 value = Bf16::automatic;
           if (on) {
             value = *on ? Bf16::on : Bf16::off;
           } else if (!e->value.IsScalar() || e->value.Scalar() != "auto") {
             e->fail_value("expected true, false or auto, got " + shown(e->value));
           }
           if (r.find("bf16") && c.bf16 != value) {
             e->fail_value("differs from bf16 (" + r.place_of("bf16") + "); keep one of them");
           }
           c.bf16 = value;
         });
       },
       [](const RunConfig&) -> std::string { return "null"; }},
      {"fp16",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Compute in float16; requires `bf16: false`. With neither, float32.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.fp16 = r.boolean(key, c.fp16);
         r.guard({key, "bf16"}, [&] {
           if (c.fp16 && c.bf16 != Bf16::off) {
             fail(r.place_of(key),
                  key,
                  "fp16 and bf16 (" + r.place_of("bf16") + ") are both on; choose one (bf16: false to train in fp16)");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.fp16); }},
      {"device",
       section,
       R"md(`auto` \| `cpu` \| `cuda` \| `cuda:N`)md",
       R"md(`auto`)md",
       "qtrain",
       R"md(`auto`: CUDA when available, else CPU.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key}, [&] {
           if (const Entry* e = r.find(key)) {
             const std::string v = e->value.IsScalar() ? e->value.Scalar() : "";
             const bool indexed = v.starts_with("cuda:") && v.size() > 5 && parse_int(v.substr(5)).value_or(-1) >= 0 &&
                                  std::isdigit(static_cast<unsigned char>(v[5]));
             if (v != "auto" && v != "cpu" && v != "cuda" && !indexed) {
               e->fail_value("expected auto, cpu, cuda or cuda:N, got " + shown(e->value) + "; e.g. device: cuda:0");
             }
             c.device = v;
           }
         });
       },
       [](const RunConfig& c) -> std::string { return c.device; }},
      {"offload_layers",
       section,
       R"md(`auto` \| int >= 0)md",
       R"md(`0`)md",
       "qtrain",
       R"md(Decoder layers whose quantized weights stay in pinned host RAM and are copied to the GPU for each use (in forward, and again for the backward recompute; an offloaded layer is always checkpointed). `auto`: as few as make the step fit `gpu_memory_limit`, by the [memory plan](#the-memory-plan-qtrain-plan). A number larger than the model's layer count is an error when the model is read. On a CPU run a number streams the layers through the simulated copy engine (same code path, no memory saved; see docs/OFFLOAD.md) and `auto` is an error.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key}, [&] {
           if (const Entry* e = r.find(key)) {
             if (e->value.IsScalar() && e->value.Scalar() == "auto") {
               c.offload_layers_auto = true;
             } else {
               c.offload_layers =
                   r.integer_of(*e,
                                at_least(0),
                                "use auto (as few layers as fit gpu_memory_limit) or a number of layers, 0 for none");
             }
           }
         });
       },
       [](const RunConfig& c) -> std::string {
         return c.offload_layers_auto ? "auto" : std::to_string(c.offload_layers);
       }},
      {"offload_prefetch_depth",
       section,
       R"md(int >= 1)md",
       R"md(`1`)md",
       "qtrain",
       R"md(Offloaded layers copied ahead of the compute; the GPU holds one more device slot than this (at most one per offloaded layer). The same depth sets how far ahead a sharded base gathers its layers (`shard_base`) and how many offloaded activations may be on the device (`activation_offloading`: depth + 2). A value other than 1 with none of the three is an error.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.offload_prefetch_depth = r.integer(key,
                                              c.offload_prefetch_depth,
                                              at_least(1),
                                              "use 1 (copy the next offloaded layer while one computes) or more");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.offload_prefetch_depth); }},
      {"gpu_memory_limit",
       section,
       R"md(size)md",
       R"md(none (the whole device))md",
       "axolotl",
       R"md(The device memory the run may use: `20GiB`, `24GB`, `512MiB`, or a bare number of GiB (`20`, axolotl's convention). `GiB`/`MiB`/`KiB` are powers of 1024, `GB`/`MB`/`KB` powers of 1000, the case of the unit does not matter. The run plans for it and the CUDA allocator is held to it, so a plan that does not fit stops before training. `0` or blank: the whole device.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key}, [&] {
           if (const Entry* e = r.find(key)) {
             const std::optional<int64_t> v = e->value.IsScalar() ? parse_byte_size(e->value.Scalar()) : std::nullopt;
             if (!v) {
               e->fail_value("expected a size such as 20GiB, 24GB or 20 (GiB), got " + shown(e->value) +
                             "; 0 or blank: the whole device");
             }
             c.gpu_memory_limit = *v;
           }
         });
       },
       [](const RunConfig& c) -> std::string { return format_byte_size(c.gpu_memory_limit); }},
  };
}

}  // namespace qtrain::engine::config
