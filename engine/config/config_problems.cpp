// See config_problems.h.
#include "engine/config/config_problems.h"

#include "engine/config/yaml_place.h"

namespace qtrain::engine::config {

void Problems::throw_if_any(const std::string& source) const {
  if (messages_.size() == 1) TORCH_CHECK(false, messages_.front());
  TORCH_CHECK(messages_.empty(),
              source,
              ": ",
              messages_.size(),
              " problems in the run config; fix them all before the run:\n  ",
              join(messages_, "\n  "));
}

}  // namespace qtrain::engine::config
