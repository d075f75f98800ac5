// What a run finds in its output_dir before it writes anything: the checkpoint it resumes from
// (resume_from_checkpoint, auto_resume_from_checkpoints), and for a run that does not continue
// the one there, the refusal to mix with it. A new run in a used output_dir would interleave its
// checkpoints with the old run's, and save_total_limit would then delete the new run's own
// checkpoints and keep the old ones; Hugging Face's Trainer refuses it too unless
// overwrite_output_dir is set.
#pragma once

#include <cstdio>
#include <filesystem>

#include "engine/config/run_config.h"

namespace qtrain::engine::train {

// The checkpoint to resume from (empty: start from scratch):
// - resume_from_checkpoint: PATH: that folder;
// - resume_from_checkpoint: true: the newest checkpoint-N in output_dir; none is an error (HF
//   refuses it too), naming output_dir and the fix;
// - auto_resume_from_checkpoints: true (axolotl): the newest, or none; with none, the logs of an
//   attempt that died before its first checkpoint (metrics.jsonl, runs/) are replaced, not refused.
// A run that does not resume from inside output_dir errors when output_dir holds an earlier run
// (checkpoint-N folders, an adapter, metrics.jsonl), unless overwrite_output_dir is true: then
// those files are removed first, and a line on `log` says so.
std::filesystem::path prepare_output_dir(const config::RunConfig& c, std::FILE* log);

}  // namespace qtrain::engine::train
