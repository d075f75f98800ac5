// See rank_log.h.
#include "engine/dist/rank_log.h"

#include <memory>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace qtrain::engine::dist {

// Note [Two fmt libraries]
// spdlog formats with the system's fmt (Debian's libspdlog is built against libfmt 9), while the
// torch wheel puts its own, newer fmt headers on the include path of everything that uses
// libtorch. A file that includes spdlog beside torch's include directories would compile
// spdlog's templates against the wrong fmt. So this file, the one that includes spdlog, is
// built in a library of its own without torch (qtrain_log, engine/CMakeLists.txt), and its
// header speaks plain strings.

std::string rank_tag(const DistEnv& env) {
  return env.world_size > 1 ? "[rank" + std::to_string(env.rank) + "]: " : "";
}

void start_rank_log(const DistEnv& env, std::ostream* out) {
  spdlog::sink_ptr sink;
  if (out != nullptr) {
    sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*out, /*force_flush=*/true);
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  }
  auto logger = std::make_shared<spdlog::logger>("qtrain", std::move(sink));
  // A tag holds no '%', which spdlog's patterns would read as a flag.
  logger->set_pattern(rank_tag(env) + "qtrain: %l: %v");
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
}

void log_warning(const std::string& message) {
  spdlog::warn("{}", message);
}

void log_error(const std::string& message) {
  spdlog::error("{}", message);
}

}  // namespace qtrain::engine::dist
