// See plan_command.h.
#include "apps/plan_command.h"

#include <cstdio>

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include "apps/command_config.h"
#include "engine/config/byte_size.h"
#include "engine/dist/dist_env.h"
#include "engine/model/kv_cache.h"
#include "engine/train/memory_stats.h"
#include "engine/train/model_setup.h"
#include "engine/train/run_plan.h"
#include "engine/train/run_vocabulary.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string config;
  std::string gpu_memory;
  std::string h2d_bandwidth;
  int64_t world_size = 0;  // 0: WORLD_SIZE from the environment, else 1
  int64_t generate_batch = 0;
  int64_t generate_tokens = 0;
  std::vector<std::string> sets;
};

struct Budget {
  int64_t bytes = 0;
  std::string source;
};

// --gpu-memory, else gpu_memory_limit, else the memory of the config's CUDA device.
Budget budget_of(const Options& o, const engine::config::RunConfig& c) {
  if (!o.gpu_memory.empty()) {
    const auto bytes = engine::config::parse_byte_size(o.gpu_memory);
    TORCH_CHECK(
        bytes && *bytes > 0, "--gpu-memory '", o.gpu_memory, "': expected a size such as 24GiB, 24GB or 24 (GiB)");
    return {*bytes, "--gpu-memory " + o.gpu_memory};
  }
  if (c.gpu_memory_limit > 0) {
    return {c.gpu_memory_limit, "gpu_memory_limit: " + engine::config::format_byte_size(c.gpu_memory_limit)};
  }
  TORCH_CHECK(at::hasCUDA(),
              "no GPU here to plan for: give the budget with --gpu-memory 24GiB, or set gpu_memory_limit: 24GiB "
              "in the config");
  const at::Device device = c.device == "cpu" ? at::Device(at::kCUDA, 0) : engine::train::resolve_device(c.device);
  return {engine::train::device_memory_bytes(device), "the memory of " + device.str()};
}

std::string quantization(const engine::config::RunConfig& c) {
  if (c.load_in_4bit) {
    return c.bnb_4bit_quant_type + (c.bnb_4bit_use_double_quant ? " (double quant)" : "") + ", blocksize " +
           std::to_string(c.bnb_4bit_blocksize);
  }
  return c.load_in_8bit ? "int8" : "not quantized";
}

// The longest sequence_len that fits the budget for each combination of activation offloading
// and tiled MLP (checkpointing on where they need it), each a multiple of 256.
void print_longest_sequences(const engine::config::RunConfig& c,
                             const engine::model::ModelConfig& model,
                             int64_t budget,
                             double h2d,
                             int64_t world) {
  using engine::config::GradientCheckpointing;
  // A preference run's micro-batch of pairs is twice as many rows, each a prompt with one completion.
  const std::string pairs = c.rl.empty() ? ""
                                         : " (rl: " + c.rl + ": " + std::to_string(2 * c.micro_batch_size) +
                                               " rows, each prompt + completion)";
  std::printf("longest sequence_len that fits %s (micro_batch_size %lld%s, offload_layers %s):\n",
              offload::format_bytes(budget).c_str(),
              static_cast<long long>(c.micro_batch_size),
              pairs.c_str(),
              c.offload_layers_auto ? "auto" : std::to_string(c.offload_layers).c_str());
  for (const bool activations : {false, true}) {
    for (const bool tiled : {false, true}) {
      engine::config::RunConfig d = c;
      d.activation_offloading = activations;
      d.tiled_mlp = tiled;
      if (activations && d.gradient_checkpointing == GradientCheckpointing::off) {
        d.gradient_checkpointing = GradientCheckpointing::every_layer;
      }
      const int64_t n = engine::train::longest_sequence_len(d, model, budget, h2d, world);
      std::printf("  activation offloading %-4s tiled MLP %-4s %s%s\n",
                  activations ? "on," : "off,",
                  tiled ? "on:" : "off:",
                  n > 0 ? std::to_string(n).c_str() : "none (not even 256 tokens)",
                  activations == c.activation_offloading && tiled == c.tiled_mlp ? "  (as configured)" : "");
    }
  }
}

void run(const Options& o, int& exit_code) {
  using namespace engine;
  const auto c = load_command_config(o.config, o.sets);
  double h2d = offload::kDefaultH2dBytesPerSecond;
  if (!o.h2d_bandwidth.empty()) {
    const auto v = config::parse_bandwidth(o.h2d_bandwidth);
    TORCH_CHECK(v, "--h2d-bandwidth '", o.h2d_bandwidth, "': expected a bandwidth such as 25GB/s or 25 (GB/s)");
    h2d = *v;
  }
  const auto model = train::run_model_config(c);
  const Budget budget = budget_of(o, c);
  const int64_t world = o.world_size > 0 ? o.world_size : dist::dist_env().world_size;
  const auto shape = train::memory_shape(c, model);
  std::printf("model: %s: %s, %lld layers, hidden %lld, intermediate %lld, vocab %lld\n",
              c.base_model.c_str(),
              model::architecture_name(model.arch).c_str(),
              static_cast<long long>(model.num_layers),
              static_cast<long long>(model.hidden_size),
              static_cast<long long>(model.intermediate_size),
              static_cast<long long>(model.vocab_size));
  std::printf(
      "run: base %s, LoRA r %lld, %s on CUDA, micro_batch_size %lld x sequence_len %lld, "
      "gradient_accumulation_steps %lld\n",
      quantization(c).c_str(),
      static_cast<long long>(c.lora_r),
      c10::toString(shape.dtype),
      static_cast<long long>(c.micro_batch_size),
      static_cast<long long>(c.sequence_len),
      static_cast<long long>(c.gradient_accumulation_steps));
  std::printf("budget: %s (%s)%s\n\n",
              offload::format_bytes(budget.bytes).c_str(),
              budget.source.c_str(),
              world > 1 ? (" on each of " + std::to_string(world) + " ranks" +
                           (c.shard_base ? ", base sharded over them" : ", each with the whole base"))
                              .c_str()
                        : "");
  const auto plan = train::plan_run(c, model, budget.bytes, h2d, world);
  std::printf("%s", offload::format_plan(plan).c_str());
  print_longest_sequences(c, model, budget.bytes, h2d, world);
  if (o.generate_batch > 0) {
    // qtrain generate / chat: the training plan's weights, and the KV cache instead of
    // activations (engine/model/kv_cache.h); its logits are one row per prompt.
    const int64_t tokens = o.generate_tokens > 0 ? o.generate_tokens : c.sequence_len;
    const auto cache = model::kv_cache_bytes(model, o.generate_batch, tokens, shape.dtype);
    std::printf(
        "\ngeneration, %lld prompts x %lld tokens (prompt and completion): KV cache %s (%s, every layer "
        "resident: weights are not streamed while generating)\n",
        static_cast<long long>(o.generate_batch),
        static_cast<long long>(tokens),
        offload::format_bytes(cache).c_str(),
        c10::toString(shape.dtype));
  }
  if (!plan.fits) exit_code = 1;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "plan", "Show where a run's GPU memory goes and which layers it offloads (reads config.json only, no weights)");
  cmd->add_option("config", o->config, "run config (YAML, axolotl keys; see docs/CONFIG.md)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--gpu-memory",
                  o->gpu_memory,
                  "memory budget, e.g. 24GiB or 24GB (default: gpu_memory_limit, else the GPU's memory)");
  cmd->add_option("--h2d-bandwidth", o->h2d_bandwidth, "host-to-device copy speed, e.g. 25GB/s (default: 25GB/s)");
  cmd->add_option("--world-size",
                  o->world_size,
                  "ranks of the run: the plan is per rank (default: WORLD_SIZE from the environment, else 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--generate-batch", o->generate_batch, "also size qtrain generate's KV cache for this many prompts")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--generate-tokens",
                  o->generate_tokens,
                  "the longest prompt plus --max-new-tokens, for --generate-batch (default: sequence_len)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--set", o->sets, "override a config key: --set key=value (repeatable)");
  cmd->callback([o, &exit_code] { run(*o, exit_code); });
}

}  // namespace qtrain::apps
