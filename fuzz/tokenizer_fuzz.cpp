// A tokenizer.json, loaded and then used on a few awkward texts.
#include "engine/text/tokenizer.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qtrain;
  const std::string json(fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const auto tokenizer = engine::text::Tokenizer::from_json(json, "tokenizer.json");
    for (const std::string_view text :
         {"", "Hello world!", "  \t\n<s> </s> <|im_start|>", "caf\xc3\xa9 \xf0\x9f\x98\x80 1234567"}) {
      const auto encoding = tokenizer.encode(text, true);
      (void)tokenizer.decode(encoding.ids, false);
      (void)engine::text::char_offsets(text, encoding.offsets);
    }
    (void)tokenizer.decode({0, 1, 2, -1, 1 << 30}, true);
  });
  return 0;
}
