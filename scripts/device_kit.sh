#!/usr/bin/env bash
# Prepares device-kit/ (git-ignored): what scripts/gpu_check.sh needs on a GPU machine that has
# torch 2.11.0+cu130, transformers, peft, accelerate, CMake, ninja and the CUDA 13 toolkit but no
# network, no package installs and no bitsandbytes. It holds
#   debs/     the Debian packages of the C++ build's libraries (yaml-cpp, spdlog, fmt, GoogleTest,
#             Google Benchmark, nlohmann-json, CLI11) and their runtime libraries;
#   python/   bitsandbytes (the venv's version), trimmed to its Python files and its CPU and
#             CUDA 13.0 libraries;
#   MANIFEST  what is in it, with versions.
# The kit must stay under the 64 MiB a device call may carry; this script checks that.
# Idempotent: a second run rebuilds the folder from the same sources.
#
#     scripts/device_kit.sh            # then: run scripts/gpu_check.sh carrying device-kit
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kit="${QTRAIN_DEVICE_KIT:-$root/device-kit}"
limit_bytes=$((64 * 1024 * 1024))
"$root/scripts/setup.sh" >/dev/null
venv="${QTRAIN_HOME:-$HOME/.cache/qtrain}/venv"

# The build's library packages (scripts/setup.sh installs the same ones here), and the shared
# libraries they need at run time.
DEBS=(
  libyaml-cpp-dev libyaml-cpp0.7
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libgtest-dev libgmock-dev
  libbenchmark-dev libbenchmark1debian
  nlohmann-json3-dev libcli11-dev
  libonig-dev libonig5 libutf8proc-dev libutf8proc2
)

say() { echo "[device-kit] $*"; }

rm -rf "$kit.new"
mkdir -p "$kit.new/debs" "$kit.new/python"
say "downloading ${#DEBS[@]} Debian packages"
# apt-get download drops privileges to _apt, which must be able to write the folder.
chmod 777 "$kit.new/debs"
(cd "$kit.new/debs" && apt-get download -q "${DEBS[@]}" >/dev/null) || {
  say "apt-get download failed: run 'apt-get update' (scripts/setup.sh does it when it installs) and retry"
  exit 1
}
chmod 755 "$kit.new/debs"

site="$("$venv/bin/python" -c 'import importlib.util as u; print(u.find_spec("bitsandbytes").submodule_search_locations[0])')"
say "copying bitsandbytes from $site (Python files, CPU and CUDA 13.0 libraries)"
(cd "$(dirname "$site")" &&
  find bitsandbytes -name __pycache__ -prune -o \( -type f ! -name '*.so' -print \) |
    tar -cf - -T - bitsandbytes/libbitsandbytes_cpu.so bitsandbytes/libbitsandbytes_cuda130.so) |
  tar -xf - -C "$kit.new/python"
# Its distribution metadata, so that importlib.metadata finds the version on the device.
cp -r "$(dirname "$site")"/bitsandbytes-*.dist-info "$kit.new/python/"

{
  echo "qtrain device kit, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "bitsandbytes $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("bitsandbytes"))')"
  for f in "$kit.new"/debs/*.deb; do dpkg-deb --show --showformat='${Package} ${Version}\n' "$f"; done
} >"$kit.new/MANIFEST"

bytes=$(du -sb "$kit.new" | cut -f1)
if [ "$bytes" -gt "$limit_bytes" ]; then
  say "the kit is $((bytes / 1024 / 1024)) MiB, over the 64 MiB a device call carries: see $kit.new"
  exit 1
fi
rm -rf "$kit"
mv "$kit.new" "$kit"
say "wrote $kit: $((bytes / 1024)) KiB ($(ls "$kit/debs" | wc -l) .deb files, bitsandbytes)"
say "on the GPU machine, carrying device-kit: scripts/gpu_check.sh"
