// The run config table's Memory, precision and device keys (Note [Run config table] in run_config_table.h).
#include <string>
#include <vector>

#include "engine/config/byte_size.h"
#include "engine/config/run_config_table.h"
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
       [](const RunConfig& c) -> std::string { return std::to_string(c.gradient_checkpointing_every_k); }},
      {"activation_offloading",
       section,
       R"md(`true` \| `false` \| `legacy` \| `hidden_states` \| `disk`)md",
       R"md(`false`)md",
       "axolotl",
       R"md(The input each checkpointed layer keeps for its recompute leaves the device for pinned host memory on the copy stream as soon as the next layer has it, and comes back `offload_prefetch_depth` + 1 layers ahead of the recompute (the last `offload_prefetch_depth` + 1 inputs stay on the device, and the device holds at most `offload_prefetch_depth` + 2 of them, those still on their way out included), through the copy engine that streams offloaded layers ([docs/OFFLOAD.md](OFFLOAD.md#activation-offloading)); the step trains bitwise as without it. `legacy` (axolotl's synchronous copies) and `hidden_states` (axolotl's offloading of only the checkpointed hidden states) are read as `true` and named; `disk` is refused. Needs `gradient_checkpointing`; on the CPU the copies pass through the simulated copy engine and save nothing.)md",
       [](const RunConfig& c) -> std::string { return c.activation_offloading ? "true" : "false"; }},
      {"tiled_mlp",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Each layer's dense MLP runs forward and backward in chunks of tokens, so that its gate, up and activation outputs and their gradients are held one chunk at a time; forward keeps only the MLP's input, backward recomputes each chunk (the RNG replayed, so LoRA dropout draws the forward's masks) ([docs/OFFLOAD.md](OFFLOAD.md#tiled-mlp)). Losses are the untiled ones; LoRA gradients differ by float32 rounding (sums over chunks); with `lora_dropout` the masks are drawn per chunk. MoE experts are not tiled.)md",
       [](const RunConfig& c) -> std::string { return c.tiled_mlp ? "true" : "false"; }},
      {"tiled_mlp_num_shards",
       section,
       R"md(int >= 0)md",
       R"md(`0`)md",
       "axolotl",
       R"md(The chunks per MLP call; `0`: chunks of at most 4,096 tokens of the micro-batch (axolotl's default aims at 32,768 tokens per chunk, for its MoE kernel's speed). A value without `tiled_mlp: true` is an error.)md",
       [](const RunConfig& c) -> std::string { return std::to_string(c.tiled_mlp_num_shards); }},
      {"bf16",
       section,
       R"md(`true` \| `false` \| `auto`)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Compute in bfloat16; `auto`: bfloat16 where the device supports it.)md",
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
      {"fp16",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Compute in float16; requires `bf16: false`. With neither, float32.)md",
       [](const RunConfig& c) -> std::string { return yaml_bool(c.fp16); }},
      {"device",
       section,
       R"md(`auto` \| `cpu` \| `cuda` \| `cuda:N`)md",
       R"md(`auto`)md",
       "qtrain",
       R"md(`auto`: CUDA when available, else CPU.)md",
       [](const RunConfig& c) -> std::string { return c.device; }},
      {"offload_layers",
       section,
       R"md(`auto` \| int >= 0)md",
       R"md(`0`)md",
       "qtrain",
       R"md(Decoder layers whose quantized weights stay in pinned host RAM and are copied to the GPU for each use (in forward, and again for the backward recompute; an offloaded layer is always checkpointed). `auto`: as few as make the step fit `gpu_memory_limit`, by the [memory plan](#the-memory-plan-qtrain-plan). A number larger than the model's layer count is an error when the model is read. On a CPU run a number streams the layers through the simulated copy engine (same code path, no memory saved; see docs/OFFLOAD.md) and `auto` is an error.)md",
       [](const RunConfig& c) -> std::string {
         return c.offload_layers_auto ? "auto" : std::to_string(c.offload_layers);
       }},
      {"offload_prefetch_depth",
       section,
       R"md(int >= 1)md",
       R"md(`1`)md",
       "qtrain",
       R"md(Offloaded layers copied ahead of the compute; the GPU holds one more device slot than this (at most one per offloaded layer). The same depth sets how far ahead a sharded base gathers its layers (`shard_base`) and how many offloaded activations may be on the device (`activation_offloading`: depth + 2). A value other than 1 with none of the three is an error.)md",
       [](const RunConfig& c) -> std::string { return std::to_string(c.offload_prefetch_depth); }},
      {"gpu_memory_limit",
       section,
       R"md(size)md",
       R"md(none (the whole device))md",
       "axolotl",
       R"md(The device memory the run may use: `20GiB`, `24GB`, `512MiB`, or a bare number of GiB (`20`, axolotl's convention). `GiB`/`MiB`/`KiB` are powers of 1024, `GB`/`MB`/`KB` powers of 1000, the case of the unit does not matter. The run plans for it and the CUDA allocator is held to it, so a plan that does not fit stops before training. `0` or blank: the whole device.)md",
       [](const RunConfig& c) -> std::string { return format_byte_size(c.gpu_memory_limit); }},
  };
}

}  // namespace qtrain::engine::config
