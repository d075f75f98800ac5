#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, one per parser of outside input) with ASan+UBSan in
# build-fuzz/ and runs each for SECONDS (default 60), one after another; prints a table of
# harness, executions and findings. Installs clang and libFuzzer (Debian) when missing.
#   scripts/fuzz.sh [SECONDS] [HARNESS...]      e.g. scripts/fuzz.sh 300 safetensors dataset
# A finding leaves its input in build-fuzz/findings/<harness>/ (crash-*, timeout-*, oom-*) and
# the log beside it; reproduce with build-fuzz/fuzz/<harness>_fuzz <file>. The corpus grows in
# build-fuzz/corpus/<harness>/ and is reused by the next run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-60}"
shift || true
all=(safetensors model_config run_config dataset tokenizer chat_template adapter_config quant_state trainer_state)
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")
fbuild="${QTRAIN_FUZZ_BUILD:-$root/build-fuzz}"
nbuild="${QTRAIN_BUILD:-$root/build}"

missing=()
for p in clang libclang-rt-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[fuzz] installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# The harnesses link the normal build's engine libraries (fuzz/CMakeLists.txt) and seed from its
# fixtures (the reference models' config.json and adapter_config.json, the test tokenizers).
"$root/scripts/build.sh" --target qtrain_engine qtrain_fixtures qtrain_text_fixtures
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/qtrain/ccache}" CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
if [ ! -f "$fbuild/build.ninja" ]; then
  echo "[fuzz] configuring $fbuild"
  cmake -S "$root" -B "$fbuild" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DQTRAIN_FUZZ=ON -DQTRAIN_ENABLE_CUDA=OFF -DQTRAIN_FUZZ_LIBS="$nbuild" >/dev/null
fi
cmake --build "$fbuild" -j "${QTRAIN_JOBS:-$(nproc)}" --target "${harnesses[@]/%/_fuzz}"

venv_python="${QTRAIN_PYTHON:-$HOME/.cache/qtrain/venv/bin/python}"
seeds="$fbuild/seeds"
rm -rf "$seeds"
"$venv_python" "$root/fuzz/make_seeds.py" --root "$root" --fixtures "$nbuild/fixtures" --out "$seeds"

# libtorch is not instrumented: ASan must not report its allocations as leaks (torch keeps
# caches alive to exit); everything else aborts at the first report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# The largest input each harness is given: the seeds' sizes with room to grow.
max_len() {
  case "$1" in
    tokenizer) echo 262144 ;;
    chat_template|model_config|run_config|adapter_config) echo 16384 ;;
    *) echo 8192 ;;
  esac
}

summary=()
failed=0
for h in "${harnesses[@]}"; do
  corpus="$fbuild/corpus/$h"
  findings="$fbuild/findings/$h"
  mkdir -p "$corpus" "$findings"
  dirs=("$corpus")
  [ -d "$seeds/$h" ] && dirs+=("$seeds/$h")
  [ -d "$root/fuzz/regressions/$h" ] && dirs+=("$root/fuzz/regressions/$h")
  log="$findings/fuzz.log"
  touch "$findings/.start"
  echo "[fuzz] $h for ${seconds}s"
  set +e
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: 2 GiB is an out-of-memory finding.
  "$fbuild/fuzz/${h}_fuzz" "${dirs[@]}" -max_total_time="$seconds" -max_len="$(max_len "$h")" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -artifact_prefix="$findings/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  found=$(find "$findings" -maxdepth 1 -type f -newer "$findings/.start" \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
  [ "$rc" -eq 0 ] || [ "$found" -gt 0 ] || found="exit $rc"
  [ "$found" = "0" ] || failed=1
  summary+=("$(printf '%-16s %14s %10s' "$h" "${execs:-?}" "$found")")
done

echo
printf '%-16s %14s %10s\n' harness executions findings
printf '%s\n' "${summary[@]}"
[ "$failed" -eq 0 ] || { echo "[fuzz] findings: see $fbuild/findings/<harness>/ (inputs and fuzz.log)"; exit 1; }
