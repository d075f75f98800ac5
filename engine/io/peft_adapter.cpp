// PEFT adapter folders; see peft_adapter.h. Field list and defaults: peft 0.21's LoraConfig
// (peft/tuners/lora/config.py) and PeftModel.save_pretrained.
#include "engine/io/peft_adapter.h"
#include "engine/io/durable_file.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "engine/lora/expert_lora.h"
#include "engine/text/json_depth.h"
#include "engine/text/regular_file.h"

namespace qtrain::engine::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kSuffixA = ".lora_A.weight";
constexpr std::string_view kSuffixB = ".lora_B.weight";
// DoRA's magnitude (Note [DoRA] in engine/lora/lora_linear.h), [out_features].
constexpr std::string_view kSuffixMagnitude = ".lora_magnitude_vector";

// What an existing adapter folder may hold; it is replaced as a whole (see save_peft_adapter).
const std::set<std::string> kAdapterFolderFiles = {kPeftConfigFile, kPeftWeightsFile, "adapter_model.bin", "README.md"};

// --- writing ---------------------------------------------------------------------------------

// "<dir>.tmp" while the new adapter is written; removed on every way out. After an exchange it
// holds the old adapter, so removing it is also how the old one goes.
struct TempDir {
  fs::path path;
  explicit TempDir(fs::path p) : path(std::move(p)) {}
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    remove_tree(path, ec);
  }
};

// PEFT's lora_alpha is an int unless the user gave a float; keep whole numbers integers.
json alpha_json(double alpha) {
  if (alpha == std::floor(alpha) && std::abs(alpha) < 9.0e15) return static_cast<int64_t>(alpha);
  return alpha;
}

// The whole PEFT 0.21 LoRA field set, with the values peft writes for a plain LoRA adapter, so
// that loaders that compare against it (or older peft releases, which ignore unknown keys with a
// warning) see a config PEFT itself could have saved.
json adapter_config_json(const lora::LoraConfig& config,
                         const std::vector<std::string>& target_modules,
                         const std::string& base_model) {
  json j;  // std::map-backed: keys come out sorted, as PEFT's json.dumps(sort_keys=True)
  j["alora_invocation_tokens"] = nullptr;
  j["alpha_pattern"] = json::object();
  for (const auto& [key, alpha] : config.alpha_pattern) j["alpha_pattern"][key] = alpha_json(alpha);
  j["arrow_config"] = nullptr;
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = base_model.empty() ? json(nullptr) : json(base_model);
  j["bias"] = "none";
  j["corda_config"] = nullptr;
  j["ensure_weight_tying"] = false;
  j["eva_config"] = nullptr;
  j["exclude_modules"] = nullptr;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["kasa_config"] = nullptr;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = json::object();
  j["lora_alpha"] = alpha_json(config.alpha);
  j["lora_bias"] = false;
  j["lora_dropout"] = config.dropout;
  j["lora_ga_config"] = nullptr;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = config.modules_to_save.empty() ? json(nullptr) : json(config.modules_to_save);
  j["monteclora_config"] = nullptr;
  j["peft_type"] = "LORA";
  j["peft_version"] = kPeftFormatVersion;
  j["qalora_group_size"] = 16;
  j["r"] = config.r;
  j["rank_pattern"] = json::object();
  for (const auto& [key, rank] : config.rank_pattern) j["rank_pattern"][key] = rank;
  j["revision"] = nullptr;
  // A regular expression is written as given, as PEFT does: the modules it matched can share a
  // last component with modules it did not, so their names would widen it.
  j["target_modules"] = !config.target_modules_regex.empty() ? json(config.target_modules_regex)
                        : target_modules.empty()             ? json(nullptr)
                                                             : json(target_modules);
  j["target_parameters"] = config.target_parameters.empty() ? json(nullptr) : json(config.target_parameters);
  j["task_type"] = "CAUSAL_LM";
  j["trainable_token_indices"] = nullptr;
  j["use_bdlora"] = nullptr;
  j["use_dora"] = config.use_dora;
  j["use_qalora"] = false;
  j["use_rslora"] = config.use_rslora;
  j["velora_config"] = nullptr;
  return j;
}

// What the adapter saved under `module` adapts, by the config: a linear module (target_modules),
// or through target_parameters the stacked experts' gate_up_proj / down_proj (Note [Expert LoRA
// layout]) or a router's 2-D weight "<module>.weight" (a plain [r, in] / [out, r] pair without
// dropout: Note [Router LoRA] in engine/model/moe_block.h). `path` is what rank_pattern and
// alpha_pattern match.
struct AdaptedPath {
  std::string path;
  bool stacked = false;    // the experts' [r * E, in] / [out, r * E] pair
  bool parameter = false;  // through target_parameters
};

AdaptedPath adapted_path(const std::string& module, const lora::LoraConfig& config) {
  if (auto experts = lora::expert_parameter_path(module, config); !experts.empty()) return {experts, true, true};
  if (config.targets_parameter(module + ".weight")) return {module + ".weight", false, true};
  return {module, false, false};
}

std::string last_component(const std::string& module) {
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

void check_module_for_save(const std::string& where,
                           const std::string& module,
                           const lora::LoraAdapter& adapter,
                           const lora::LoraConfig& config) {
  TORCH_CHECK(
      !module.empty() && !module.starts_with('.') && !module.ends_with('.') && module.find("..") == std::string::npos,
      where,
      ": '",
      module,
      "' is not a module path; adapters are keyed by Hugging Face module paths such as "
      "model.layers.0.self_attn.q_proj");
  const auto [path, stacked, parameter] = adapted_path(module, config);
  const lora::LoraConfig own = config.for_module(path);
  const int64_t r = own.r;
  TORCH_CHECK(parameter || config.targets(module),
              where,
              ": module '",
              module,
              "' has an adapter but the config does not target it, so PEFT would not load it; add '",
              last_component(module),
              "' to the target modules or drop the adapter");
  TORCH_CHECK(adapter.a.defined() && adapter.b.defined(), where, ": module '", module, "' has an undefined A or B");
  // Experts' adapters stack r rows (A) and columns (B) per expert (Note [Expert LoRA layout]).
  const bool rank_fits = stacked ? adapter.a.size(0) % r == 0 && adapter.b.size(1) == adapter.a.size(0)
                                 : adapter.a.size(0) == r && adapter.b.size(1) == r;
  TORCH_CHECK(
      adapter.a.dim() == 2 && adapter.b.dim() == 2 && rank_fits && adapter.a.size(1) > 0 && adapter.b.size(0) > 0,
      where,
      ": module '",
      module,
      "' has A ",
      adapter.a.sizes(),
      " and B ",
      adapter.b.sizes(),
      ", but with r = ",
      r,
      stacked ? " they must be [r * experts, in_features] and [out_features, r * experts]"
              : " they must be [r, in_features] and [out_features, r]");
  TORCH_CHECK(adapter.a.is_floating_point() && adapter.b.is_floating_point(),
              where,
              ": module '",
              module,
              "' has non-float weights (",
              adapter.a.scalar_type(),
              ", ",
              adapter.b.scalar_type(),
              ")");
  // PEFT recomputes the scaling from r and lora_alpha; an adapter trained with another one would
  // silently change meaning on load.
  TORCH_CHECK(adapter.scaling == own.scaling(),
              where,
              ": module '",
              module,
              "' has scaling ",
              adapter.scaling,
              " but the config's r = ",
              r,
              ", lora_alpha = ",
              own.alpha,
              (config.use_rslora ? ", use_rslora" : ""),
              (r != config.r || own.alpha != config.alpha ? " (its rank_pattern / alpha_pattern)" : ""),
              " give ",
              own.scaling(),
              "; save with the config the adapter was trained with");
}

// --- reading ---------------------------------------------------------------------------------

// Features that change what an adapter means and that qtrain does not implement. Each is refused
// when set to anything but its "off" value (null, false, {}, [], "").
struct Unsupported {
  const char* key;
  const char* feature;
};
constexpr Unsupported kUnsupported[] = {
    {"lora_bias", "a trained bias on lora_B"},
    {"trainable_token_indices", "trainable token embeddings"},
    {"layer_replication", "layer replication"},
    {"layers_to_transform", "LoRA restricted to some layer indices"},
    {"exclude_modules", "excluded modules"},
    {"fan_in_fan_out", "Conv1D weights stored as (in, out)"},
    {"use_qalora", "QA-LoRA"},
    {"alora_invocation_tokens", "activated LoRA (aLoRA)"},
    {"arrow_config", "Arrow routing"},
    {"kasa_config", "KaSA"},
    {"velora_config", "VeLoRA"},
    {"monteclora_config", "MonteCLoRA"},
    {"use_bdlora", "block-diagonal LoRA"},
};

// Inits that rewrite the base weights (peft/tuners/lora/layer.py: olora_init, pissa_init,
// corda_init, loftq_init, lora_ga_init). An adapter saved with one of them, unconverted, only
// works on that rewritten base, which qtrain does not have. (PEFT's
// path_initial_model_for_weight_conversion converts it into a plain adapter and writes true.)
bool init_rewrites_base(const std::string& init) {
  return init.starts_with("pissa") || init.starts_with("corda") || init == "olora" || init == "loftq" ||
         init == "lora_ga";
}

bool is_off(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_object() && v.empty()) ||
         (v.is_array() && v.empty()) || (v.is_string() && v.get_ref<const std::string&>().empty());
}

// A list of names (target_parameters, modules_to_save): null or absent is empty.
std::vector<std::string> read_names(const json* names, const char* key, const char* what, const std::string& where) {
  std::vector<std::string> out;
  if (names == nullptr || names->is_null()) return out;
  TORCH_CHECK(names->is_array(), where, ": \"", key, "\" is ", names->dump(), "; it must be a list of ", what);
  for (const json& n : *names) {
    TORCH_CHECK(n.is_string(), where, ": \"", key, "\" has the entry ", n.dump(), "; entries must be strings");
    out.push_back(n.get<std::string>());
  }
  return out;
}

// One of peft's per-module maps (rank_pattern: integers, alpha_pattern: numbers), from regular
// expressions of module names to values. A JSON object's keys come sorted (std::map), the order
// peft reads them in from its own sorted file, so the first key that matches is peft's.
template <class Value>
std::vector<std::pair<std::string, Value>> read_pattern(const json* pattern,
                                                        const char* key,
                                                        const char* value_name,
                                                        const std::string& where) {
  std::vector<std::pair<std::string, Value>> out;
  if (pattern == nullptr || pattern->is_null()) return out;
  TORCH_CHECK(pattern->is_object(),
              where,
              ": \"",
              key,
              "\" is ",
              pattern->dump(),
              "; it must map regular expressions of module names to a ",
              value_name,
              " each");
  for (const auto& [name, value] : pattern->items()) {
    const bool fits = std::is_integral_v<Value> ? value.is_number_integer() : value.is_number();
    TORCH_CHECK(fits,
                where,
                ": \"",
                key,
                "\" gives '",
                name,
                "' the ",
                value_name,
                " ",
                value.dump(),
                std::is_integral_v<Value> ? "; it must be an integer" : "; it must be a number");
    out.emplace_back(name, value.template get<Value>());
  }
  return out;
}

lora::LoraConfig parse_adapter_config(const json& j, const std::string& where, std::string& base_model) {
  TORCH_CHECK(j.is_object(), where, ": expected a JSON object, got a ", j.type_name());
  const auto find = [&](const char* key) -> const json* {
    const auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };

  const json* peft_type = find("peft_type");
  TORCH_CHECK(peft_type != nullptr, where, ": no \"peft_type\"; this is not a PEFT adapter config");
  TORCH_CHECK(peft_type->is_string() && peft_type->get<std::string>() == "LORA",
              where,
              ": \"peft_type\" is ",
              peft_type->dump(),
              "; qtrain loads LoRA adapters only (\"peft_type\": \"LORA\")");
  if (const json* task = find("task_type"); task != nullptr && !task->is_null()) {
    TORCH_CHECK(task->is_string() && task->get<std::string>() == "CAUSAL_LM",
                where,
                ": \"task_type\" is ",
                task->dump(),
                "; qtrain trains causal language models, so only \"CAUSAL_LM\" (or null) is supported");
  }
  for (const Unsupported& u : kUnsupported) {
    const json* v = find(u.key);
    TORCH_CHECK(v == nullptr || is_off(*v),
                where,
                ": \"",
                u.key,
                "\" is ",
                v == nullptr ? std::string() : v->dump(),
                ", which needs ",
                u.feature,
                ": not supported; qtrain loads plain LoRA adapters only (merge this adapter with peft instead, "
                "or retrain without \"",
                u.key,
                "\")");
  }
  if (const json* bias = find("bias"); bias != nullptr && !bias->is_null()) {
    TORCH_CHECK(bias->is_string() && bias->get<std::string>() == "none",
                where,
                ": \"bias\" is ",
                bias->dump(),
                ": trained base-layer biases are not supported; qtrain loads adapters with \"bias\": \"none\"");
  }
  if (const json* init = find("init_lora_weights"); init != nullptr && init->is_string()) {
    TORCH_CHECK(!init_rewrites_base(init->get<std::string>()),
                where,
                ": \"init_lora_weights\" is ",
                init->dump(),
                ": this init rewrites the base model's weights, so the adapter only fits that rewritten base; "
                "convert it with peft's save_pretrained(..., path_initial_model_for_weight_conversion=...) first");
  }

  lora::LoraConfig config;
  const json* r = find("r");
  TORCH_CHECK(r != nullptr && r->is_number_integer(),
              where,
              ": \"r\" ",
              r == nullptr ? std::string("is missing") : "is " + r->dump(),
              "; it must be the LoRA rank, an integer");
  config.r = r->get<int64_t>();
  const json* alpha = find("lora_alpha");
  TORCH_CHECK(alpha != nullptr && alpha->is_number(),
              where,
              ": \"lora_alpha\" ",
              alpha == nullptr ? std::string("is missing") : "is " + alpha->dump(),
              "; it must be a number");
  config.alpha = alpha->get<double>();
  if (const json* dropout = find("lora_dropout"); dropout != nullptr && !dropout->is_null()) {
    TORCH_CHECK(dropout->is_number(), where, ": \"lora_dropout\" is ", dropout->dump(), "; it must be a number");
    config.dropout = dropout->get<double>();
  }
  if (const json* rslora = find("use_rslora"); rslora != nullptr && !rslora->is_null()) {
    TORCH_CHECK(rslora->is_boolean(), where, ": \"use_rslora\" is ", rslora->dump(), "; it must be true or false");
    config.use_rslora = rslora->get<bool>();
  }
  if (const json* dora = find("use_dora"); dora != nullptr && !dora->is_null()) {
    TORCH_CHECK(dora->is_boolean(), where, ": \"use_dora\" is ", dora->dump(), "; it must be true or false");
    config.use_dora = dora->get<bool>();
  }
  config.modules_to_save = read_names(
      find("modules_to_save"), "modules_to_save", "module names such as [\"embed_tokens\", \"lm_head\"]", where);
  config.rank_pattern = read_pattern<int64_t>(find("rank_pattern"), "rank_pattern", "rank", where);
  config.alpha_pattern = read_pattern<double>(find("alpha_pattern"), "alpha_pattern", "alpha", where);
  config.target_parameters = read_names(
      find("target_parameters"), "target_parameters", "parameter names such as \"mlp.experts.gate_up_proj\"", where);
  const json* targets = find("target_modules");
  TORCH_CHECK((targets != nullptr && !targets->is_null()) || !config.target_parameters.empty(),
              where,
              ": \"target_modules\" is missing or null; a LoRA adapter needs the list of module names it adapts");
  if (targets == nullptr || targets->is_null()) {
    // Parameters only (e.g. MoE experts).
  } else if (targets->is_string()) {
    // PEFT: "all-linear", or a regular expression that a module's whole name must match.
    if (targets->get<std::string>() == "all-linear") {
      config.target_all_linear = true;
    } else {
      config.target_modules_regex = targets->get<std::string>();
    }
  } else {
    TORCH_CHECK(targets->is_array(),
                where,
                ": \"target_modules\" is ",
                targets->dump(),
                "; it must be a list of module names or \"all-linear\"");
    for (const json& t : *targets) {
      TORCH_CHECK(t.is_string(), where, ": \"target_modules\" has the entry ", t.dump(), "; entries must be strings");
      config.target_modules.push_back(t.get<std::string>());
    }
  }
  if (const json* base = find("base_model_name_or_path"); base != nullptr && !base->is_null()) {
    TORCH_CHECK(
        base->is_string(), where, ": \"base_model_name_or_path\" is ", base->dump(), "; it must be a string or null");
    base_model = base->get<std::string>();
  }
  config.validate(where);
  return config;
}

// A tensor of the weights file as an fp32 trainable leaf that owns its memory (not a view of the
// file's mapping).
at::Tensor trainable_fp32(const SafetensorsFile& file, const std::string& key) {
  const at::Tensor t = file.tensor(key);
  TORCH_CHECK(t.is_floating_point(),
              file.path().string(),
              ": '",
              key,
              "' has dtype ",
              t.scalar_type(),
              "; LoRA weights must be F32, BF16 or F16");
  return t.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true).set_requires_grad(true);
}

}  // namespace

void save_peft_adapter(const fs::path& dir,
                       const lora::LoraConfig& config,
                       const std::map<std::string, lora::LoraAdapter>& adapters,
                       const std::string& base_model_name_or_path,
                       at::ScalarType save_dtype,
                       AdapterFolder folder,
                       const std::map<std::string, at::Tensor>& saved_modules) {
  // A trailing slash names the folder itself.
  fs::path target = dir.lexically_normal();
  if (target.filename().empty()) {
    target = target.parent_path();
  }
  const std::string where = target.string();
  TORCH_CHECK(!target.empty() && target.filename() != "." && target.filename() != "..",
              "cannot save a PEFT adapter to '",
              dir.string(),
              "': give the adapter folder a name, e.g. out/adapter");
  config.validate(where);
  TORCH_CHECK(!adapters.empty(), where, ": no adapters to save; a PEFT adapter needs at least one module");
  TORCH_CHECK(save_dtype == at::kFloat || save_dtype == at::kBFloat16 || save_dtype == at::kHalf,
              where,
              ": cannot save LoRA weights as ",
              save_dtype,
              "; use float32, bfloat16 or float16");

  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::set<std::string> suffixes;
  for (const auto& [module, adapter] : adapters) {
    check_module_for_save(where, module, adapter, config);
    tensors.emplace_back(kPeftKeyPrefix + module + std::string(kSuffixA), adapter.a.detach().to(save_dtype));
    tensors.emplace_back(kPeftKeyPrefix + module + std::string(kSuffixB), adapter.b.detach().to(save_dtype));
    TORCH_CHECK(adapter.magnitude.defined() == config.use_dora,
                where,
                ": module '",
                module,
                adapter.magnitude.defined() ? "' has a DoRA magnitude but the config says use_dora false"
                                            : "' has no DoRA magnitude but the config says use_dora true");
    if (adapter.magnitude.defined()) {
      tensors.emplace_back(kPeftKeyPrefix + module + std::string(kSuffixMagnitude),
                           adapter.magnitude.detach().to(save_dtype));
    }
    if (!adapted_path(module, config).parameter) suffixes.insert(last_component(module));
  }
  for (const auto& [module, weight] : saved_modules) {
    TORCH_CHECK(config.saves_module(module),
                where,
                ": module '",
                module,
                "' is trained in full but the config's modules_to_save [",
                c10::Join(", ", config.modules_to_save),
                "] does not name it, so PEFT would not load it");
    tensors.emplace_back(kPeftKeyPrefix + module + ".weight", weight.detach().to(save_dtype));
  }
  const std::string config_text =
      adapter_config_json(config, {suffixes.begin(), suffixes.end()}, base_model_name_or_path).dump(2);

  if (folder == AdapterFolder::shared) {
    // Beside other files (a training run's output_dir): each file is replaced atomically, the
    // weights first, so a crash leaves the old adapter or new weights with an equal config.
    fs::create_directories(target);
    safetensors_save(target / kPeftWeightsFile, tensors);
    write_file_atomic(target / kPeftConfigFile, config_text);
    return;
  }

  // An existing folder is swapped out whole, so it must not hold anything but an adapter.
  std::error_code ec;
  const bool existed = fs::exists(target, ec);
  if (existed) {
    TORCH_CHECK(fs::is_directory(target), where, " exists and is not a folder; choose another adapter folder");
    for (const fs::directory_entry& entry : fs::directory_iterator(target)) {
      const std::string name = entry.path().filename().string();
      TORCH_CHECK(kAdapterFolderFiles.contains(name),
                  where,
                  " already holds '",
                  name,
                  "', which is not part of a PEFT adapter; qtrain replaces an adapter folder as a whole, so save "
                  "the adapter into a folder of its own (e.g. ",
                  (target / "adapter").string(),
                  ")");
    }
  }
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(parent);

  const TempDir tmp(parent / (target.filename().string() + ".tmp"));  // a leftover from a crash goes too
  remove_tree(tmp.path);
  fs::create_directory(tmp.path);
  safetensors_save(tmp.path / kPeftWeightsFile, tensors);
  write_file_synced(tmp.path / kPeftConfigFile, config_text);
  fsync_dir(tmp.path);

  if (!existed) {
    TORCH_CHECK(::rename(tmp.path.c_str(), target.c_str()) == 0,
                "cannot rename ",
                tmp.path.string(),
                " to ",
                where,
                ": ",
                std::strerror(errno));
  } else if (::renameat2(AT_FDCWD, tmp.path.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
    // Filesystems without RENAME_EXCHANGE: two renames. A crash between them leaves no `dir`, but
    // the old adapter complete in "<dir>.old" and the new one in "<dir>.tmp".
    TORCH_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP,
                "cannot swap ",
                tmp.path.string(),
                " into ",
                where,
                ": ",
                std::strerror(errno));
    const TempDir old(parent / (target.filename().string() + ".old"));
    remove_tree(old.path);
    fs::rename(target, old.path);
    fs::rename(tmp.path, target);
  }
  fsync_dir(parent);
}

LoadedAdapter load_peft_adapter(const fs::path& dir) {
  TORCH_CHECK(fs::is_directory(dir), "PEFT adapter folder ", dir.string(), " does not exist or is not a folder");
  const fs::path config_path = dir / kPeftConfigFile;
  const fs::path weights_path = dir / kPeftWeightsFile;
  const std::string config_where = config_path.string();
  const std::string weights_where = weights_path.string();
  TORCH_CHECK(fs::exists(config_path),
              dir.string(),
              " has no ",
              kPeftConfigFile,
              "; point at the folder that PeftModel.save_pretrained (or qtrain) wrote");
  TORCH_CHECK(fs::exists(weights_path) || !fs::exists(dir / "adapter_model.bin"),
              dir.string(),
              " holds adapter_model.bin but no ",
              kPeftWeightsFile,
              "; qtrain reads safetensors only: re-save the adapter with peft's "
              "save_pretrained(..., safe_serialization=True)");
  TORCH_CHECK(fs::exists(weights_path), dir.string(), " has no ", kPeftWeightsFile, "; the adapter is incomplete");

  json j;
  {
    const auto file_problem = text::regular_file_problem(config_path, text::kMaxConfigBytes);
    TORCH_CHECK(file_problem.empty(), config_where, " ", file_problem);
    std::ifstream in(config_path);
    TORCH_CHECK(in, "cannot open ", config_where, ": ", std::strerror(errno));
    const std::string contents(std::istreambuf_iterator<char>(in), {});
    const auto depth_problem = text::json_depth_problem(contents);
    TORCH_CHECK(depth_problem.empty(), config_where, ": ", depth_problem);
    try {
      j = json::parse(contents);
    } catch (const json::parse_error& e) {
      TORCH_CHECK(false, config_where, ": not valid JSON (", e.what(), ")");
    }
  }
  LoadedAdapter loaded;
  loaded.config = parse_adapter_config(j, config_where, loaded.base_model);
  const lora::LoraConfig& config = loaded.config;

  const SafetensorsFile file = SafetensorsFile::open(weights_path);
  struct Pair {
    std::optional<std::string> a, b, magnitude;
  };
  std::map<std::string, Pair> modules;
  for (const TensorInfo& info : file.tensors()) {
    const std::string& key = info.name;
    TORCH_CHECK(key.starts_with(kPeftKeyPrefix),
                weights_where,
                ": tensor '",
                key,
                "' does not start with \"",
                kPeftKeyPrefix,
                "\"; PEFT LoRA keys look like base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    const bool is_a = key.ends_with(kSuffixA);
    const bool is_b = key.ends_with(kSuffixB);
    if (key.ends_with(kSuffixMagnitude)) {
      TORCH_CHECK(config.use_dora,
                  weights_where,
                  ": tensor '",
                  key,
                  "' is a DoRA magnitude, but ",
                  config_where,
                  " says use_dora false; the adapter's two files do not belong together");
      const size_t prefix = std::string_view(kPeftKeyPrefix).size();
      modules[key.substr(prefix, key.size() - prefix - kSuffixMagnitude.size())].magnitude = key;
      continue;
    }
    // A module trained in full (modules_to_save): "<prefix><module>.weight".
    if (!is_a && !is_b && key.ends_with(".weight")) {
      const size_t prefix = std::string_view(kPeftKeyPrefix).size();
      const std::string module = key.substr(prefix, key.size() - prefix - std::string_view(".weight").size());
      if (config.saves_module(module)) {
        loaded.saved_modules[module] = trainable_fp32(file, key).detach();
        continue;
      }
    }
    TORCH_CHECK(is_a || is_b,
                weights_where,
                ": tensor '",
                key,
                "' is not a lora_A.weight or lora_B.weight, nor the weight of a module that \"modules_to_save\" in ",
                config_where,
                " names; it belongs to a feature qtrain does not support (LoRA biases, embedding LoRA), so the "
                "adapter is not supported");
    const size_t prefix = std::string_view(kPeftKeyPrefix).size();
    const std::string module = key.substr(prefix, key.size() - prefix - kSuffixA.size());
    TORCH_CHECK(!module.empty(), weights_where, ": tensor '", key, "' names no module");
    (is_a ? modules[module].a : modules[module].b) = key;
  }
  TORCH_CHECK(!modules.empty(), weights_where, ": holds no LoRA weights");
  for (const std::string& entry : config.modules_to_save) {
    TORCH_CHECK(std::any_of(loaded.saved_modules.begin(),
                            loaded.saved_modules.end(),
                            [&](const auto& m) { return lora::LoraConfig::saved_module_entry_names(entry, m.first); }),
                weights_where,
                ": \"modules_to_save\" in ",
                config_where,
                " names '",
                entry,
                "' but the file holds no weight of such a module (",
                kPeftKeyPrefix,
                "<module>.weight); the adapter is incomplete");
  }

  for (const auto& [module, pair] : modules) {
    TORCH_CHECK(pair.a && pair.b,
                weights_where,
                ": module '",
                module,
                "' has ",
                pair.a   ? "lora_A.weight but no lora_B.weight"
                : pair.b ? "lora_B.weight but no lora_A.weight"
                         : "a DoRA magnitude but no lora_A.weight or lora_B.weight",
                "; every adapted module needs both, the file is incomplete (re-save the adapter)");
    const TensorInfo& a = file.info(*pair.a);
    const TensorInfo& b = file.info(*pair.b);
    TORCH_CHECK(pair.magnitude.has_value() == config.use_dora,
                weights_where,
                ": module '",
                module,
                "' has ",
                pair.magnitude ? "a DoRA magnitude" : "no DoRA magnitude (lora_magnitude_vector)",
                " but ",
                config_where,
                " says use_dora ",
                config.use_dora ? "true" : "false",
                "; the file is incomplete or belongs to another adapter");
    at::Tensor magnitude;
    if (pair.magnitude) {
      const auto& info = file.info(*pair.magnitude);
      TORCH_CHECK(info.shape.size() == 1 && b.shape.size() == 2 && info.shape[0] == b.shape[0],
                  weights_where,
                  ": '",
                  *pair.magnitude,
                  "' has shape ",
                  c10::IntArrayRef(info.shape),
                  "; a DoRA magnitude has one entry per output row of the layer (lora_B.weight's first dimension)");
      magnitude = trainable_fp32(file, *pair.magnitude);
    }
    const auto [path, stacked, parameter] = adapted_path(module, config);
    const lora::LoraConfig own = config.for_module(path);
    if (stacked) {
      // Stacked experts (Note [Expert LoRA layout]): the model checks the number of experts.
      TORCH_CHECK(a.shape.size() == 2 && b.shape.size() == 2 && a.shape[0] > 0 && a.shape[0] % own.r == 0 &&
                      b.shape[1] == a.shape[0],
                  weights_where,
                  ": '",
                  *pair.a,
                  "' is ",
                  c10::IntArrayRef(a.shape),
                  " and its lora_B ",
                  c10::IntArrayRef(b.shape),
                  "; LoRA on target_parameters at r = ",
                  own.r,
                  " must be A [r * experts, in] and B [out, r * experts]");
      loaded.adapters.emplace(module,
                              lora::LoraAdapter{.a = trainable_fp32(file, *pair.a),
                                                .b = trainable_fp32(file, *pair.b),
                                                .scaling = own.scaling(),
                                                .dropout = 0.0});
      continue;
    }
    TORCH_CHECK(a.shape.size() == 2 && a.shape[0] == own.r && a.shape[1] > 0,
                weights_where,
                ": '",
                *pair.a,
                "' has shape ",
                c10::IntArrayRef(a.shape),
                " but ",
                config_where,
                " says r = ",
                own.r,
                own.r == config.r ? "" : " (its rank_pattern)",
                "; lora_A.weight must be [r, in_features]");
    TORCH_CHECK(b.shape.size() == 2 && b.shape[1] == own.r && b.shape[0] > 0,
                weights_where,
                ": '",
                *pair.b,
                "' has shape ",
                c10::IntArrayRef(b.shape),
                " but ",
                config_where,
                " says r = ",
                own.r,
                own.r == config.r ? "" : " (its rank_pattern)",
                "; lora_B.weight must be [out_features, r]");
    // PEFT would not create a LoRA layer for this module and would drop its weights.
    TORCH_CHECK(parameter || config.targets(module),
                weights_where,
                ": has weights for module '",
                module,
                "', but \"target_modules\" in ",
                config_where,
                " does not match it, so PEFT would ignore them; ",
                config.target_modules_regex.empty()
                    ? "add \"" + last_component(module) + "\" to target_modules"
                    : "widen the regular expression " + config.target_modules_regex + " to match it");
    loaded.adapters.emplace(module,
                            lora::LoraAdapter{.a = trainable_fp32(file, *pair.a),
                                              .b = trainable_fp32(file, *pair.b),
                                              .scaling = own.scaling(),
                                              .dropout = parameter ? 0.0 : config.dropout,
                                              .magnitude = magnitude});
  }
  return loaded;
}

}  // namespace qtrain::engine::io
