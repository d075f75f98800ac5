// Whether one path is another or lies inside it, as the folders on disk are: the guards that keep
// a writer off what it reads (apps/output_folder) and a resume inside its output_dir
// (engine/train/output_dir) ask the same question.
#pragma once

#include <filesystem>

namespace qtrain::engine::io {

// `p` absolute, the symlinks of its existing part resolved, ".." and "." folded, and no trailing
// separator ("out/" is "out"), so that two spellings of one folder compare equal.
std::filesystem::path resolved_path(const std::filesystem::path& p);

// `inner` is `outer` or lies below it, both taken as resolved_path gives them; whole components
// are compared, so "out2" does not lie inside "out".
bool path_within(const std::filesystem::path& inner, const std::filesystem::path& outer);

}  // namespace qtrain::engine::io
