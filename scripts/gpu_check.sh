#!/usr/bin/env bash
# The one-call GPU check: on a machine with an NVIDIA GPU, torch 2.11.0+cu130 as python3's torch,
# the CUDA 13 toolkit, CMake and ninja, but no network and no package installs, it
#   1. unpacks the Debian packages of device-kit/ (scripts/device_kit.sh) into a private prefix
#      and puts the kit's bitsandbytes on PYTHONPATH;
#   2. configures against python3's torch and builds `qtrain` and the GPU tests (nothing else: no
#      CPU tests, no Python fixtures) for this GPU's architecture only;
#   3. runs `ctest -L gpu` (with CUDA_LAUNCH_BLOCKING=1, so a fault names its kernel), and copies
#      the memory plan's planned and measured peaks that MemoryPlanCuda prints into the summary;
#   4. runs the GPU benchmarks in this order, as long as time is left: bench/moe_gpu_step.py (the
#      Gemma 4 26B-A4B's first 6 layers, NF4 under the 24 GiB cap and INT8 uncapped),
#      bench/gpu_train_step.py (Llama-3.2-1B's shapes, side by side with transformers + peft +
#      bitsandbytes), bench/offload_sweep.py; compute-sanitizer over the kernel tests only with
#      QTRAIN_GPU_CHECK_SANITIZER=1 (it instruments torch's kernels too and takes minutes);
# and leaves two files: $OUT/summary.md and $OUT/logs.tgz (every stage's log), since a device
# call brings back at most 8 files. Every stage is time-boxed so that the whole check fits one
# device call (QTRAIN_GPU_CHECK_SECONDS, default 560, under a call's 600 s), and the summary is
# written as it goes: a stage that fails or runs out of time leaves what came before.
#
#     scripts/device_kit.sh                            # here, once: makes device-kit/ (< 64 MiB)
#     run: scripts/gpu_check.sh   carrying device-kit, timeout_s 600   # on the GPU machine
#
# QTRAIN_GPU_CHECK_BENCHMARKS=0 stops after the GPU tests (to check a fix to them in a short call).
#
# Without a GPU every stage that needs one says "skipped: no GPU" and the rest must pass:
# scripts/gpu_rehearsal.sh runs it so on this CPU machine, against a copy of the GPU machine's
# Python packages, with QTRAIN_GPU_CHECK_CPU_BENCH=1 (each benchmark, skipped, also runs its own
# CPU self-check on a tiny model).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/gpu-check-out}"
kit="${QTRAIN_DEVICE_KIT:-$root/device-kit}"
python="$(command -v "${QTRAIN_GPU_CHECK_PYTHON:-python3}")"
build="${QTRAIN_GPU_CHECK_BUILD:-$root/build-gpu}"
prefix="$build/kit-prefix"
budget="${QTRAIN_GPU_CHECK_SECONDS:-560}"
cpu_bench="${QTRAIN_GPU_CHECK_CPU_BENCH:-0}"
started=$SECONDS
rm -rf "$out/logs" "$out/logs.tgz"
mkdir -p "$out/logs"
summary="$out/summary.md"
# One archive of the logs, however the script ends: a device call brings back at most 8 files.
pack_logs() {
  [ -d "$out/logs" ] && tar -czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
}
trap pack_logs EXIT

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
# skip NAME WHY: a stage that cannot run here, with the reason in the summary.
skip() { note "| $1 | skipped: $2 | |"; }

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
for name in ["bitsandbytes", "transformers", "peft", "accelerate", "safetensors", "tokenizers", "numpy"]:
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
  local isolate=() text
  [ "${QTRAIN_GPU_CHECK_ISOLATE:-0}" = 1 ] && isolate=(-DCMAKE_IGNORE_PREFIX_PATH=/usr)
  text=$(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DQTRAIN_PYTHON="$python" -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DQTRAIN_CUDA_ARCHS="$archs" "${isolate[@]}" 2>&1)
  local rc=$?
  echo "$text"
  [ $rc -eq 0 ] || return $rc
  # Without nvcc CMake builds the CPU stand-ins of the kernels, and every kernel test would fail.
  grep -q 'CUDA kernels: ON' <<<"$text" || {
    echo "CMake built no CUDA kernels (no nvcc, or a torch without CUDA): the GPU check needs them"
    return 1
  }
}

# Only qtrain and the GPU tests, going on past a failed edge (-k 0) so that one failure does not
# keep the other from linking.
build_targets() {
  # The compilers' CPU time (user, system) goes into the log: scripts/gpu_rehearsal.sh projects the
  # build onto another machine's cores from it.
  local TIMEFORMAT='build CPU seconds (user system): %U %S'
  time cmake --build "$build" -j "$(nproc)" --target qtrain qtrain_gpu_tests -- -k 0
}

# Fails on a library the loader cannot find. It also logs what Note [libtorch exports
# std::filesystem] (engine/io/remove_tree.h) needs to explain the first GPU run's binding: the
# order of each binary's needed libraries, its std::filesystem imports without a libstdc++ version
# (bound to libtorch's copy at link time), and the link line.
missing_libraries() {
  local bad=0
  for bin in "$build/apps/qtrain" "$build/tests/qtrain_gpu_tests"; do
    if ldd "$bin" | grep 'not found'; then bad=1; fi
    echo "$bin: needed $(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | head -4 | tr '\n' ' ')"
    local imports
    imports=$(objdump -T "$bin" | grep 'UND.*St10filesystem')
    echo "$bin: std::filesystem imports without a version: $(grep -vc GLIBCXX <<<"$imports") of $(wc -l <<<"$imports")"
  done
  (cd "$build" && ninja -t commands apps/qtrain | tail -1)
  return $bad
}

gpu_tests() {
  # Verbose: the log keeps what passing tests print too (MemoryPlanCuda's planned and measured peaks).
  cd "$build" && CUDA_LAUNCH_BLOCKING=1 ctest -L gpu -V --timeout 300
}

sanitizer() {
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$build/tests/qtrain_gpu_tests" --gtest_filter='KbitCuda.*:Int8Cuda.*' || return 1
  done
}

: >"$summary"
note "# qtrain GPU check, $(date -u +%Y-%m-%d\ %H:%M) UTC"
note ""
export PYTHONPATH="$kit/python${PYTHONPATH:+:$PYTHONPATH}"
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

export root kit python build prefix archs
export -f unpack_kit configure build_targets missing_libraries gpu_tests sanitizer
built=0
stage unpack-kit 60 unpack_kit &&
  stage configure 120 configure &&
  stage build "${QTRAIN_GPU_CHECK_BUILD_SECONDS:-330}" build_targets &&
  stage libraries 10 missing_libraries &&
  built=1
if [ $built = 1 ]; then
  # Without a GPU the tests still run: each skips itself, which proves the binary starts.
  stage gpu-tests 150 gpu_tests
else
  skip gpu-tests "the build did not complete (${failures[*]}: see its log)"
fi
tests_line=$(grep -h -E 'tests passed|No tests were found' "$out/logs/gpu-tests.log" 2>/dev/null | tail -1)
plan_lines=$(grep -h -o '\[memory plan\].*' "$out/logs/gpu-tests.log" 2>/dev/null)

models="${QTRAIN_GPU_CHECK_MODELS:-/tmp/qtrain-bench-models}"
preset="${QTRAIN_GPU_CHECK_PRESET:-llama3.2-1b}"
benchmarks=(moe-gpu-step gpu-train-step offload-sweep)
if [ $built = 0 ]; then
  for b in "${benchmarks[@]}"; do skip "$b" "the build did not complete"; done
elif [ "${QTRAIN_GPU_CHECK_BENCHMARKS:-1}" = 0 ]; then
  for b in "${benchmarks[@]}"; do skip "$b" "QTRAIN_GPU_CHECK_BENCHMARKS=0"; done
elif [ "$has_gpu" = 1 ]; then
  stage moe-gpu-step 240 "$python" "$root/bench/moe_gpu_step.py" --build "$build" --layers 6 \
    --seq 2048 --steps 6 --runs nf4,int8-all --models "$models"
  stage gpu-train-step 200 "$python" "$root/bench/gpu_train_step.py" --build "$build" --preset "$preset" \
    --seq 2048 --steps 8 --models "$models"
  stage offload-sweep 150 "$python" "$root/bench/offload_sweep.py" --build "$build" --preset "$preset" \
    --seq 2048 --steps 6 --ks 0,8,all --models "$models"
elif [ "$cpu_bench" = 1 ]; then
  # Each benchmark's own CPU self-check on a tiny model: the scripts and the reference stack they
  # import run as they will on the GPU machine; the numbers mean nothing.
  for b in "${benchmarks[@]}"; do skip "$b" "no GPU"; done
  stage moe-gpu-step-on-cpu 240 "$python" "$root/bench/moe_gpu_step.py" --build "$build" --preset tiny-moe \
    --device cpu --seq 128 --steps 4 --models "$models"
  stage gpu-train-step-on-cpu 200 "$python" "$root/bench/gpu_train_step.py" --build "$build" --preset tiny \
    --device cpu --steps 3 --models "$models"
  stage offload-sweep-on-cpu 150 "$python" "$root/bench/offload_sweep.py" --build "$build" --preset tiny \
    --device cpu --ks 0,1,2 --steps 4 --models "$models"
else
  for b in "${benchmarks[@]}"; do skip "$b" "no GPU"; done
fi
if [ "${QTRAIN_GPU_CHECK_SANITIZER:-0}" != 1 ]; then
  skip compute-sanitizer "only with QTRAIN_GPU_CHECK_SANITIZER=1"
elif [ "$has_gpu" != 1 ]; then
  skip compute-sanitizer "no GPU"
elif ! command -v compute-sanitizer >/dev/null; then
  skip compute-sanitizer "compute-sanitizer is not on PATH"
else
  stage compute-sanitizer 120 sanitizer
fi

skipped=$(grep -c -- '\*\*\*Skipped' "$out/logs/gpu-tests.log" 2>/dev/null)
note ""
note "GPU tests: ${tests_line:-none ran}; ${skipped:-0} skipped"
if [ -n "$plan_lines" ]; then
  note ""
  note "## The memory plan against the allocator's peak (MemoryPlanCuda)"
  echo "$plan_lines" | tee -a "$summary"
fi
for log in "${benchmarks[@]}"; do
  if [ -f "$out/logs/$log.log" ] && [[ ! " ${failures[*]} " =~ " $log " ]]; then
    note ""
    note "## $log"
    grep -v -E '^\[bench\]' "$out/logs/$log.log" | tee -a "$summary"
  fi
done
for f in "${failures[@]}"; do
  note ""
  note "## $f failed: the end of its log (logs.tgz holds it whole)"
  note '```'
  tail -n 40 "$out/logs/$f.log" | tee -a "$summary"
  note '```'
done
note ""
note "total: $((SECONDS - started)) s"
[ ${#failures[@]} -eq 0 ]
