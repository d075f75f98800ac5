#!/usr/bin/env bash
# The demo: builds qtrain (installing what is missing) and runs its main job on the built-in
# default. Until the trainer lands this is `qtrain quant-report`: quantize a model-sized weight
# (4096 x 14336, one Llama-3-8B MLP projection) to NF4, NF4 with double quant, FP4 and INT8, and
# report the error, the size and the speed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${QTRAIN_BUILD:-$root/build}"
"$root/scripts/build.sh" --target qtrain
"$build/apps/qtrain" quant-report "$@"
