// See gguf_export.h and Note [GGUF export] there.
#include "engine/train/gguf_export.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "engine/data/model_tokenizer.h"
#include "engine/data/run_tokenizer_files.h"
#include "engine/io/companion_files.h"
#include "engine/io/gguf_writer.h"
#include "engine/io/hf_folder.h"
#include "engine/io/remove_tree.h"
#include "engine/model/lora_attach.h"
#include "engine/model/merged_weights.h"
#include "engine/model/saved_modules.h"
#include "engine/train/gguf_architecture.h"
#include "engine/train/gguf_tokenizer.h"
#include "engine/train/run_model.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;
using ops::GgmlType;

// The converter's rope_freqs for "llama3" rope (LlamaModel.generate_extra_tensors): the factor
// by which ggml divides each frequency, 1 / (transformers' scaling of it), computed with the
// converter's float32 operations (Python's `a / tensor` is a reciprocal times a).
at::Tensor llama3_rope_factors(const model::ModelConfig& mc) {
  const auto& s = mc.rope_scaling;
  const auto freqs = at::reciprocal(at::pow(mc.rope_theta, at::arange(0, mc.head_dim, 2, at::kFloat) / mc.head_dim));
  const auto wavelen = at::reciprocal(freqs) * (2 * M_PI);
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const auto smooth =
      (at::reciprocal(wavelen) * old_ctx - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const auto medium = at::reciprocal((1 - smooth) / s.factor + smooth);
  return at::where(wavelen < old_ctx / s.high_freq_factor,
                   at::ones_like(freqs),
                   at::where(wavelen > old_ctx / s.low_freq_factor, at::full_like(freqs, s.factor), medium));
}

uint32_t file_type(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return 0;
    case GgmlType::f16:
      return 1;
    case GgmlType::q8_0:
      return 7;
    case GgmlType::bf16:
      return 32;
  }
  return 0;
}

// The type GGUF tensor `name` of `shape` (numpy order) is written in: vectors and routers in F32,
// the others in `type` (Q8_0's blocks of 32 need rows of a multiple of 32; F16 otherwise).
GgmlType matrix_type(const std::string& name, const std::vector<int64_t>& shape, GgmlType type) {
  if (shape.size() <= 1 || name.ends_with("ffn_gate_inp.weight")) return GgmlType::f32;
  return type == GgmlType::q8_0 && shape.back() % 32 != 0 ? GgmlType::f16 : type;
}

// Note [Streaming export]
// write_gguf loads the model with every decoder layer's base linears as placeholders
// (LoadOptions::reads_layer_weights: shapes, no values) and reads a layer's weights when the
// first of its tensors is written, dropping the previous layer's: the folder lists a layer's
// tensors together, so each layer is read once, and the export holds the embeddings, the norms,
// the adapter, one layer and one merged weight.
class StreamedLayers {
 public:
  StreamedLayers(model::CausalLM& lm, const io::HfFolder& folder, const model::LoadOptions& options)
      : lm_(lm), folder_(folder), options_(options) {}
  StreamedLayers(const StreamedLayers&) = delete;
  StreamedLayers& operator=(const StreamedLayers&) = delete;

  // Layer i's base linears hold their values (the previous layer's theirs no more).
  void hold(int64_t i) {
    if (i == held_) return;
    release();
    const auto read = lm_.load_layer(folder_, options_, i);
    auto targets = lm_.layers().at(i).weight_linears();
    const auto sources = read.weight_linears();
    TORCH_CHECK(targets.size() == sources.size(), "export-gguf: layer ", i, " read with other linears than loaded");
    for (size_t k = 0; k < targets.size(); ++k) {
      placeholders_.push_back(targets[k]->base_tensors());
      targets[k]->rebind_base_tensors(sources[k]->base_tensors());
    }
    held_ = i;
  }

  void release() {
    if (held_ < 0) return;
    auto targets = lm_.layers().at(held_).weight_linears();
    for (size_t k = 0; k < targets.size(); ++k) targets[k]->rebind_base_tensors(placeholders_[k]);
    placeholders_.clear();
    held_ = -1;
  }

 private:
  model::CausalLM& lm_;
  const io::HfFolder& folder_;
  const model::LoadOptions& options_;
  int64_t held_ = -1;
  std::vector<std::vector<at::Tensor>> placeholders_;
};

// base_model's config.json, read before the model: what cannot be exported fails at once.
model::ModelConfig base_config(const config::RunConfig& c) {
  return model::ModelConfig::from_json(io::read_config_json(c.base_model), (c.base_model / "config.json").string());
}

// Note [Exported new tokens]
// A run whose tokenizer gains tokens or roles (tokens, special_tokens; Note [New tokens] in
// engine/data/special_tokens.h) is exported as its merged folder would be: the tokenizer files are
// those `qtrain merge` writes (the base's, rewritten by data::write_run_tokens), in a temporary
// folder beside a copy of the config.json the tokenizer keys read, and the embeddings and head have
// the rows the run gave them. So `export-gguf --adapter A` writes the keys and tensors of `merge --adapter A`
// followed by `export-gguf` of the merged folder (in the model's tensor order, where the folder's
// is by name) (RunVocabulary.ExportOfANewTokensRunIsTheExportOfItsMergedFolder).

// A folder made under TMPDIR and deleted with everything in it when this goes, an error or not.
class TemporaryFolder {
 public:
  TemporaryFolder() {
    auto pattern = (fs::temp_directory_path() / "qtrain-export-gguf-XXXXXX").string();
    TORCH_CHECK(::mkdtemp(pattern.data()) != nullptr,
                "export-gguf: cannot make a temporary folder for the run's tokenizer in ",
                fs::temp_directory_path().string(),
                ": ",
                std::strerror(errno),
                "; set TMPDIR to a writable folder");
    path_ = pattern;
  }
  ~TemporaryFolder() {
    std::error_code ec;
    io::remove_tree(path_, ec);  // a leftover in TMPDIR is not worth failing the export for
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;

  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The folder the GGUF tokenizer keys are read from: base_model's, or, where the run's tokenizer
// changes the base's files, a temporary copy of them as merge writes them (Note [Exported new
// tokens]).
class RunTokenizerFolder {
 public:
  RunTokenizerFolder(const config::RunConfig& c, const RunModel& run, std::FILE* log) : path_(c.base_model) {
    if (!run.tokenizer) return;
    temporary_.emplace();
    const auto& folder = temporary_->path();
    io::copy_companion_files(c.base_model, folder, io::Companions::tokenizer);
    fs::copy_file(c.base_model / "config.json", folder / "config.json");
    // Copies of a read-only base are read-only too; write_run_tokens rewrites them.
    for (const auto& entry : fs::directory_iterator(folder)) {
      fs::permissions(entry.path(), fs::perms::owner_write, fs::perm_options::add);
    }
    if (!data::write_run_tokens(folder, c, *run.tokenizer)) {
      temporary_.reset();
      return;
    }
    std::fprintf(log, "export-gguf: the tokenizer with the run's special_tokens and tokens\n");
    path_ = folder;
  }

  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  std::optional<TemporaryFolder> temporary_;
};

// The decoder layer a tensor name of `mc` belongs to, or -1.
int64_t layer_of(const std::string& name, const model::ModelConfig& mc) {
  const std::string layers = mc.weight_prefix + "layers.";
  if (name.rfind(layers, 0) != 0) return -1;
  return std::stoll(name.substr(layers.size(), name.find('.', layers.size()) - layers.size()));
}

}  // namespace

void write_gguf_adapter(
    const config::RunConfig& c, const fs::path& adapter, const fs::path& out, GgmlType type, std::FILE* log) {
  TORCH_CHECK(!adapter.empty() || !c.lora_model_dir.empty(),
              "export-gguf --adapter-only needs an adapter: pass --adapter DIR or set lora_model_dir");
  const auto arch = GgufArchitecture::of(base_config(c));
  model::LoadOptions options;
  options.reads_layer_weights = [](int64_t) { return false; };  // the base's values are not written
  auto run = load_run_model(c, adapter, "export-gguf", log, options);
  const auto& lm = *run.lm;
  TORCH_CHECK(model::saved_modules(lm).empty(),
              "export-gguf --adapter-only: the adapter trains modules in full (modules_to_save: embeddings, head or "
              "norms), "
              "which a GGUF LoRA file cannot hold; export the merged model (without --adapter-only)");
  io::GgufWriter w;
  w.add_string("general.architecture", arch.name());
  w.add_string("general.type", "adapter");
  w.add_string("adapter.type", "lora");
  std::optional<double> alpha;
  for (const auto& [module, a] : model::lora_adapters(lm)) {
    const std::string name = module + ".weight";
    const auto gguf = arch.tensor_name(name);
    TORCH_CHECK(gguf.has_value() && !gguf->ends_with("ffn_gate_inp.weight"),
                "export-gguf --adapter-only: the adapter of '",
                module,
                "' (MoE experts or router) has no place in a GGUF LoRA file; export the merged model");
    TORCH_CHECK(!a.magnitude.defined(),
                "export-gguf --adapter-only: DoRA (peft_use_dora) has no GGUF LoRA form; export the merged model");
    // llama.cpp scales each tensor pair by alpha / rank: one alpha for the file.
    const double module_alpha = a.scaling * static_cast<double>(a.rank());
    TORCH_CHECK(!alpha || std::abs(*alpha - module_alpha) <= 1e-9 * std::abs(module_alpha),
                "export-gguf --adapter-only: the adapters' alpha / rank differ between modules (rank_pattern or "
                "alpha_pattern), and a GGUF LoRA file has one alpha; export the merged model");
    alpha = module_alpha;
    const at::Tensor lora_a = a.a.detach().to(at::kFloat).contiguous();
    const at::Tensor lora_b = arch.converted(name, a.b.detach().to(at::kFloat)).contiguous();
    for (const auto& [suffix, t] : {std::pair{".lora_a", lora_a}, std::pair{".lora_b", lora_b}}) {
      w.add_tensor(*gguf + suffix, t.sizes().vec(), matrix_type(*gguf, t.sizes().vec(), type), [t] { return t; });
    }
  }
  TORCH_CHECK(alpha.has_value(), "export-gguf --adapter-only: the adapter adapts no linear layer");
  w.add_float32("adapter.lora.alpha", static_cast<float>(*alpha));
  w.write(out);
  std::fprintf(log, "export-gguf: %s (GGUF LoRA for %s, alpha %g)\n", out.c_str(), arch.name().c_str(), *alpha);
}

void write_gguf(const config::RunConfig& c,
                const fs::path& adapter,
                const fs::path& out,
                GgmlType type,
                const std::string& pre,
                std::FILE* log) {
  // The model is held in the dtype its float weights are stored in (bfloat16 or float16 where
  // all of them are, float32 otherwise): each merged weight is computed in float32 from it, from
  // the same values as a float32 copy would hold, at half the memory. Its layers are read one at
  // a time (Note [Streaming export]).
  const auto folder = io::HfFolder::open(c.base_model);
  model::LoadOptions options;
  options.reads_layer_weights = [](int64_t) { return false; };
  std::optional<at::ScalarType> stored;
  for (const auto& name : folder.tensor_names()) {
    const auto t = folder.dtype(name);
    if (!at::isFloatingType(t)) continue;
    stored = !stored || *stored == t ? t : at::kFloat;
  }
  if (stored == at::kBFloat16 || stored == at::kHalf) options.dtype = *stored;
  auto keys_config = base_config(c);
  GgufArchitecture::of(keys_config);  // refuses what is not exported before the model loads
  auto run = load_run_model(c, adapter, "export-gguf", log, options);
  auto& lm = *run.lm;
  const auto& mc = lm.config();
  StreamedLayers layers(lm, folder, options);
  // The architecture keys of the model as the run sized it (vocab_size counts the rows it added).
  keys_config.vocab_size = mc.vocab_size;
  const auto arch = GgufArchitecture::of(keys_config);
  const RunTokenizerFolder tokenizer_folder(c, run, log);
  // Made one at a time while the file is written: one merged weight in memory at a time.
  const auto tensors = model::merged_tensor_makers(lm, folder, at::kFloat, model::ExpertTensors::stacked);

  io::GgufWriter w;
  w.add_string("general.architecture", arch.name());
  w.add_string("general.name", c.base_model.filename().string());
  w.add_uint32("general.file_type", file_type(type));
  if (type == GgmlType::q8_0) w.add_uint32("general.quantization_version", 2);
  arch.add_keys(w);
  const auto own = run.tokenizer ? nullptr : data::model_tokenizer(c.base_model, mc.vocab_size);
  if (fs::exists(c.base_model / "tokenizer.json")) {
    add_gguf_tokenizer(
        w, tokenizer_folder.path(), mc.vocab_size, arch.name(), run.tokenizer ? *run.tokenizer : *own, pre, log);
  } else {
    std::fprintf(log,
                 "export-gguf: %s has no tokenizer.json: the file holds no tokenizer (transformers can load its "
                 "weights; llama.cpp needs one)\n",
                 c.base_model.c_str());
  }
  if (mc.rope_scaling.type == "llama3") {
    const auto factors = llama3_rope_factors(mc);
    w.add_tensor("rope_freqs.weight", factors.sizes().vec(), GgmlType::f32, [factors] { return factors; });
  }
  // A multimodal model's other towers go to llama.cpp's separate mmproj file, not this one.
  size_t skipped = 0;
  for (const auto& t : tensors) {
    const auto gguf = arch.tensor_name(t.name);
    if (!gguf && t.name.rfind(mc.weight_prefix, 0) != 0 && t.name != "lm_head.weight") {
      ++skipped;
      continue;
    }
    TORCH_CHECK(gguf.has_value(), "export-gguf: no GGUF name for the tensor '", t.name, "'");
    TORCH_CHECK(*gguf != "output.weight" || arch.name() != "gemma2",
                "export-gguf: the run trains the embeddings or the head (modules_to_save), so they are no longer "
                "tied, and llama.cpp's gemma2 ties them; train Gemma 2 without them to export it");
    w.add_tensor(*gguf, t.shape, matrix_type(*gguf, t.shape, type), [&arch, &t, &layers, layer = layer_of(t.name, mc)] {
      if (layer >= 0) layers.hold(layer);
      return arch.converted(t.name, t.make());
    });
  }
  if (skipped) std::fprintf(log, "export-gguf: %zu tensors outside the language model not written\n", skipped);
  // A progress line every tenth of the tensors.
  w.write(out, [&](size_t i, size_t n) {
    if (i == n || i % std::max<size_t>(1, n / 10) == 0) std::fprintf(log, "export-gguf: %zu/%zu tensors\n", i, n);
  });
  std::fprintf(log, "export-gguf: %s (%s, %s)\n", out.c_str(), arch.name().c_str(), ops::ggml_type_name(type).c_str());
  if (type == GgmlType::f16 || type == GgmlType::bf16) {
    // qtrain writes no K-quants: llama.cpp's quantizer makes them from this file.
    auto quantized = out;
    quantized.replace_filename(out.stem().string() + "-q4_k_m.gguf");
    std::fprintf(log, "export-gguf: for Q4_K_M: llama-quantize %s %s Q4_K_M\n", out.c_str(), quantized.c_str());
  }
}

}  // namespace qtrain::engine::train
