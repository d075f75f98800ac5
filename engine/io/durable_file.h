// Writing files so that a crash (power loss, kill -9) never leaves a torn one: contents are
// flushed before they count, renames are made durable by flushing the folder. Shared by every
// writer of run outputs (HF folders, PEFT adapters, checkpoints).
#pragma once

#include <filesystem>
#include <string_view>

namespace qtrain::engine::io {

// Creates or truncates `path`, writes `data` and flushes it to disk.
void write_file_synced(const std::filesystem::path& path, std::string_view data);
// A rename or a new entry in `dir` is durable only once the folder itself is flushed.
void fsync_dir(const std::filesystem::path& dir);
// Writes "<path>.tmp", flushes it and renames it over `path`: readers see the old file or the
// new one, never a part.
void write_file_atomic(const std::filesystem::path& path, std::string_view data);

}  // namespace qtrain::engine::io
