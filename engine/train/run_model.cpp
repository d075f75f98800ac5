// See run_model.h.
#include "engine/train/run_model.h"

#include "engine/data/model_tokenizer.h"
#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/lora_attach.h"
#include "engine/train/device_plan.h"
#include "engine/train/model_setup.h"
#include "engine/train/run_vocabulary.h"

namespace qtrain::engine::train {

namespace {

// The model by `options`, with its vocabulary and adapter; `plan` streams its host layers.
RunModel load_with(const config::RunConfig& c,
                   const std::filesystem::path& adapter,
                   const std::string& command,
                   std::FILE* log,
                   const model::LoadOptions& options,
                   const DevicePlan* plan) {
  const auto folder = io::HfFolder::open(c.base_model);
  std::fprintf(log,
               "%s: loading %s on %s (%s)\n",
               command.c_str(),
               c.base_model.c_str(),
               options.device.str().c_str(),
               options.quant.kind == model::QuantSpec::Kind::none && options.dtype == at::kFloat
                   ? "float32"
                   : base_quantization_note(folder.config(), (c.base_model / "config.json").string(), c).c_str());
  RunModel out{std::make_unique<model::CausalLM>(model::CausalLM::load(folder, options)), nullptr, {}, nullptr};
  out.base_vocab_size = out.lm->config().vocab_size;
  // The config's new tokens size the model as training did.
  auto vocabulary = fit_run_vocabulary(*out.lm, c);
  if (!vocabulary.log_line.empty()) std::fprintf(log, "%s: %s\n", command.c_str(), vocabulary.log_line.c_str());
  out.tokenizer = std::move(vocabulary.tokenizer);
  out.adapter = adapter.empty() ? c.lora_model_dir : adapter;
  if (!out.adapter.empty()) {
    model::attach_lora(*out.lm, io::load_peft_adapter(out.adapter), out.adapter.string());
    std::fprintf(log, "%s: adapter %s\n", command.c_str(), out.adapter.c_str());
  }
  if (plan != nullptr) out.residency = make_residency(*plan, *out.lm, nullptr, log);
  return out;
}

}  // namespace

RunModel load_run_model(const config::RunConfig& c,
                        const std::filesystem::path& adapter,
                        const std::string& command,
                        std::FILE* log) {
  auto options = load_options(c);
  // One process holds the whole base: shard_base, which splits it over ranks, does not apply.
  config::RunConfig one_process = c;
  one_process.shard_base = false;
  const auto plan = plan_device(one_process, options.device, /*world_size=*/1, log);
  options.host_layers = plan.residency.host_layers();
  return load_with(c, adapter, command, log, options, &plan);
}

RunModel load_run_model(const config::RunConfig& c,
                        const std::filesystem::path& adapter,
                        const std::string& command,
                        std::FILE* log,
                        const model::LoadOptions& options) {
  return load_with(c, adapter, command, log, options, nullptr);
}

}  // namespace qtrain::engine::train
