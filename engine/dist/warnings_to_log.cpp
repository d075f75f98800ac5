// See warnings_to_log.h.
#include "engine/dist/warnings_to_log.h"

#include <c10/util/Exception.h>

#include "engine/dist/rank_log.h"

namespace qtrain::engine::dist {
namespace {

class WarningsToLog final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& w) override { log_warning(w.msg()); }
};

}  // namespace

void send_torch_warnings_to_log() {
  static WarningsToLog handler;
  c10::WarningUtils::set_warning_handler(&handler);
}

}  // namespace qtrain::engine::dist
