// See run_model.h.
#include "engine/train/run_model.h"

#include "engine/data/model_tokenizer.h"
#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/lora_attach.h"
#include "engine/train/model_setup.h"
#include "engine/train/run_vocabulary.h"

namespace qtrain::engine::train {

RunModel load_run_model(const config::RunConfig& c,
                        const std::filesystem::path& adapter,
                        const std::string& command,
                        std::FILE* log) {
  const auto options = load_options(c);
  const auto folder = io::HfFolder::open(c.base_model);
  std::fprintf(log,
               "%s: loading %s on %s (%s)\n",
               command.c_str(),
               c.base_model.c_str(),
               options.device.str().c_str(),
               base_quantization_note(folder.config(), (c.base_model / "config.json").string(), c).c_str());
  RunModel out{model::CausalLM::load(folder, options), nullptr, {}};
  // The config's new tokens size the model as training did.
  auto vocabulary = fit_run_vocabulary(out.lm, c);
  if (!vocabulary.log_line.empty()) std::fprintf(log, "%s: %s\n", command.c_str(), vocabulary.log_line.c_str());
  out.tokenizer = std::move(vocabulary.tokenizer);
  out.adapter = adapter.empty() ? c.lora_model_dir : adapter;
  if (!out.adapter.empty()) {
    model::attach_lora(out.lm, io::load_peft_adapter(out.adapter), out.adapter.string());
    std::fprintf(log, "%s: adapter %s\n", command.c_str(), out.adapter.c_str());
  }
  return out;
}

}  // namespace qtrain::engine::train
