// A dataset file (JSONL rows or one JSON array) of every dataset type. The first byte picks the
// type, the rest is the file.
#include <array>

#include "engine/config/run_config.h"
#include "engine/data/byte_tokenizer.h"
#include "engine/data/dataset.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qtrain;
  if (size == 0) return 0;
  static const std::array<const char*, 6> kTypes = {
      "", "completion", "alpaca", "input_output", "pretokenized", "chat_template"};
  engine::config::DatasetConfig d;
  d.type = kTypes[data[0] % kTypes.size()];
  d.path = fuzz::scratch_dir() / ((data[0] / kTypes.size()) % 2 ? "rows.json" : "rows.jsonl");
  d.chat_template_source =
      "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% generation %}</s>{% endgeneration %}"
      "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
  fuzz::write_file(d.path, fuzz::as_text(data + 1, size - 1));
  static const engine::data::ByteTokenizer tokenizer;
  engine::data::RowMapOptions rows;
  rows.threads = 1;
  fuzz::expect_clean([&] {
    (void)engine::data::load_dataset(
        d, &tokenizer, /*sequence_len=*/64, /*train_on_inputs=*/false, nullptr, rows, tokenizer.vocab_size());
  });
  return 0;
}
