#!/usr/bin/env bash
# Configures (once) and builds qtrain with ninja and ccache into build/ (or $QTRAIN_BUILD).
# Runs scripts/setup.sh first, so a fresh machine needs nothing else.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${QTRAIN_BUILD:-$root/build}"
"$root/scripts/setup.sh"

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/qtrain/ccache}"
# Precompiled headers are only reused by ccache with these relaxations (ccache manual, "Precompiled headers").
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
# Paths relative to the checkout, so that every clone (CI's included) hits the same cache entries.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR=true

if [ ! -f "$build/build.ninja" ]; then
  echo "[build] configuring $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${QTRAIN_BUILD_TYPE:-RelWithDebInfo}"
fi
# Torch-heavy translation units need ~1.5 GB each: one job per core is the safe default.
jobs="${QTRAIN_JOBS:-$(nproc)}"
echo "[build] building with $jobs jobs"
cmake --build "$build" -j "$jobs" "$@"
