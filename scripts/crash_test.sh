#!/usr/bin/env bash
# The crash test: a QLoRA run on the demo model (configs/demo.yaml, 40 short steps, a checkpoint
# every step, an evaluation every 5) is killed with SIGKILL at random moments and resumed each
# time (auto_resume_from_checkpoints); the final adapter must equal the uninterrupted run's bit for
# bit. Then, where this user may mount a tmpfs, a run whose output_dir fills up during a checkpoint
# write must stop with an error naming the file, and the checkpoint before it must still resume.
#
#     scripts/crash_test.sh [KILLS] [SEED]      # default 20 kills, seed 1
#
# Prints one line per kill (when it struck, what the run was doing) and a verdict; exits non-zero
# when the adapters differ, a resume fails, or the full-disk case misbehaves. Builds qtrain first.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${QTRAIN_BUILD:-$root/build}"
kills="${1:-20}"
RANDOM="${2:-1}"
"$root/scripts/build.sh" --target qtrain >/dev/null
qtrain="$build/apps/qtrain"
work="$(mktemp -d "${TMPDIR:-/tmp}/qtrain-crash.XXXXXX")"
cleanup() {
  mountpoint -q "$work/full" 2>/dev/null && umount "$work/full"
  rm -rf "$work"
}
trap cleanup EXIT

"$qtrain" init-model --arch llama --preset demo --seed 0 --out "$work/model" >/dev/null 2>&1
steps=40
settings=(--set "base_model=$work/model" --set sequence_len=128 --set micro_batch_size=2
  --set max_steps=$steps --set save_steps=1 --set eval_steps=5 --set logging_steps=1 --set save_total_limit=3
  --set use_tensorboard=false --set overwrite_output_dir=false)
newest_checkpoint() {  # the newest complete checkpoint-N of OUTPUT_DIR (not a .tmp being written)
  ls -d "$1"/checkpoint-* 2>/dev/null | grep -E '/checkpoint-[0-9]+$' | sort -t- -k2 -n | tail -n 1 || true
}
train() {  # train OUTPUT_DIR [extra settings...]
  local out=$1
  shift
  "$qtrain" train "$root/configs/demo.yaml" "${settings[@]}" --set "output_dir=$out" "$@"
}
start_train() {  # as train, in the background: $! is qtrain's own pid, so a kill reaches it
  local out=$1
  shift
  (exec "$qtrain" train "$root/configs/demo.yaml" "${settings[@]}" --set "output_dir=$out" "$@") &
}

echo "[crash] reference: $steps steps uninterrupted"
start=$SECONDS
train "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
echo "[crash] reference took $((SECONDS - start))s"

# Each kill waits until the resumed run has written a checkpoint of its own (so every attempt
# makes progress), then strikes at a random moment of the next 1.5 s: in a step, an evaluation or
# a checkpoint write.
echo "[crash] $kills kills, each at a random moment after a resumed run's first checkpoint"
failures=0
for k in $(seq 1 "$kills"); do
  start_train "$work/crash" --set auto_resume_from_checkpoints=true >"$work/run.log" 2>&1
  pid=$!
  for _ in $(seq 1 1200); do  # at most 60 s
    grep -q '^checkpoint: ' "$work/run.log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  delay_ms=$((RANDOM % 1500))
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true  # it may have ended just now
    wait "$pid" 2>/dev/null || true
    if pgrep -f -- "output_dir=$work/crash" >/dev/null; then
      echo "[crash] FAILED: a killed run is still running"
      exit 1
    fi
    doing="$(grep -v '^\s*$' "$work/run.log" | tail -n 1 | cut -c1-90 || true)"
    newest="$(newest_checkpoint "$work/crash")"
    echo "[crash] kill $k, ${delay_ms} ms after its first checkpoint: last line '${doing}'; newest ${newest##*/}"
  else
    if ! wait "$pid"; then
      echo "[crash] kill $k: the resumed run failed before the kill:"
      tail -n 5 "$work/run.log"
      failures=$((failures + 1))
    else
      echo "[crash] kill $k: the run had already finished"
    fi
    break
  fi
done
if [ ! -f "$work/crash/adapter_model.safetensors" ]; then
  train "$work/crash" --set auto_resume_from_checkpoints=true >"$work/run.log" 2>&1 || {
    echo "[crash] FAILED: the final resume failed:"
    tail -n 5 "$work/run.log"
    exit 1
  }
fi
if cmp -s "$work/ref/adapter_model.safetensors" "$work/crash/adapter_model.safetensors"; then
  echo "[crash] ok: the adapter after the kills equals the uninterrupted run's bit for bit"
else
  echo "[crash] FAILED: the adapter after the kills differs from the uninterrupted run's"
  failures=$((failures + 1))
fi

# A full disk during a checkpoint write: room for about two checkpoints and the run's other files.
ck_kib=$(du -sk "$work/ref/checkpoint-$steps" | cut -f1)
mkdir -p "$work/full"
if mount -t tmpfs -o size=$((ck_kib * 5 / 2 + 64))k tmpfs "$work/full" 2>/dev/null; then
  echo "[crash] full disk: output_dir on a tmpfs of $((ck_kib * 5 / 2 + 64)) KiB (a checkpoint is ${ck_kib} KiB)"
  if train "$work/full/out" --set save_total_limit=0 >"$work/full.log" 2>&1; then
    echo "[crash] FAILED: the run on a full disk exited 0"
    failures=$((failures + 1))
  else
    echo "[crash] the run stopped: $(grep 'qtrain: error' "$work/full.log" | cut -c1-300)"
    if ! grep -q 'is intact' "$work/full.log" || ls -d "$work/full/out"/checkpoint-*.tmp >/dev/null 2>&1; then
      echo "[crash] FAILED: the error does not name the intact checkpoint, or a partial folder was left"
      failures=$((failures + 1))
    fi
    good="$(newest_checkpoint "$work/full/out")"
    mkdir -p "$work/after"
    if [ -n "$good" ] && cp -r "$good" "$work/after/" &&
      train "$work/after" --set resume_from_checkpoint=true --set "max_steps=$steps" >"$work/after.log" 2>&1; then
      echo "[crash] ok: ${good##*/}, the last checkpoint written before the disk filled, resumes to the end"
    else
      echo "[crash] FAILED: no checkpoint before the full disk resumes:"
      tail -n 5 "$work/after.log" 2>/dev/null || true
      failures=$((failures + 1))
    fi
  fi
else
  echo "[crash] full disk: skipped (this user cannot mount a tmpfs)"
fi

if [ "$failures" -ne 0 ]; then
  echo "[crash] $failures failure(s)"
  exit 1
fi
echo "[crash] passed"
