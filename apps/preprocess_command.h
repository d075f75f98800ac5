// `qtrain preprocess CONFIG.yaml --out FILE.jsonl`: the run's training samples as the trainer
// would see them before shuffling and packing, one {"input_ids", "labels"} object per line, to
// check what a dataset type trains (see engine/train/training_data.h).
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_preprocess_command(CLI::App& app);

}  // namespace qtrain::apps
