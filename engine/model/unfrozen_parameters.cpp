// See unfrozen_parameters.h and Note [Unfrozen parameters] there.
#include "engine/model/unfrozen_parameters.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "engine/io/peft_adapter.h"
#include "engine/model/saved_modules.h"

namespace qtrain::engine::model {
namespace {

struct Pattern {
  std::string raw;
  std::regex regex;
  std::optional<std::pair<int64_t, std::optional<int64_t>>> range;  // [first, last); no last: to the end
};

// axolotl's LayerNamePattern: a trailing "[a:b]" is a row range; every '.' not followed by '+'
// is literal.
Pattern parse(const std::string& raw, const std::string& where) {
  Pattern p;
  p.raw = raw;
  std::string name = raw;
  static const std::regex kRange(R"(^(.+)\[([0-9]*)(?::([0-9]*))?\]$)");
  std::smatch m;
  if (std::regex_match(raw, m, kRange)) {
    name = m[1];
    const std::string first = m[2], last = m[3];
    const bool sliced = m[3].matched;
    TORCH_CHECK(sliced || !first.empty(), where, ": unfrozen_parameters entry '", raw, "' has an empty row index");
    const int64_t a = first.empty() ? 0 : std::stoll(first);
    std::optional<int64_t> b = sliced ? (last.empty() ? std::nullopt : std::optional<int64_t>(std::stoll(last)))
                                      : std::optional<int64_t>(a + 1);
    TORCH_CHECK(
        !b || *b > a, where, ": unfrozen_parameters entry '", raw, "': the range's end must be above its start");
    p.range = std::pair{a, b};
  }
  std::string escaped;
  for (size_t i = 0; i < name.size(); ++i) {
    escaped +=
        name[i] == '.' && (i + 1 == name.size() || name[i + 1] != '+') ? std::string("\\.") : std::string(1, name[i]);
  }
  try {
    p.regex = std::regex(escaped, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    TORCH_CHECK(false, where, ": unfrozen_parameters entry '", raw, "' is not a regular expression (", e.what(), ")");
  }
  return p;
}

// re.match: from the start of `name`, not necessarily to its end.
bool matches(const Pattern& p, const std::string& name) {
  std::smatch m;
  return std::regex_search(name, m, p.regex, std::regex_constants::match_continuous);
}

}  // namespace

Unfrozen unfrozen_parameters(const CausalLM& model,
                             const std::vector<std::string>& parameter_names,
                             const std::vector<std::string>& patterns,
                             const std::string& where) {
  Unfrozen out;
  const std::string embed = embed_tokens_module(model.config()) + ".weight";
  const std::string head = std::string(kLmHeadModule) + ".weight";
  std::vector<std::string> linears;
  for (const auto& layer : model.layers()) {
    for (const auto* l : layer.weight_linears()) linears.push_back(l->name + ".weight");
  }
  std::vector<std::string> norms;  // module paths
  for (const auto& [module, weight] : model.norm_weights()) norms.push_back(module);
  auto save = [&](const std::string& module) {
    if (std::find(out.modules_to_save.begin(), out.modules_to_save.end(), module) == out.modules_to_save.end()) {
      out.modules_to_save.push_back(module);
    }
  };
  for (const std::string& raw : patterns) {
    const Pattern p = parse(raw, where);
    bool matched = false;
    for (const std::string& name : parameter_names) {
      if (!matches(p, name) && !matches(p, io::kPeftKeyPrefix + name)) continue;
      matched = true;
      const bool is_embed = name == embed, is_head = name == head;
      if (is_embed || is_head) {
        save(is_embed ? "embed_tokens" : "lm_head");
        if (p.range) {
          const int64_t rows = model.config().vocab_size;
          const int64_t last = p.range->second.value_or(rows);
          TORCH_CHECK(last <= rows,
                      where,
                      ": unfrozen_parameters entry '",
                      raw,
                      "' ends at row ",
                      last,
                      " but ",
                      name,
                      " has ",
                      rows,
                      " rows");
          (is_embed ? out.embed_rows : out.head_rows).emplace_back(p.range->first, last);
        }
        continue;
      }
      const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
      if (std::find(norms.begin(), norms.end(), module) != norms.end()) {
        TORCH_CHECK(!p.range,
                    where,
                    ": unfrozen_parameters entry '",
                    raw,
                    "' gives a row range for the norm ",
                    name,
                    "; row ranges apply to the token embeddings and the output head: drop the range");
        save(module);
        continue;
      }
      const bool linear = std::find(linears.begin(), linears.end(), name) != linears.end();
      const bool bias = name.ends_with(".bias");
      TORCH_CHECK(false,
                  where,
                  ": unfrozen_parameters entry '",
                  raw,
                  "' matches ",
                  name,
                  linear ? ", a linear weight of the base, which qtrain keeps quantized (or ready to stream) and "
                           "trains through its LoRA adapter only"
                  : bias ? ", a bias, which stays frozen: peft's adapter format saves trained biases only all "
                           "together (bias: all), which qtrain does not train"
                         : ", which stays frozen (a router trains through its LoRA: lora_target_linear or "
                           "lora_target_parameters)",
                  "; qtrain trains the token embeddings, the output head and the norms in full (",
                  embed,
                  ", ",
                  head,
                  ", ",
                  norms.front(),
                  ".weight, ...): narrow the pattern to those, or remove it");
    }
    if (!matched) out.unmatched.push_back(raw);
  }
  return out;
}

void train_rows_only(const at::Tensor& weight, const std::vector<RowRange>& rows) {
  if (rows.empty()) return;
  auto mask = at::zeros({weight.size(0), 1}, weight.options().requires_grad(false));
  for (const auto& [first, last] : rows) mask.narrow(0, first, last - first).fill_(1);
  weight.register_hook([mask](const at::Tensor& grad) { return grad * mask; });
}

}  // namespace qtrain::engine::model
