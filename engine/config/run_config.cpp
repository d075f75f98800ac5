// See run_config.h. Reading goes in three passes: collect the top-level keys of the file and of
// the --set arguments (classifying each as known, unsupported-axolotl or unknown, and remembering
// where it was written), read each known key with its type and range, then check the
// combinations. Every message has the form `<place>: <key>: <problem>; <fix>`.
// The passes live beside this file: config_entries (collecting), config_reader (typed reads and
// datasets), config_problems (every problem at once); each key is read by its entry of the run
// config table (Note [Run config table]), in table order, and this file holds the combinations.
#include "engine/config/run_config.h"

#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include "engine/config/config_entries.h"
#include "engine/config/config_problems.h"
#include "engine/config/config_reader.h"
#include "engine/config/run_config_table.h"
#include "engine/config/run_limits.h"
#include "engine/config/yaml_place.h"
#include "engine/config/yaml_scalar.h"
#include "engine/text/regular_file.h"

namespace qtrain::engine::config {

namespace fs = std::filesystem;

namespace {

// Note [FSDP keys]
// axolotl turns FSDP on with `fsdp: [full_shard, auto_wrap]` (or the string "full_shard auto_wrap",
// as transformers' TrainingArguments reads it) and tunes it with `fsdp_config`; from axolotl 0.10
// `fsdp_config` (with `fsdp_version: 2`) is enough. qtrain's counterpart is shard_base: a sharding
// strategy (full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2) or an fsdp_config turns it
// on, no_shard leaves it off. What FSDP tunes besides (wrapping, state-dict type, its own CPU
// offload of parameters, ...) has no counterpart, since qtrain shards each decoder layer's
// quantized bytes and gathers them layer by layer: those options are named once as ignored, and
// FSDP's parameter offload is pointed to offload_layers. A written shard_base that disagrees is
// an error.
void read_fsdp(Reader& r, RunConfig& c) {
  static const std::vector<std::string> kStrategies = {
      "full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2"};
  std::optional<bool> on;
  std::string on_place;
  r.guard({"fsdp"}, [&] {
    const Entry* e = r.find("fsdp");
    if (!e) return;
    std::vector<std::string> words;
    if (e->value.IsScalar()) {
      std::istringstream in(e->value.Scalar());
      for (std::string w; in >> w;) words.push_back(w);
    } else {
      words = r.strings_of(*e, "[full_shard, auto_wrap]");
    }
    for (const auto& w : words) {
      if (std::find(kStrategies.begin(), kStrategies.end(), w) != kStrategies.end()) {
        on = true;
      } else if (w == "no_shard") {
        on = on.value_or(false);
      } else if (w == "auto_wrap") {
        c.ignored_keys.push_back("fsdp: auto_wrap (qtrain shards and gathers each decoder layer)");
      } else if (w == "offload") {
        c.ignored_keys.push_back(
            "fsdp: offload (FSDP's CPU offload of parameters; qtrain streams layers from host RAM with offload_layers: "
            "auto)");
      } else {
        e->fail_value("'" + w +
                      "' is not an FSDP option; use full_shard (qtrain's shard_base: true), shard_grad_op, "
                      "hybrid_shard, hybrid_shard_zero2, no_shard, offload or auto_wrap");
      }
    }
    on_place = r.place_of("fsdp");
  });
  r.guard({"fsdp_config"}, [&] {
    const Entry* e = r.find("fsdp_config");
    if (!e) return;
    if (!e->value.IsMap()) e->fail_value("expected a mapping of FSDP options, e.g. {fsdp_offload_params: false}");
    if (!on) {
      on = true;
      on_place = r.place_of("fsdp_config");
    }
    std::vector<std::string> names;
    bool offload_params = false;
    for (const auto& kv : e->value) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : shown(kv.first);
      names.push_back(name);
      offload_params = offload_params || ((name == "fsdp_offload_params" || name == "offload_params") &&
                                          kv.second.IsScalar() && parse_bool(kv.second.Scalar()).value_or(false));
    }
    if (!names.empty()) {
      c.ignored_keys.push_back("fsdp_config: " + join(names, ", ") +
                               " (FSDP's tuning; qtrain shards each decoder layer's quantized bytes and gathers them "
                               "layer by layer" +
                               (offload_params ? "; for parameters in host RAM use offload_layers: auto" : "") + ")");
    }
  });
  r.guard({"fsdp_version"}, [&] {
    if (const Entry* e = r.find("fsdp_version")) {
      c.ignored_keys.push_back("fsdp_version: " + shown(e->value) + " (qtrain's sharding has one version)");
    }
  });
  if (!on) return;
  r.guard({"shard_base"}, [&] {
    if (const Entry* e = r.find_written("shard_base"); e && !e->value.IsNull() && c.shard_base != *on) {
      e->fail_value(std::string("shard_base is ") + (c.shard_base ? "true" : "false") + " but " + on_place +
                    (*on ? " turns sharding on" : " says no_shard") + "; remove one of the two");
    }
  });
  c.shard_base = *on;
}

RunConfig read_config(Reader& r) {
  RunConfig c;
  for (const RunConfigKey& key : run_config_table()) key.read(r, c, key.name);
  read_fsdp(r, c);  // See Note [FSDP keys].
  r.check_all_read();

  // The one check of several keys that needs shard_base as the FSDP keys leave it (the others are
  // in the table, on the last key they name). The depth also sets how far ahead a sharded base
  // gathers and offloaded activations come back.
  r.guard({"offload_prefetch_depth", "offload_layers", "activation_offloading", "shard_base"}, [&] {
    if (const Entry* e = r.find_written("offload_prefetch_depth"); e && c.offload_prefetch_depth != 1 &&
                                                                   !c.offload_layers_auto && c.offload_layers == 0 &&
                                                                   !c.activation_offloading && !c.shard_base) {
      fail(e->key_place(),
           e->key,
           std::to_string(c.offload_prefetch_depth) +
               " has no effect without offloaded layers, activation offloading or a sharded base; set "
               "offload_layers (auto or a number), or remove this key");
    }
  });
  return c;
}

}  // namespace

RunConfig parse_run_config(const std::string& yaml_text,
                           const std::string& source_name,
                           const std::filesystem::path& base_dir,
                           const std::vector<std::string>& overrides) {
  const YAML::Node root = load_document(yaml_text, source_name);
  Problems problems;
  EntrySet entries;
  for (Entry& e : map_entries(root, Origin::file(source_name), "")) {
    problems.guard({e.key}, [&] { entries.add_top_level(std::move(e)); });
  }
  for (const std::string& argument : overrides) {
    problems.guard({argument}, [&] { entries.add_top_level(parse_override(argument)); });
  }
  Reader reader(entries.entries(), source_name, base_dir, problems);
  RunConfig c = read_config(reader);
  problems.throw_if_any(source_name);
  c.ignored_keys.insert(c.ignored_keys.begin(), entries.ignored().begin(), entries.ignored().end());
  return c;
}

RunConfig load_run_config(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  const auto problem = text::regular_file_problem(file, text::kMaxConfigBytes);
  TORCH_CHECK(problem.empty(), file.string(), " ", problem);
  std::ifstream in(file, std::ios::binary);
  TORCH_CHECK(in.good(),
              file.string(),
              ": cannot read the run config (",
              std::error_code(errno, std::generic_category()).message(),
              "); check the path");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_run_config(text.str(), file.string(), fs::absolute(file).parent_path(), overrides);
}

std::vector<std::pair<std::string, double>> dpo_losses(const RunConfig& c) {
  const std::vector<std::string> types =
      c.dpo_loss_type.empty() ? std::vector<std::string>{c.rl == "ipo" ? "ipo" : "sigmoid"} : c.dpo_loss_type;
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < types.size(); ++i) {
    out.emplace_back(types[i], i < c.dpo_loss_weights.size() ? c.dpo_loss_weights[i] : 1.0);
  }
  return out;
}

std::string ignored_keys_note(const RunConfig& c) {
  if (c.ignored_keys.empty()) return "";
  return "accepted and ignored (they do not change what is trained): " + join(c.ignored_keys, ", ");
}

}  // namespace qtrain::engine::config
