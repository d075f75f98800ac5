#!/usr/bin/env bash
# The demo: builds qtrain (installing what is missing), creates the built-in demo model on first
# use, and fine-tunes it with configs/demo.yaml (QLoRA NF4 + gradient checkpointing on the
# public-domain texts in data/demo). Extra arguments go to `qtrain train` (e.g. --set max_steps=20).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${QTRAIN_BUILD:-$root/build}"
"$root/scripts/build.sh" --target qtrain
qtrain="$build/apps/qtrain"
if [ ! -f "$root/models/demo-llama/config.json" ]; then
  "$qtrain" init-model --arch llama --preset demo --seed 0 --out "$root/models/demo-llama"
fi
"$qtrain" train "$root/configs/demo.yaml" "$@"
