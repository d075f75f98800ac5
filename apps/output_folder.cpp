// See output_folder.h.
#include "apps/output_folder.h"

#include <algorithm>
#include <vector>

#include <c10/util/Exception.h>

#include "engine/io/path_within.h"

namespace qtrain::apps {
namespace fs = std::filesystem;
namespace {

// The first three names (in order) of what `dir` holds, for the message.
std::string some_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string shown;
  for (size_t i = 0; i < names.size() && i < 3; ++i) shown += (i ? ", " : "") + names[i];
  return names.size() > 3 ? shown + ", ..." : shown;
}

}  // namespace

void check_output_folder(const std::string& command,
                         const fs::path& out,
                         const std::vector<InputFolder>& inputs,
                         bool overwrite) {
  for (const auto& [what, input] : inputs) {
    const bool inside_input = engine::io::path_within(out, input);
    TORCH_CHECK(!inside_input && !engine::io::path_within(input, out),
                "qtrain ",
                command,
                ": --out ",
                out.string(),
                inside_input ? " is or lies inside " : " contains ",
                "the folder it reads (",
                what,
                ": ",
                input.string(),
                "); writing there would destroy the input. Give --out a folder of its own");
  }
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  TORCH_CHECK(fs::is_directory(out, ec),
              "qtrain ",
              command,
              ": --out ",
              out.string(),
              " exists and is not a folder; give --out a folder path");
  TORCH_CHECK(overwrite || fs::is_empty(out, ec),
              "qtrain ",
              command,
              ": --out ",
              out.string(),
              " already holds files (",
              some_entries(out),
              "); give --out a new folder, or pass --overwrite to replace its model files");
}

}  // namespace qtrain::apps
