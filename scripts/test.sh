#!/usr/bin/env bash
# Builds qtrain (installing what is missing) and runs the whole test suite with ctest.
# GPU tests (label `gpu`) run too and skip themselves where no GPU is present.
#   scripts/test.sh [CTEST ARGS]              e.g. scripts/test.sh -L parsers
#   scripts/test.sh --sanitize [CTEST ARGS]   the same under AddressSanitizer + UndefinedBehaviorSanitizer,
#                                             CPU only, in build-sanitize/ (docs/RELIABILITY.md, "Sanitizers");
#                                             with -L parsers it builds only the parser tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# ctest runs nproc tests at once and each computes on nproc OpenMP threads: threads that spin
# while they wait (OpenMP's default) take the cores the other test's threads need. Waiting
# passively changes no result (the thread count is the same) and took the MemoryEstimate and
# MoeSchedule tests from 215 s to 12 s with -j2 on 2 cores (docs/BENCHMARKS.md, "Test time").
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
if [ "${1:-}" != "--sanitize" ]; then
  build="${QTRAIN_BUILD:-$root/build}"
  "$root/scripts/build.sh"
  cd "$build"
  ctest --output-on-failure -j "${QTRAIN_TEST_JOBS:-$(nproc)}" "$@"
  exit
fi
shift
build="${QTRAIN_SANITIZE_BUILD:-$root/build-sanitize}"
# The label `parsers` is qtrain_text_tests alone (tests/CMakeLists.txt): build just that.
# The GPU tests skip themselves without a GPU; built so that ctest finds every executable.
targets=(qtrain_tests qtrain_text_tests qtrain_gpu_tests qtrain)
for a in "$@"; do
  case "$a" in parsers|-Lparsers|--label-regex=parsers) targets=(qtrain_text_tests) ;; esac
done
if [ ! -f "$build/build.ninja" ]; then
  "$root/scripts/setup.sh"
  echo "[test] configuring $build with ASan + UBSan"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQTRAIN_SANITIZE=ON \
    -DQTRAIN_ENABLE_CUDA=OFF >/dev/null
fi
QTRAIN_BUILD="$build" "$root/scripts/build.sh" --target "${targets[@]}"
# libtorch is not instrumented and keeps allocations alive to exit: no leak reports. Any other
# report fails the test that made it.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
cd "$build"
ctest --output-on-failure -j "${QTRAIN_TEST_JOBS:-$(nproc)}" "$@"
