#!/usr/bin/env bash
# The one-call GPU check: on a machine with an NVIDIA GPU, torch 2.11.0+cu130 as python3's torch,
# the CUDA 13 toolkit, CMake and ninja, but no network and no package installs, it
#   1. unpacks the Debian packages of device-kit/ (scripts/device_kit.sh) into a private prefix
#      and puts the kit's bitsandbytes on PYTHONPATH;
#   2. configures against python3's torch and builds qtrain and the GPU tests for this GPU's
#      architecture only;
#   3. runs `ctest -L gpu` (with CUDA_LAUNCH_BLOCKING=1, so a fault names its kernel), and copies
#      the memory plan's planned and measured peaks that MemoryPlanCuda prints into the summary;
#   4. runs the GPU benchmarks: bench/moe_gpu_step.py first (the Gemma 4 26B-A4B's first 6
#      layers, NF4 under the 24 GiB cap and INT8 uncapped: the open MoE issue's target), then
#      bench/gpu_train_step.py and bench/offload_sweep.py on a model with Llama-3.2-1B's shapes,
#      and compute-sanitizer over the kernel tests if time is left;
# and writes one summary, $OUT/summary.md, with the logs beside it in $OUT/logs/. Every stage is
# time-boxed so that the whole check fits one 10-minute device call, and the summary is written as
# it goes: a stage that fails or runs out of time leaves what came before.
#
#     scripts/device_kit.sh                            # here, once: makes device-kit/ (< 64 MiB)
#     run: scripts/gpu_check.sh   carrying device-kit  # on the GPU machine
#
# The build and the tests may take most of one call. A second call made at once, while the machine
# is still warm (its build folder and models are kept), can skip the tests and go straight to the
# benchmarks, the build being a no-op then:
#     run: QTRAIN_GPU_CHECK_TESTS=0 scripts/gpu_check.sh   carrying device-kit
#
# Without a GPU it builds and runs the GPU tests, which skip, and skips the benchmarks: that is how
# the script itself is checked on a CPU machine:
#     QTRAIN_GPU_CHECK_PYTHON=~/.cache/qtrain/venv/bin/python QTRAIN_GPU_CHECK_ISOLATE=1 \
#       QTRAIN_GPU_CHECK_SECONDS=3000 QTRAIN_GPU_CHECK_BUILD_SECONDS=2400 scripts/gpu_check.sh
# (ISOLATE keeps CMake from finding the system's own copies of the kit's libraries, so the build
# proves the kit complete; 2 cores need longer than the 16 of the GPU machine).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/gpu-check-out}"
kit="${QTRAIN_DEVICE_KIT:-$root/device-kit}"
python="$(command -v "${QTRAIN_GPU_CHECK_PYTHON:-python3}")"
build="${QTRAIN_GPU_CHECK_BUILD:-$root/build-gpu}"
run_tests="${QTRAIN_GPU_CHECK_TESTS:-1}"
prefix="$build/kit-prefix"
budget="${QTRAIN_GPU_CHECK_SECONDS:-570}"
started=$SECONDS
mkdir -p "$out/logs"
summary="$out/summary.md"

left() { echo $((budget - (SECONDS - started))); }
note() { echo "$*" | tee -a "$summary"; }

# stage NAME SECONDS COMMAND...: runs COMMAND with its output in logs/NAME.log, at most SECONDS
# (or what is left of the budget), and records the outcome in the summary.
stage() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  if [ "$limit" -le 5 ]; then
    note "| $name | not run: the time budget is spent | |"
    return 124
  fi
  echo "[gpu-check] $name (at most ${limit}s)"
  # A fresh bash runs the command, so that it can be one of the functions below (exported).
  timeout --kill-after=10 "$limit" bash -c '"$@"' stage "$@" >"$out/logs/$name.log" 2>&1
  rc=$?
  local verdict="ok"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && verdict="timed out after ${limit}s"
  [ $rc -ne 0 ] && [ "$verdict" = ok ] && verdict="FAILED (exit $rc)"
  note "| $name | $verdict | $((SECONDS - t0)) |"
  if [ $rc -ne 0 ]; then
    failures+=("$name")
  fi
  return $rc
}
failures=()

unpack_kit() {
  [ -d "$kit/debs" ] || { echo "$kit/debs is missing: run scripts/device_kit.sh and carry device-kit"; return 1; }
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in "$kit"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$prefix" || return 1
    else
      # A .deb is an ar archive whose data.tar.* member holds the files.
      local member
      member=$(cd "$prefix" && ar t "$deb" | grep '^data\.tar') || return 1
      (cd "$prefix" && ar p "$deb" "$member" | tar -x -a -f - 2>/dev/null ||
        ar p "$deb" "$member" | tar -x --xz -f - || ar p "$deb" "$member" | tar -x --zstd -f -) || return 1
    fi
    echo "unpacked $(basename "$deb")"
  done
}

environment() {
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader
  else
    echo "nvidia-smi: not found"
  fi
  "$python" - 2>/dev/null <<'PY'
import importlib, platform, torch
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"cuda available: {torch.cuda.is_available()}")
for name in ["bitsandbytes", "transformers", "peft", "accelerate", "safetensors"]:
    try:
        print(f"{name} {importlib.import_module(name).__version__}")
    except Exception as e:  # reported, not fatal: the stages that need it fail with their own log
        print(f"{name}: not importable ({type(e).__name__}: {e})")
PY
  for tool in g++ cmake ninja; do echo "$tool: $($tool --version 2>&1 | head -1)"; done
  echo "nvcc: $("$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version 2>&1 | grep -i release || echo 'not found')"
  echo "cores: $(nproc), memory: $(free -g | awk '/Mem:/ {print $2}') GiB, disk free: $(df -h "$root" | awk 'NR==2 {print $4}')"
}

configure() {
  local isolate=()
  [ "${QTRAIN_GPU_CHECK_ISOLATE:-0}" = 1 ] && isolate=(-DCMAKE_IGNORE_PREFIX_PATH=/usr)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DQTRAIN_PYTHON="$python" -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DQTRAIN_CUDA_ARCHS="$archs" "${isolate[@]}"
}

missing_libraries() {
  local bad=0
  for bin in "$build/apps/qtrain" "$build/tests/qtrain_gpu_tests"; do
    if ldd "$bin" | grep 'not found'; then bad=1; fi
  done
  return $bad
}

gpu_tests() {
  # Verbose: the log keeps what passing tests print too (MemoryPlanCuda's planned and measured peaks).
  cd "$build" && CUDA_LAUNCH_BLOCKING=1 ctest -L gpu -V --timeout 300
}

sanitizer() {
  local fixtures="$build/fixtures"
  for tool in memcheck racecheck; do
    QTRAIN_FIXTURES="$fixtures" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$build/tests/qtrain_gpu_tests" --gtest_filter='KbitCuda.*:Int8Cuda.*' || return 1
  done
}

: >"$summary"
note "# qtrain GPU check, $(date -u +%Y-%m-%d\ %H:%M) UTC"
note ""
environment >"$out/logs/environment.log" 2>&1
note '```'
tee -a "$summary" <"$out/logs/environment.log"
note '```'
has_gpu=$("$python" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
archs="90-real"
if [ "$has_gpu" = 1 ]; then
  archs="$("$python" -c 'import torch; a, b = torch.cuda.get_device_capability(); print(f"{a}{b}-real")')"
fi
note ""
note "| stage | result | seconds |"
note "|---|---|---|"

export PYTHONPATH="$kit/python${PYTHONPATH:+:$PYTHONPATH}"
export root kit python build prefix archs
export -f unpack_kit configure missing_libraries gpu_tests sanitizer
jobs="$(nproc)"
stage unpack-kit 60 unpack_kit &&
  stage configure 120 configure &&
  stage build "${QTRAIN_GPU_CHECK_BUILD_SECONDS:-330}" cmake --build "$build" -j "$jobs" --target qtrain qtrain_gpu_tests &&
  stage libraries 10 missing_libraries &&
  if [ "$run_tests" = 0 ]; then note "| gpu-tests | skipped: QTRAIN_GPU_CHECK_TESTS=0 | |"; else stage gpu-tests 150 gpu_tests; fi
tests_line=$(grep -h -E 'tests passed|No tests were found' "$out/logs/gpu-tests.log" 2>/dev/null | tail -1)
plan_lines=$(grep -h -o '\[memory plan\].*' "$out/logs/gpu-tests.log" 2>/dev/null)

if [ "$has_gpu" = 1 ] && [ -x "$build/apps/qtrain" ]; then
  models="${QTRAIN_GPU_CHECK_MODELS:-/tmp/qtrain-bench-models}"
  preset="${QTRAIN_GPU_CHECK_PRESET:-llama3.2-1b}"
  stage moe-gpu-step 240 "$python" "$root/bench/moe_gpu_step.py" --build "$build" --layers 6 \
    --seq 2048 --steps 6 --runs nf4,int8-all --models "$models"
  stage gpu-train-step 200 "$python" "$root/bench/gpu_train_step.py" --build "$build" --preset "$preset" \
    --seq 2048 --steps 8 --models "$models"
  stage offload-sweep 150 "$python" "$root/bench/offload_sweep.py" --build "$build" --preset "$preset" \
    --seq 2048 --steps 6 --ks 0,8,all --models "$models"
  [ -x "$build/tests/qtrain_gpu_tests" ] && command -v compute-sanitizer >/dev/null &&
    stage compute-sanitizer 120 sanitizer
else
  note "| benchmarks | skipped: no GPU | |"
fi

skipped=$(grep -c -- '\*\*\*Skipped' "$out/logs/gpu-tests.log" 2>/dev/null)
note ""
note "GPU tests: ${tests_line:-none ran}; ${skipped:-0} skipped"
if [ -n "$plan_lines" ]; then
  note ""
  note "## The memory plan against the allocator's peak (MemoryPlanCuda)"
  echo "$plan_lines" | tee -a "$summary" >/dev/null
fi
for log in moe-gpu-step gpu-train-step offload-sweep; do
  if [ -f "$out/logs/$log.log" ] && [[ ! " ${failures[*]} " =~ " $log " ]]; then
    note ""
    note "## $log"
    grep -v -E '^\[bench\]' "$out/logs/$log.log" | tee -a "$summary" >/dev/null
  fi
done
for f in "${failures[@]}"; do
  note ""
  note "## $f failed: the end of logs/$f.log"
  note '```'
  tail -n 40 "$out/logs/$f.log" | tee -a "$summary" >/dev/null
  note '```'
done
note ""
note "total: $((SECONDS - started)) s"
[ ${#failures[@]} -eq 0 ]
