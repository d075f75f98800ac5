// The process log: warnings and errors as "qtrain: <level>: ...", behind PyTorch's rank tag in a
// run of several ranks, and libtorch's TORCH_WARN taking the same way.
#include "engine/dist/rank_log.h"

#include <sstream>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "engine/dist/warnings_to_log.h"

namespace qtrain::engine::dist {
namespace {

DistEnv ranks(int64_t rank, int64_t world) {
  DistEnv e;
  e.rank = rank;
  e.world_size = world;
  return e;
}

TEST(RankLog, ARunOfSeveralRanksTagsEveryLineWithItsRank) {
  EXPECT_EQ(rank_tag(ranks(0, 1)), "");
  EXPECT_EQ(rank_tag(ranks(1, 2)), "[rank1]: ");
  std::ostringstream out;
  c10::WarningUtils::WarningHandlerGuard restore(c10::WarningUtils::get_warning_handler());
  start_rank_log(ranks(1, 2), &out);
  send_torch_warnings_to_log();
  log_error("data.jsonl line 7: not JSON");
  log_warning("cfg.yaml: ignores wandb_project");
  TORCH_WARN("TensorBoard events were lost: disk full");
  EXPECT_EQ(out.str(),
            "[rank1]: qtrain: error: data.jsonl line 7: not JSON\n"
            "[rank1]: qtrain: warning: cfg.yaml: ignores wandb_project\n"
            "[rank1]: qtrain: warning: TensorBoard events were lost: disk full\n");
  std::ostringstream alone;
  start_rank_log(ranks(0, 1), &alone);
  log_error("a 50% cut");  // a '%' in a message is text, not a pattern flag
  EXPECT_EQ(alone.str(), "qtrain: error: a 50% cut\n");
  start_rank_log(ranks(0, 1));  // stderr again, for the tests that follow
}

}  // namespace
}  // namespace qtrain::engine::dist
