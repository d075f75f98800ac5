// Tests for engine/text/json_depth: the nesting limit, brackets inside strings, and the place
// the message names.
#include "engine/text/json_depth.h"

#include <string>

#include <gtest/gtest.h>

namespace qtrain::engine::text {
namespace {

std::string nested(int levels, const std::string& inner = "1") {
  return std::string(levels, '[') + inner + std::string(levels, ']');
}

TEST(JsonDepth, AcceptsUpToTheLimitAndNamesThePlaceBeyondIt) {
  EXPECT_EQ(json_depth_problem(nested(kMaxJsonDepth)), "");
  EXPECT_EQ(json_depth_problem("{\"a\": [{\"b\": []}], \"c\": {}}"), "");
  EXPECT_EQ(json_depth_problem(nested(kMaxJsonDepth + 1)),
            "line 1, column 257: JSON nested more than 256 levels deep; no real file is, so this one is damaged "
            "(qtrain refuses it)");
  // Objects count as arrays do, and the column restarts on each line: the 257th level is the
  // 256th {"k": on line 2, after 10 characters and 255 times 5.
  std::string text = "{\n  \"deep\": ";
  for (int i = 0; i < kMaxJsonDepth; ++i) text += "{\"k\":";
  EXPECT_EQ(json_depth_problem(text).substr(0, 22), "line 2, column 1286: J");
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  const std::string brackets(kMaxJsonDepth + 10, '[');
  EXPECT_EQ(json_depth_problem("{\"text\": \"" + brackets + "\"}"), "");
  // An escaped quote does not end the string; an escaped backslash before the closing quote does.
  EXPECT_EQ(json_depth_problem("[\"a\\\"" + brackets + "\"]"), "");
  EXPECT_NE(json_depth_problem("[\"a\\\\\"" + brackets + "]"), "");
  // A closing bracket balances an opening one: many shallow siblings are fine.
  std::string siblings = "[";
  for (int i = 0; i < 1000; ++i) siblings += "[[]],";
  EXPECT_EQ(json_depth_problem(siblings + "1]"), "");
}

}  // namespace
}  // namespace qtrain::engine::text
