#!/usr/bin/env bash
# Builds qtrain (installing what is missing) and runs the whole test suite with ctest.
# GPU tests (label `gpu`) run too and skip themselves where no GPU is present.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${QTRAIN_BUILD:-$root/build}"
"$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure -j "${QTRAIN_TEST_JOBS:-$(nproc)}" "$@"
