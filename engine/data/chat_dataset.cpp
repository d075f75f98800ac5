// See chat_dataset.h.
#include "engine/data/chat_dataset.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "engine/data/leading_tokens.h"
#include "engine/text/chat_template.h"
#include "engine/text/jinja_error.h"
#include "engine/text/json_depth.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::data {
namespace {

// Note [Chat labels from character spans]
// As HF's return_assistant_tokens_mask (and unlike axolotl's per-turn re-rendering, which gives
// the same tokens for the families qtrain supports), a conversation is rendered once with the
// template (no generation prompt) and tokenized once with add_special_tokens=false: the template
// writes BOS itself. All labels start at -100. The turns are axolotl's get_conversation_thread:
// null values removed from the row; the row's "system" prepended as a system turn when the first
// message is not one; message keys mapped by message_property_mappings, every other key passed
// to the template as it is (tool_calls' string arguments parsed as JSON); content given as a
// list of parts joined into one string, parts with a "train" (or "weight") flag giving the
// turn's training_detail; a leading system turn dropped with drop_system_message. Then:
//   1. Each message's content is found in the rendered text, searching forward from the end of
//      the previous message's content (verbatim; failing that, with surrounding whitespace
//      stripped, for templates that trim). A template that rewrites the content is an error.
//   2. A turn trains when its message_field_training flag says so; else, with a
//      message_field_training_detail, when that list is not empty; else when its role is in
//      roles_to_train (or train_on_inputs). A trained turn trains every token with at least one
//      byte inside its content span (a token straddling the boundary, e.g. "\n" merged with the
//      content's last character, is trained); with a training_detail, only those with a byte
//      inside a range marked train (character offsets into the content, end inclusive).
//   3. The turn ends at the token after its last content token. Within the 4 tokens from there
//      (axolotl's |index - turn end| <= 3) the first token of eot_tokens (default [eos_token])
//      is found, and separately the first EOS. Each is trained per train_on_eot (default:
//      train_on_eos) and train_on_eos: turn (after a trained turn), all (every turn), last (only
//      the one found after the last turn that was looked at: a trained turn, or any turn when
//      either option is all), none. An eos_token among eot_tokens needs the two options equal.
//   4. A message with empty content trains nothing, not even its end of turn: an empty string is
//      found anywhere, so it has no place in the text.
// scripts/reference/chat_data_reference.py applies the same rules with transformers; the test
// compares the two token for token.
constexpr size_t kEotSearch = 4;

// Note [Long chat rows]
// A conversation is tokenized as a completion row is (Note [Leading tokens]): when it holds more
// than sequence_len tokens only its first sequence_len + 1 are made, which is exact for the
// sample, since a longer one is dropped or refused (excess_length_strategy drop, raise) or cut to
// its first sequence_len tokens (truncate), whose labels follow from the turns and spans up to
// there. One rule looks past the cut: train_on_eot or train_on_eos `last` trains the end of turn
// after the last turn, which may lie beyond it. A truncated conversation with either option
// `last` is therefore tokenized whole, and refused above kMaxWholeChatBytes rendered bytes
// (whole, a 100 MB row took 3 GB) with the ways out.
constexpr size_t kMaxWholeChatBytes = size_t{16} << 20;

const std::map<std::string, std::string>& builtin_roles() {
  static const std::map<std::string, std::string> roles = {{"human", "user"},
                                                           {"user", "user"},
                                                           {"gpt", "assistant"},
                                                           {"assistant", "assistant"},
                                                           {"system", "system"},
                                                           {"tool", "tool"}};
  return roles;
}

std::string known_roles(const config::DatasetConfig& d) {
  std::set<std::string> names;
  for (const auto& [source, role] : builtin_roles()) names.insert(source);
  for (const auto& [source, role] : d.roles) names.insert(source);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// roles: first, then the built-in aliases.
std::optional<std::string> template_role(const std::string& source, const config::DatasetConfig& d) {
  if (const auto it = d.roles.find(source); it != d.roles.end()) return it->second;
  if (const auto it = builtin_roles().find(source); it != builtin_roles().end()) return it->second;
  return std::nullopt;
}

// A byte range [begin, end) of a turn's content and whether it is trained.
struct DetailRange {
  size_t begin;
  size_t end;
  bool train;
};

struct Turn {
  std::string role;                                // the template's role
  std::string content;                             // as the template receives it
  nlohmann::ordered_json message;                  // what the template receives
  std::optional<bool> training;                    // message_field_training
  std::optional<std::vector<DetailRange>> detail;  // message_field_training_detail, in bytes
};

// As axolotl's remove_none_values: null members of objects go, recursively.
nlohmann::ordered_json without_nulls(const nlohmann::ordered_json& v) {
  if (v.is_object()) {
    auto out = nlohmann::ordered_json::object();
    for (const auto& [key, value] : v.items()) {
      if (!value.is_null()) out[key] = without_nulls(value);
    }
    return out;
  }
  if (v.is_array()) {
    auto out = nlohmann::ordered_json::array();
    for (const auto& e : v) out.push_back(without_nulls(e));
    return out;
  }
  return v;
}

// Byte offset of every character of `s`, and s.size() at the end.
std::vector<size_t> char_starts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); i += std::max<size_t>(1, text::utf8_length(static_cast<unsigned char>(s[i])))) {
    starts.push_back(i);
  }
  starts.push_back(s.size());
  return starts;
}

// A training_detail list ({begin_offset, end_offset, train}, character offsets, end inclusive) as
// byte ranges of `content`.
std::vector<DetailRange> detail_ranges(const nlohmann::ordered_json& detail,
                                       const std::string& content,
                                       const std::string& at) {
  static const std::string layout =
      " must be a list of {\"begin_offset\": 0, \"end_offset\": 9, \"train\": true} (character offsets into the "
      "content, end inclusive)";
  TORCH_CHECK(detail.is_array(), at, layout);
  const auto starts = char_starts(content);
  const int64_t chars = static_cast<int64_t>(starts.size()) - 1;
  std::vector<DetailRange> ranges;
  for (size_t j = 0; j < detail.size(); ++j) {
    const auto& r = detail[j];
    const auto where = at + "[" + std::to_string(j) + "]";
    TORCH_CHECK(r.is_object() && r.contains("begin_offset") && r["begin_offset"].is_number_integer() &&
                    r.contains("end_offset") && r["end_offset"].is_number_integer() && r.contains("train") &&
                    r["train"].is_boolean(),
                where,
                layout,
                ", found ",
                r.dump().substr(0, 80));
    const int64_t b = r["begin_offset"].get<int64_t>();
    const int64_t e = r["end_offset"].get<int64_t>();
    TORCH_CHECK(0 <= b && b <= e && e < chars,
                where,
                ": offsets ",
                b,
                "..",
                e,
                " are not within the content's ",
                chars,
                " characters; use 0 <= begin_offset <= end_offset < ",
                chars);
    ranges.push_back({starts[b], starts[e + 1], r["train"].get<bool>()});
  }
  return ranges;
}

// As axolotl's _convert_content_parts: the parts' "text" (or "content", or "value") joined; the
// parts give the training detail when one of them has "train" or "weight".
std::string join_content_parts(const nlohmann::ordered_json& parts, Turn& turn) {
  std::string text;
  std::vector<DetailRange> ranges;
  bool explicit_training = false;
  for (const auto& part : parts) {
    if (!part.is_object()) continue;
    std::string piece;
    for (const char* key : {"text", "content", "value"}) {
      if (const auto v = part.find(key); v != part.end() && v->is_string() && !v->get<std::string>().empty()) {
        piece = v->get<std::string>();
        break;
      }
    }
    bool train = true;
    if (const auto t = part.find("train"); t != part.end()) {
      explicit_training = true;
      train = t->is_boolean() ? t->get<bool>() : !t->is_null();
    } else if (const auto w = part.find("weight"); w != part.end()) {
      explicit_training = true;
      train = !(w->is_number() && w->get<double>() == 0.0);
    }
    if (!piece.empty()) ranges.push_back({text.size(), text.size() + piece.size(), train});
    text += piece;
  }
  if (explicit_training) turn.detail = std::move(ranges);
  return text;
}

// tool_calls[].function.arguments given as a JSON string become the object, as axolotl does.
void parse_tool_arguments(nlohmann::ordered_json& message, const std::string& at) {
  const auto calls = message.find("tool_calls");
  if (calls == message.end() || !calls->is_array()) return;
  for (size_t k = 0; k < calls->size(); ++k) {
    auto& call = (*calls)[k];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    auto& function = call["function"];
    if (!function.contains("arguments") || !function["arguments"].is_string()) continue;
    const auto& arguments = function["arguments"].get_ref<const std::string&>();
    const auto problem = text::json_depth_problem(arguments);
    TORCH_CHECK(problem.empty(), at, ".tool_calls[", k, "].function.arguments: ", problem);
    try {
      function["arguments"] = nlohmann::ordered_json::parse(arguments);
    } catch (const nlohmann::json::parse_error& e) {
      TORCH_CHECK(false,
                  at,
                  ".tool_calls[",
                  k,
                  "].function.arguments is a string that is not JSON (",
                  e.what(),
                  "); write the arguments as an object");
    }
  }
}

Turn read_turn(const nlohmann::ordered_json& m, const config::DatasetConfig& d, const std::string& at) {
  TORCH_CHECK(
      m.is_object(), at, " must be an object {\"", d.message_role, "\": ..., \"", d.message_content, "\": ...}");
  const auto role_value = m.find(d.message_role);
  TORCH_CHECK(role_value != m.end() && role_value->is_string(),
              at,
              ".",
              d.message_role,
              role_value == m.end() ? std::string(" is missing")
                                    : " must be a string, found " + std::string(role_value->type_name()),
              "; map the message's keys with message_property_mappings: {role: ..., content: ...}");
  const auto content_value = m.find(d.message_content);
  TORCH_CHECK(content_value != m.end() && (content_value->is_string() || content_value->is_array()),
              at,
              ".",
              d.message_content,
              content_value == m.end()
                  ? std::string(" is missing")
                  : " must be a string or a list of parts, found " + std::string(content_value->type_name()),
              "; map the message's keys with message_property_mappings: {role: ..., content: ...}");
  const auto source = role_value->get<std::string>();
  const auto role = template_role(source, d);
  TORCH_CHECK(role.has_value(),
              at,
              ".",
              d.message_role,
              ": unknown role '",
              source,
              "' (known: ",
              known_roles(d),
              "); map it with roles: {assistant: [",
              source,
              "]}");
  Turn turn;
  turn.role = *role;
  turn.content =
      content_value->is_string() ? content_value->get<std::string>() : join_content_parts(*content_value, turn);
  // The mapped keys under the template's names, then every key mapped nowhere under its own.
  turn.message = {{"role", turn.role}, {"content", turn.content}};
  std::set<std::string> mapped = {d.message_role, d.message_content};
  for (const auto& [key, from] : d.message_properties) {
    mapped.insert(from);
    if (const auto v = m.find(from); v != m.end()) turn.message[key] = *v;
  }
  for (const auto& [key, value] : m.items()) {
    if (!mapped.count(key) && !turn.message.contains(key)) turn.message[key] = value;
  }
  parse_tool_arguments(turn.message, at);
  if (!d.message_field_training.empty()) {
    if (const auto t = m.find(d.message_field_training); t != m.end()) {
      TORCH_CHECK(t->is_boolean(),
                  at,
                  ".",
                  d.message_field_training,
                  " must be true or false (message_field_training), found ",
                  t->dump().substr(0, 60));
      turn.training = t->get<bool>();
    }
  }
  // Content parts with train flags win over the message's training detail, as in axolotl.
  if (!d.message_field_training_detail.empty() && !turn.detail.has_value()) {
    if (const auto t = m.find(d.message_field_training_detail); t != m.end()) {
      turn.detail = detail_ranges(*t, turn.content, at + "." + d.message_field_training_detail);
    }
  }
  return turn;
}

std::vector<Turn> read_turns(const nlohmann::ordered_json& row,
                             const config::DatasetConfig& d,
                             const std::string& where) {
  const auto& field = d.field_messages;
  const auto it = row.find(field);
  TORCH_CHECK(it != row.end(),
              where,
              ": missing \"",
              field,
              "\"; a chat_template row is {\"",
              field,
              "\": [{\"",
              d.message_role,
              "\": \"user\", \"",
              d.message_content,
              "\": \"...\"}, ...]}; set the dataset's field_messages: to the key that holds the conversation");
  nlohmann::ordered_json messages = *it;
  if (messages.is_string()) {  // a conversation stored as a JSON string, as axolotl accepts
    const auto problem = text::json_depth_problem(messages.get_ref<const std::string&>());
    TORCH_CHECK(problem.empty(), where, ": \"", field, "\": ", problem);
    try {
      messages = without_nulls(nlohmann::ordered_json::parse(messages.get<std::string>()));
    } catch (const nlohmann::json::parse_error& e) {
      TORCH_CHECK(
          false, where, ": \"", field, "\" is a string that is not JSON (", e.what(), "); write the list itself");
    }
  }
  TORCH_CHECK(messages.is_array(), where, ": \"", field, "\" must be a list of messages, found ", messages.type_name());
  TORCH_CHECK(!messages.empty(), where, ": \"", field, "\" is an empty conversation; remove the line");
  std::vector<Turn> turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    turns.push_back(read_turn(messages[i], d, where + ": " + field + "[" + std::to_string(i) + "]"));
  }
  if (const auto system = row.find("system"); system != row.end() && turns.front().role != "system") {
    TORCH_CHECK(
        system->is_string(), where, ": \"system\" (the system message) must be a string, found ", system->type_name());
    Turn t;
    t.role = "system";
    t.content = system->get<std::string>();
    t.message = {{"role", t.role}, {"content", t.content}};
    turns.insert(turns.begin(), std::move(t));
  }
  if (d.drop_system_message && turns.front().role == "system") turns.erase(turns.begin());
  TORCH_CHECK(!turns.empty(),
              where,
              ": the conversation is only a system message, which drop_system_message drops; remove the line");
  return turns;
}

// Byte span [begin, end) of `content` in `text` at or after `from`, and how many bytes of the
// content's start were stripped. See Note [Chat labels from character spans], rule 1.
struct Found {
  size_t begin;
  size_t end;
  size_t stripped_front;
};

Found find_content(const std::string& text, const std::string& content, size_t from, const std::string& at) {
  if (const size_t p = text.find(content, from); p != std::string::npos) return {p, p + content.size(), 0};
  const auto first = content.find_first_not_of(" \t\n\r");
  const auto stripped = first == std::string::npos
                            ? std::string()
                            : content.substr(first, content.find_last_not_of(" \t\n\r") - first + 1);
  const size_t p = text.find(stripped, from);
  TORCH_CHECK(p != std::string::npos,
              at,
              ": the chat template does not write this message's content as it is, so its tokens cannot be "
              "found; use a template that writes message content verbatim (chat_template: jinja)");
  return {p, p + stripped.size(), first == std::string::npos ? 0 : first};
}

std::vector<int64_t> token_ids(const std::vector<std::string>& names, const TextTokenizer& tokenizer) {
  std::vector<int64_t> ids;
  for (const auto& name : names) {
    const auto id = tokenizer.id_of(name);
    TORCH_CHECK(id.has_value(),
                "eot_tokens: '",
                name,
                "' is not a token of the model's tokenizer; use its end-of-turn token, e.g. <|im_end|>, "
                "<|eot_id|> or <end_of_turn>");
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace

std::vector<Sample> read_chat_template(const config::DatasetConfig& d,
                                       const TextTokenizer& tokenizer,
                                       bool train_on_inputs,
                                       size_t max_tokens,
                                       const RowMapOptions& rows) {
  auto source = d.chat_template_source.empty() ? tokenizer.chat_template() : d.chat_template_source;
  if (!source && !d.chat_template_fallback.empty()) source = d.chat_template_fallback;
  TORCH_CHECK(source.has_value(),
              d.path.string(),
              ": type chat_template needs a chat template, and the model's tokenizer_config.json has none; set "
              "chat_template to a named template (chatml, llama3, ...) or to jinja with chat_template_jinja: (the "
              "Jinja text or a .jinja file)");
  const text::ChatTemplate chat_template(*source);
  const auto eot_names = d.eot_tokens.empty() ? std::vector<std::string>{tokenizer.eos_token()} : d.eot_tokens;
  const auto eot = token_ids(eot_names, tokenizer);
  const std::vector<int64_t> eos = {tokenizer.eos_id()};
  const std::string train_on_eot = d.train_on_eot.empty() ? d.train_on_eos : d.train_on_eot;
  TORCH_CHECK(std::find(eot_names.begin(), eot_names.end(), tokenizer.eos_token()) == eot_names.end() ||
                  train_on_eot == d.train_on_eos,
              d.path.string(),
              ": train_on_eos is ",
              d.train_on_eos,
              " and train_on_eot is ",
              train_on_eot,
              ", but the eos_token '",
              tokenizer.eos_token(),
              "' is one of the eot_tokens, so it would be both; set them equal, or set eot_tokens to the template's "
              "end-of-turn token");
  // roles_to_train names roles as the dataset or as the template does (axolotl maps them too).
  std::set<std::string> trained_roles;
  for (const auto& r : d.roles_to_train) trained_roles.insert(template_role(r, d).value_or(r));
  const bool any_all = d.train_on_eos == "all" || train_on_eot == "all";
  // See Note [Long chat rows].
  const bool whole = d.excess_length_strategy == "truncate" && (train_on_eot == "last" || d.train_on_eos == "last");

  const auto row_samples = [&](const nlohmann::ordered_json& raw, const std::string& where, auto& samples) {
    const auto row = without_nulls(raw);
    const auto turns = read_turns(row, d, where);
    text::ChatTemplateInput input;
    for (const auto& t : turns) input.messages.push_back(t.message);
    if (const auto tools = row.find(d.field_tools); tools != row.end()) {
      input.tools = *tools;  // in the file's key order, as the template's tojson writes it
      if (input.tools.is_string()) {
        const auto problem = text::json_depth_problem(tools->get_ref<const std::string&>());
        TORCH_CHECK(problem.empty(), where, ": \"", d.field_tools, "\": ", problem);
        try {
          input.tools = nlohmann::ordered_json::parse(tools->get<std::string>());
        } catch (const nlohmann::json::parse_error& e) {
          TORCH_CHECK(false, where, ": \"", d.field_tools, "\" is a string that is not JSON (", e.what(), ")");
        }
      }
      TORCH_CHECK(input.tools.is_array(),
                  where,
                  ": \"",
                  d.field_tools,
                  "\" must be a list of tool definitions, found ",
                  input.tools.type_name());
    }
    input.variables["bos_token"] = tokenizer.bos_token();
    input.variables["eos_token"] = tokenizer.eos_token();
    std::string rendered;
    try {
      rendered = chat_template.render(input).text;
    } catch (const text::TemplateError& e) {
      TORCH_CHECK(false, where, ": the chat template refused this conversation: ", e.what());
    }
    TORCH_CHECK(!whole || rendered.size() <= kMaxWholeChatBytes,
                where,
                ": the conversation renders to ",
                rendered.size(),
                " bytes, and with excess_length_strategy: truncate and train_on_eot/train_on_eos: last it would be "
                "tokenized whole (its last end of turn may lie past the cut; the limit is ",
                kMaxWholeChatBytes,
                " bytes); shorten the row, use excess_length_strategy: drop, or train_on_eot: turn");
    const auto tokens = whole ? tokenizer.tokenize(rendered, /*add_special_tokens=*/false)
                              : tokenize_leading(tokenizer, rendered, /*add_special_tokens=*/false, max_tokens);
    Sample s;
    s.input_ids = tokens.ids;
    s.labels.assign(tokens.ids.size(), -100);
    const auto overlaps = [&](size_t k, size_t begin, size_t end) {
      const auto [a, b] = tokens.spans[k];
      return a < b && a < end && b > begin;
    };
    std::optional<size_t> last_eot, last_eos;
    size_t cursor = 0;
    for (size_t i = 0; i < turns.size(); ++i) {
      const auto& turn = turns[i];
      if (turn.content.empty()) continue;  // rule 4
      const auto at = where + ": " + d.field_messages + "[" + std::to_string(i) + "]";
      const auto found = find_content(rendered, turn.content, cursor, at);
      cursor = found.end;
      // rule 2
      const bool train = turn.training.has_value() ? *turn.training
                         : turn.detail.has_value() ? !turn.detail->empty()
                                                   : train_on_inputs || trained_roles.count(turn.role) > 0;
      if (!train && !any_all) continue;
      // The turn ends at the token after its last content token.
      size_t turn_end = 0;
      for (size_t k = 0; k < tokens.ids.size(); ++k) {
        const auto [a, b] = tokens.spans[k];
        const bool inside = overlaps(k, found.begin, found.end);
        if (inside || (b > a && a < found.begin)) turn_end = k + 1;
        if (!inside || !train) continue;
        bool trained = !turn.detail.has_value();
        for (const auto& r : turn.detail.value_or(std::vector<DetailRange>{})) {
          // The range in the rendered text; a template that trimmed the content shifts it.
          const size_t begin = found.begin + r.begin - std::min(r.begin, found.stripped_front);
          const size_t end = std::min(found.end, found.begin + r.end - std::min(r.end, found.stripped_front));
          trained = trained || (r.train && overlaps(k, begin, end));
        }
        if (trained) s.labels[k] = tokens.ids[k];
      }
      // rule 3
      for (const auto& [ids, option, last] :
           {std::tuple{&eot, &train_on_eot, &last_eot}, std::tuple{&eos, &d.train_on_eos, &last_eos}}) {
        for (size_t k = turn_end; k < std::min(turn_end + kEotSearch, tokens.ids.size()); ++k) {
          if (std::find(ids->begin(), ids->end(), tokens.ids[k]) == ids->end()) continue;
          *last = k;
          if (*option == "all" || (*option == "turn" && train)) s.labels[k] = tokens.ids[k];
          break;
        }
      }
    }
    if (last_eot && train_on_eot == "last") s.labels[*last_eot] = tokens.ids[*last_eot];
    if (last_eos && d.train_on_eos == "last") s.labels[*last_eos] = tokens.ids[*last_eos];
    samples.push_back(std::move(s));
  };
  return map_jsonl_rows(d.path, rows, row_samples);
}

}  // namespace qtrain::engine::data
