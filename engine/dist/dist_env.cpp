// See dist_env.h.
#include "engine/dist/dist_env.h"

#include <cstdlib>
#include <optional>

#include <c10/util/Exception.h>

namespace qtrain::engine::dist {
namespace {

constexpr const char* kHowToStart = "start the ranks with torchrun or qtrain launch (see docs/DISTRIBUTED.md)";

std::optional<int64_t> integer(const std::function<const char*(const char*)>& lookup, const char* name) {
  const char* v = lookup(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  TORCH_CHECK(*end == '\0' && x >= 0, name, "=", v, " is not a non-negative integer; ", kHowToStart);
  return x;
}

}  // namespace

DistEnv dist_env_from(const std::function<const char*(const char*)>& lookup) {
  DistEnv e;
  e.world_size = integer(lookup, "WORLD_SIZE").value_or(1);
  TORCH_CHECK(e.world_size >= 1, "WORLD_SIZE=0 is not a world; ", kHowToStart);
  if (e.world_size == 1) return e;
  const auto rank = integer(lookup, "RANK");
  TORCH_CHECK(rank, "WORLD_SIZE=", e.world_size, " but RANK is unset; ", kHowToStart);
  e.rank = *rank;
  TORCH_CHECK(e.rank < e.world_size, "RANK=", e.rank, " is not below WORLD_SIZE=", e.world_size, "; ", kHowToStart);
  e.local_rank = integer(lookup, "LOCAL_RANK").value_or(0);
  e.local_world_size = integer(lookup, "LOCAL_WORLD_SIZE").value_or(e.world_size);
  TORCH_CHECK(e.local_rank < e.local_world_size,
              "LOCAL_RANK=",
              e.local_rank,
              " is not below LOCAL_WORLD_SIZE=",
              e.local_world_size,
              "; ",
              kHowToStart);
  const char* addr = lookup("MASTER_ADDR");
  TORCH_CHECK(addr != nullptr && *addr != '\0',
              "WORLD_SIZE=",
              e.world_size,
              " but MASTER_ADDR is unset; set it to rank 0's host name or address, or ",
              kHowToStart);
  e.master_addr = addr;
  const auto port = integer(lookup, "MASTER_PORT");
  TORCH_CHECK(port && *port > 0 && *port < 65536,
              "WORLD_SIZE=",
              e.world_size,
              " but MASTER_PORT is ",
              port ? std::to_string(*port) : std::string("unset"),
              "; set it to a free TCP port on rank 0's host (1..65535), or ",
              kHowToStart);
  e.master_port = static_cast<int>(*port);
  const char* agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store =
      agent != nullptr && (std::string(agent) == "True" || std::string(agent) == "true" || std::string(agent) == "1");
  e.restart_count = integer(lookup, "TORCHELASTIC_RESTART_COUNT").value_or(0);
  return e;
}

DistEnv dist_env() {
  return dist_env_from([](const char* name) { return std::getenv(name); });
}

}  // namespace qtrain::engine::dist
