// See generator.h.
#include "engine/generate/generator.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "engine/model/kv_cache.h"

namespace qtrain::engine::generate {
namespace {

using Clock = std::chrono::steady_clock;

// The token in left padding and after a row's end: no query reads it, so any id of the
// vocabulary does (a tokenizer's pad id may lie outside the model's, as the byte tokenizer's).
constexpr int64_t kFiller = 0;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One prompt's completion as it grows, and what of its text has been handed out.
struct Row {
  std::vector<int64_t> seen;  // prompt and new tokens, for the repetition penalty
  Completion completion;
  size_t emitted = 0;
  bool done = false;
};

// U+FFFD, what a decoder writes for the bytes of a character not yet complete.
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Decodes `row`'s tokens, ends it at a stop string, and hands out what can no longer change.
void update_text(
    Row& row, size_t index, const data::TextTokenizer& tokenizer, const GenerationOptions& o, const OnText& on_text) {
  auto ids = row.completion.ids;
  if (row.completion.stop_reason == "stop_token") ids.pop_back();
  std::string text = tokenizer.decode(ids, /*skip_special_tokens=*/true);
  size_t holdback = 0;
  for (const auto& stop : o.stop_strings) {
    if (const size_t at = text.find(stop); at != std::string::npos) {
      text.resize(at);
      row.done = true;
      row.completion.stop_reason = "stop_string";
    }
    holdback = std::max(holdback, stop.size() - 1);
  }
  size_t end = text.size();
  if (!row.done) {
    end = end > holdback ? end - holdback : 0;
    if (text.ends_with(kReplacement)) end = std::min(end, text.size() - kReplacement.size());
  }
  if (on_text && end > row.emitted) on_text(index, text.substr(row.emitted, end - row.emitted));
  row.emitted = std::max(row.emitted, end);
  row.completion.text = std::move(text);
}

void generate_batch(schedule::LayerScheduler& scheduler,
                    const schedule::ExecutionPlan& plan,
                    const data::TextTokenizer& tokenizer,
                    const std::vector<std::vector<int64_t>>& prompts,
                    size_t first,
                    const GenerationOptions& o,
                    at::Generator& generator,
                    const OnText& on_text,
                    std::vector<Completion>& out,
                    GenerationTimes& times) {
  auto& lm = scheduler.model();
  const int64_t b = static_cast<int64_t>(prompts.size());
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  // Left padding: every row's last prompt token in the last column.
  auto ids = at::full({b, longest}, kFiller, at::kLong);
  auto valid = at::zeros({b, longest}, at::kBool);
  std::vector<Row> rows(prompts.size());
  for (int64_t r = 0; r < b; ++r) {
    const auto& p = prompts[r];
    const int64_t n = static_cast<int64_t>(p.size());
    ids[r].narrow(0, longest - n, n).copy_(at::tensor(p, at::kLong));
    valid[r].narrow(0, longest - n, n).fill_(true);
    rows[r].seen = p;
  }
  model::KvCache cache(static_cast<int64_t>(lm.layers().size()));
  const auto step_start = Clock::now();
  auto hidden = scheduler.decode_hidden(plan, ids, valid, cache);
  bool prefill = true;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const auto logits = lm.logits(hidden.narrow(1, hidden.size(1) - 1, 1)).squeeze(1);
    std::vector<std::vector<int64_t>> seen;
    for (const auto& row : rows) seen.push_back(row.seen);
    const auto next = choose_tokens(process_logits(logits, seen, o.sampling), o.sampling, generator);
    if (prefill) {
      times.prefill_seconds += seconds_since(step_start);
      prefill = false;
    }
    bool all_done = true;
    for (int64_t r = 0; r < b; ++r) {
      auto& row = rows[r];
      if (row.done) continue;
      row.seen.push_back(next[r]);
      row.completion.ids.push_back(next[r]);
      if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next[r]) != o.stop_ids.end()) {
        row.done = true;
        row.completion.stop_reason = "stop_token";
      } else if (step + 1 == o.max_new_tokens) {
        row.done = true;
        row.completion.stop_reason = "max_new_tokens";
      }
      update_text(row, first + r, tokenizer, o, on_text);
      all_done = all_done && row.done;
    }
    if (all_done) break;
    // Finished rows go on with a padding token nobody reads (Note [KV cache]).
    std::vector<int64_t> column;
    for (int64_t r = 0; r < b; ++r) column.push_back(rows[r].done ? kFiller : next[r]);
    const auto decode_start = Clock::now();
    hidden =
        scheduler.decode_hidden(plan, at::tensor(column, at::kLong).unsqueeze(1), at::ones({b, 1}, at::kBool), cache);
    times.decode_seconds += seconds_since(decode_start);
    times.decoded_tokens += b;
  }
  for (auto& row : rows) out.push_back(std::move(row.completion));
}

}  // namespace

std::vector<Completion> generate(schedule::LayerScheduler& scheduler,
                                 const data::TextTokenizer& tokenizer,
                                 const std::vector<std::vector<int64_t>>& prompts,
                                 const GenerationOptions& o,
                                 const OnText& on_text,
                                 GenerationTimes* times) {
  check_sampling(o.sampling);
  TORCH_CHECK(o.max_new_tokens > 0, "--max-new-tokens is ", o.max_new_tokens, ": use a positive count");
  TORCH_CHECK(o.batch_size > 0, "--batch-size is ", o.batch_size, ": use a positive count");
  for (const auto& stop : o.stop_strings) {
    TORCH_CHECK(!stop.empty(), "--stop: an empty text would end every completion before it starts; give the text");
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    TORCH_CHECK(!prompts[i].empty(), "prompt ", i + 1, " has no tokens: give it some text");
  }
  const auto plan = scheduler.prepare_eval();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  GenerationTimes local;
  std::vector<Completion> out;
  for (size_t first = 0; first < prompts.size(); first += static_cast<size_t>(o.batch_size)) {
    const size_t last = std::min(prompts.size(), first + static_cast<size_t>(o.batch_size));
    const std::vector<std::vector<int64_t>> batch(prompts.begin() + first, prompts.begin() + last);
    generate_batch(scheduler, plan, tokenizer, batch, first, o, generator, on_text, out, local);
  }
  if (times != nullptr) *times = local;
  return out;
}

}  // namespace qtrain::engine::generate
