// The step intervals of evaluation and checkpoints, from eval_steps/save_steps or from axolotl's
// evals_per_epoch/saves_per_epoch once the run's length is known (it depends on the data).
#pragma once

#include <cstdint>

namespace qtrain::engine::train {

// Note [Steps per epoch]
// axolotl turns `saves_per_epoch: n` into the fraction save_steps = 1 / (n * num_epochs) when that
// is below 1 (src/axolotl/utils/config/__init__.py), and transformers turns a fraction into
// ceil(total_steps * fraction) steps (TrainerState.compute_steps), total_steps being the run's
// optimizer steps (max_steps when set). So with max_steps the saves follow max_steps, not the
// epoch. A fraction of exactly 1 (n = 1, one epoch) sets nothing: axolotl then saves at each
// epoch's end (save_strategy "epoch"), and evaluates never (eval_strategy stays "no", so
// `evals_per_epoch: 1` with `num_epochs: 1` evaluates nowhere, as in axolotl). evals_per_epoch
// counts only with held-out rows (val_set_size).

// Steps between two evaluations; 0: none. `eval_steps` wins when set (the config refuses both).
int64_t eval_interval(int64_t eval_steps, int64_t evals_per_epoch, int64_t num_epochs, int64_t total_steps);
// Steps between two checkpoints; 0: at the end only. `steps_per_epoch`: for a fraction of 1.
int64_t save_interval(
    int64_t save_steps, int64_t saves_per_epoch, int64_t num_epochs, int64_t total_steps, int64_t steps_per_epoch);

}  // namespace qtrain::engine::train
