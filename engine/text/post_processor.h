// Post-processors of tokenizer.json (`post_processor`): TemplateProcessing (BOS/EOS and the
// like, for a single sequence), ByteLevel (offsets only) and Sequence. They run on every encode;
// TemplateProcessing adds tokens only when add_special_tokens is set.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>

#include "engine/text/encoding.h"
#include "engine/text/text_error.h"

namespace qtrain::engine::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(Encoding& e, bool add_special_tokens) const = 0;
};

std::unique_ptr<PostProcessor> parse_post_processor(const nlohmann::json& j, const JsonSite& site);

}  // namespace qtrain::engine::text
