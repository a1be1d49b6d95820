#!/usr/bin/env bash
# Packs what the GPU machine needs and does not have into .device/ (git-ignored; carried to
# the machine by the device tool with carry: [".device"]):
#   .device/debs/      Debian 12 packages the backend builds against there (headers and
#                      libraries of yaml-cpp, fmt, Eigen, nlohmann-json, CLI11; reference BLAS
#                      for the CPU FlashAttention tiles; Gloo's headers in case the LibTorch
#                      there ships none), unpacked by device-build.sh with dpkg -x
#   .device/partune.tar.gz  this machine's build/partune (estimator, simulator: validate's
#                      prediction) with every shared library it loads that a bare Ubuntu
#                      lacks, so that SimGrid need not be built there
# The GPU machine has nvcc, CMake, ninja and PyTorch 2.x (LibTorch with CUDA and NCCL), no
# network. Usage: scripts/device-pack.sh [--no-build]   (default: builds build/partune first)
set -euo pipefail
cd "$(dirname "$0")/.."
out=.device
debs=(libyaml-cpp-dev libyaml-cpp0.7 libfmt-dev libfmt9 libeigen3-dev nlohmann-json3-dev libcli11-dev
      libblas3 libgfortran5 libquadmath0 libgloo-dev)
[ "${1:-}" = "--no-build" ] || cmake --build build --target partune
rm -rf "$out.tmp" && mkdir -p "$out.tmp/debs" "$out.tmp/bundle/lib"
(cd "$out.tmp/debs" && apt-get download "${debs[@]}" >/dev/null 2>&1) || {
  echo "device-pack: apt-get download failed (run 'apt-get update' first)" >&2; exit 1; }
cp build/partune "$out.tmp/bundle/"
# Every library partune loads except the C and C++ runtimes, which the machine's are newer than.
ldd build/partune | awk '/=> \//{print $3}' | grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$out.tmp/bundle/lib/"; done
# DT_RPATH (not RUNPATH): it also applies to the libraries' own dependencies (SimGrid's ns-3).
patchelf --force-rpath --set-rpath '$ORIGIN/lib' "$out.tmp/bundle/partune"
# A library with a RUNPATH of its own (Open MPI's) shuts the executable's out for its
# dependencies: each bundled library looks beside itself too.
for lib in "$out.tmp"/bundle/lib/*; do patchelf --force-rpath --set-rpath '$ORIGIN' "$lib"; done
tar -C "$out.tmp/bundle" -czf "$out.tmp/partune.tar.gz" .
rm -rf "$out.tmp/bundle" "$out" && mv "$out.tmp" "$out"
du -sh "$out"/debs "$out"/partune.tar.gz
