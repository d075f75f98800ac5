// torchrun's variables as engine/dist reads them: a process without them is a run of one, and a
// half-set or contradictory set is refused by name.
#include "engine/dist/dist_env.h"

#include <map>

#include <gtest/gtest.h>

#include "tests/expect_error.h"

namespace qtrain::engine::dist {
namespace {

DistEnv from(const std::map<std::string, std::string>& vars) {
  return dist_env_from([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(DistEnv, NoVariablesIsARunOfOne) {
  const auto e = from({});
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(from({{"WORLD_SIZE", "1"}, {"RANK", "0"}}).world_size, 1);
}

TEST(DistEnv, ReadsTorchrunsVariables) {
  // As torchrun --no-python --nproc-per-node 2 sets them for its second child.
  const auto e = from({{"RANK", "3"},
                       {"WORLD_SIZE", "4"},
                       {"LOCAL_RANK", "1"},
                       {"LOCAL_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "10.0.0.1"},
                       {"MASTER_PORT", "29640"},
                       {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                       {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29640);
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.restart_count, 2);
  EXPECT_FALSE(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}).agent_store);
}

TEST(DistEnv, IncompleteOrContradictoryVariablesAreRefusedByName) {
  test::expect_error([] { from({{"WORLD_SIZE", "2"}}); }, "WORLD_SIZE=2 but RANK is unset");
  test::expect_error([] { from({{"WORLD_SIZE", "2"}, {"RANK", "2"}}); }, "RANK=2 is not below WORLD_SIZE=2");
  test::expect_error([] { from({{"WORLD_SIZE", "two"}}); }, "WORLD_SIZE=two is not a non-negative integer");
  test::expect_error([] { from({{"WORLD_SIZE", "2"}, {"RANK", "1"}}); }, "MASTER_ADDR is unset");
  test::expect_error([] { from({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "h"}}); }, "MASTER_PORT is unset");
  test::expect_error(
      [] {
        from({{"WORLD_SIZE", "2"},
              {"RANK", "1"},
              {"MASTER_ADDR", "h"},
              {"MASTER_PORT", "1"},
              {"LOCAL_RANK", "2"},
              {"LOCAL_WORLD_SIZE", "2"}});
      },
      "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
}

}  // namespace
}  // namespace qtrain::engine::dist
