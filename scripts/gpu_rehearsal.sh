#!/usr/bin/env bash
# Rehearses the one-call GPU check (scripts/gpu_check.sh) on this CPU machine, as the device tool
# will run it, so that the first real GPU call has already been through every stage but the GPU:
#   - a Python 3.12 virtual environment with the GPU machine's packages
#     (scripts/requirements-gpu-machine.txt; at ~/.cache/qtrain/rehearsal-venv), first on PATH as
#     python3, as there;
#   - device-kit/ made by scripts/device_kit.sh, and a copy of what a device call copies: the
#     tracked and untracked, not ignored, files of the checkout, plus the carried device-kit;
#   - no network (its own network namespace), an empty HOME (so nothing of ~/.cache/qtrain is
#     found), the benchmarks' models made afresh as on a new machine, CMake kept from /usr's
#     copies of the kit's libraries (QTRAIN_GPU_CHECK_ISOLATE), and no ccache, so the build takes
#     the CPU time it will take there;
#   - nvcc 13.0 and the check's CUDA architecture (90-real, an H100's) as on the GPU machine;
#   - each benchmark, skipped for want of a GPU, also runs its own CPU self-check on a tiny model
#     (QTRAIN_GPU_CHECK_CPU_BENCH: stages NAME-on-cpu), so the scripts and the reference stack
#     they import run under the GPU machine's versions.
# Then it checks what came back: at most 8 files, each at most 16 MiB, at most two folders deep;
# every stage ok or "skipped: no GPU" (or skipped for its flag); every header and shared library
# of the kit's packages taken from the kit; and it prints each stage's time here and projected
# onto the GPU machine's 16 cores, with the time left there for the GPU stages.
#
#     scripts/gpu_rehearsal.sh            # ~10 minutes on 2 cores, most of it the cold build
#     QTRAIN_REHEARSAL_CCACHE=1 scripts/gpu_rehearsal.sh   # reuse ccache: faster, build time not projected
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
home="${QTRAIN_HOME:-$HOME/.cache/qtrain}"
venv="$home/rehearsal-venv"
requirements="$root/scripts/requirements-gpu-machine.txt"
work="${QTRAIN_REHEARSAL_DIR:-/tmp/qtrain-rehearsal}"
gpu_cores=16
budget=560                   # gpu_check.sh's default: what one device call gives it
say() { echo "[rehearsal] $*"; }

# The GPU machine's Python, installed while there is a network; the check itself runs without.
if [ ! -x "$venv/bin/python" ]; then
  py="$(command -v python3.12 || true)"
  [ -n "$py" ] && ! "$py" --version >/dev/null 2>&1 && py=""
  if [ -z "$py" ] && command -v pyenv >/dev/null; then
    py="$(pyenv root)/versions/$(pyenv versions --bare | grep -E '^3\.12' | tail -1)/bin/python3.12"
  fi
  [ -x "$py" ] || { say "no Python 3.12 found (python3.12 or pyenv's 3.12): the GPU machine's is 3.12"; exit 1; }
  say "creating $venv with $("$py" --version)"
  "$py" -m venv "$venv"
fi
stamp="$venv/.qtrain-requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing the GPU machine's Python packages into $venv:"
  grep -v '^#' "$requirements" | sed 's/^/[rehearsal]   /'
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$requirements"
  echo "$want" >"$stamp"
fi

"$root/scripts/device_kit.sh"

say "copying the working tree as a device call does, into $work/tree"
rm -rf "$work"
mkdir -p "$work/tree" "$work/out" "$work/home"
(cd "$root" && git ls-files -co --exclude-standard -z |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -cf - -T -) | tar -xf - -C "$work/tree"
cp -r "$root/device-kit" "$work/tree/device-kit"

ccache_env=(CCACHE_DISABLE=1)
if [ "${QTRAIN_REHEARSAL_CCACHE:-0}" = 1 ]; then
  ccache_env=(CCACHE_DIR="$home/ccache" CCACHE_BASEDIR="$work/tree" CCACHE_NOHASHDIR=true
    CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime")
fi
say "running scripts/gpu_check.sh with no network ($(nproc) cores here, $gpu_cores there)"
started=$SECONDS
set +e
unshare --net env -i PATH="$venv/bin:/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin" HOME="$work/home" \
  TERM="${TERM:-dumb}" OUT="$work/out" "${ccache_env[@]}" \
  QTRAIN_GPU_CHECK_ISOLATE=1 QTRAIN_GPU_CHECK_CPU_BENCH=1 QTRAIN_GPU_CHECK_MODELS="$work/models" \
  QTRAIN_GPU_CHECK_SECONDS=5400 QTRAIN_GPU_CHECK_BUILD_SECONDS=3600 \
  bash -c 'ip link set lo up 2>/dev/null; cd "$0" && scripts/gpu_check.sh' "$work/tree"
check_rc=$?
set -e
wall=$((SECONDS - started))

problems=()
summary="$work/out/summary.md"

# What a device call brings back.
files=$(find "$work/out" -type f | wc -l)
[ "$files" -le 8 ] || problems+=("$files files in OUT; a device call returns at most 8")
while IFS= read -r f; do
  problems+=("$f is over the 16 MiB a device call returns")
done < <(find "$work/out" -type f -size +16M)
while IFS= read -r d; do
  problems+=("$d is more than two folders deep")
done < <(find "$work/out" -mindepth 3 -type d)
[ -f "$summary" ] || problems+=("no summary.md")
[ -f "$work/out/logs.tgz" ] || problems+=("no logs.tgz")

# Every stage ok, or skipped for a reason that holds here.
while IFS='|' read -r _ name verdict _; do
  name=$(xargs <<<"$name")
  verdict=$(xargs <<<"$verdict")
  case "$verdict" in
    ok | "skipped: no GPU" | "skipped: only with QTRAIN_GPU_CHECK_SANITIZER=1") ;;
    *) problems+=("stage $name: $verdict") ;;
  esac
done < <(grep -E '^\| [a-z-]+ \|' "$summary" 2>/dev/null | grep -v '^| stage |')
[ "$check_rc" -eq 0 ] || problems+=("gpu_check.sh exited $check_rc")

# The kit's libraries came from the kit: no header of theirs from /usr/include, no library of
# theirs from /usr/lib. The GPU machine has neither.
build="$work/tree/build-gpu"
if [ -f "$build/build.ninja" ]; then
  system_headers=$(ninja -C "$build" -t deps 2>/dev/null |
    grep -E '^ +/usr/include/(yaml-cpp|spdlog|fmt|gtest|gmock|benchmark|nlohmann|CLI|onig|utf8proc)' | sort -u || true)
  [ -z "$system_headers" ] || problems+=("headers from /usr/include, not the kit: $(head -3 <<<"$system_headers" | xargs)")
  for bin in "$build/apps/qtrain" "$build/tests/qtrain_gpu_tests"; do
    [ -x "$bin" ] || continue
    system_libs=$(ldd "$bin" | grep -E 'lib(yaml-cpp|spdlog|fmt|onig|utf8proc|gtest|gmock|benchmark)' |
      grep -v "$build/kit-prefix" || true)
    [ -z "$system_libs" ] || problems+=("$(basename "$bin") loads a kit library from the system: $(xargs <<<"$system_libs")")
  done
fi

# Stage times, and the projection onto the GPU machine. The build: its compilers' CPU time spread
# over 16 cores, plus its longest single compile (the chain of precompiled header and link that
# cannot spread); CPU time, unlike wall time here, does not grow when something else shares these
# 2 cores. The rest runs as here. gpu-tests and the CPU self-checks stand in for GPU stages.
build_cpu=""
mkdir -p "$work/logs" && tar -xzf "$work/out/logs.tgz" -C "$work" 2>/dev/null
if [ -f "$work/logs/build.log" ]; then
  build_cpu=$(grep -o 'build CPU seconds (user system): .*' "$work/logs/build.log" | tail -1 |
    awk '{ printf "%d", $(NF - 1) + $NF }' || true)
fi
longest=0
[ -f "$build/.ninja_log" ] && longest=$(awk 'NR > 1 { d = ($2 - $1) / 1000; if (d > m) m = d } END { printf "%d", m }' "$build/.ninja_log")
echo
say "stage times (s): here on $(nproc) cores, projected on $gpu_cores"
printf '  %-28s %8s %10s\n' stage here projected
projected_total=0 staged=0
while IFS='|' read -r _ name verdict seconds _; do
  name=$(xargs <<<"$name")
  seconds=$(xargs <<<"$seconds")
  [ -n "$seconds" ] || continue
  case "$name" in
    build) proj=$((${build_cpu:-$((seconds * $(nproc)))} / gpu_cores + longest)) ;;
    gpu-tests | *-on-cpu) proj="(GPU)" ;;  # on the GPU machine: the GPU tests and benchmarks
    *) proj=$seconds ;;
  esac
  printf '  %-28s %8s %10s\n' "$name" "$seconds" "$proj"
  staged=$((staged + seconds))
  [[ "$proj" =~ ^[0-9]+$ ]] && projected_total=$((projected_total + proj))
done < <(grep -E '^\| [a-z-]+ \|' "$summary" 2>/dev/null | grep -v '^| stage |')
# Outside the stages: the environment probe and the summary, as here.
printf '  %-28s %8s %10s\n' "(outside the stages)" "$((wall - staged))" "$((wall - staged))"
projected_total=$((projected_total + wall - staged))
printf '  %-28s %8s %10s\n' "whole check" "$wall" "$projected_total + GPU stages"
if [ "${QTRAIN_REHEARSAL_CCACHE:-0}" = 1 ]; then
  say "ccache was on: the build time is not the GPU machine's"
fi
say "build: ${build_cpu:-?} CPU-seconds here, longest single compile ${longest} s"
say "left for the GPU stages of one call (budget ${budget}s): $((budget - projected_total)) s"
say "  in this order: gpu-tests, moe-gpu-step, gpu-train-step, offload-sweep (each cut to what is left)"
# The GPU stages' own estimates at their high end: tests ~100 s, the MoE benchmark ~130 s, the Llama
# step ~90 s; the offload sweep runs only if time is left.
[ $((budget - projected_total)) -ge 320 ] ||
  problems+=("only $((budget - projected_total)) s of the ${budget}s budget left for the GPU stages; they need about 320")

echo
say "summary.md:"
sed 's/^/  /' "$summary" 2>/dev/null | head -60
if [ ${#problems[@]} -gt 0 ]; then
  say "FAILED:"
  printf '  - %s\n' "${problems[@]}"
  say "logs: $work/out/logs.tgz"
  exit 1
fi
say "passed: the GPU check ran every stage it can without a GPU; returned $files files"
