#!/usr/bin/env bash
# Builds partune's GPU half on the bare GPU machine, in one call, into build-device/:
# partune-run (the LibTorch backend and `calibrate`), the CUDA FlashAttention checks, with
# LibTorch 2.x and CUDA from the machine's PyTorch, and this repository's Debian
# dependencies unpacked from .device/debs (scripts/device-pack.sh made them here, the
# device tool carries .device). The `partune` binary (estimator and simulator) comes
# prebuilt from .device/partune.tar.gz. Prints where each part came from; exits non-zero
# naming the step that failed.
#   scripts/device-build.sh [--jobs N] [--dry-run]
# --dry-run (this machine): builds the same targets against Debian's CPU LibTorch into
# build-device-dry/, with the packages unpacked from .device/debs when present (else the
# installed ones); no CUDA, no bundle.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 4)
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "device-build: unknown argument $1" >&2; exit 2 ;;
  esac
done
step() { echo "device-build: $*"; }

build=build-device
prefix=/tmp/partune-device-prefix
args=(-DCMAKE_BUILD_TYPE=Release -DPARTUNE_BACKEND_ONLY=ON -DPARTUNE_BUILD_TESTS=OFF)
lib=$prefix/usr/lib/x86_64-linux-gnu
if [ -d .device/debs ]; then
  step "unpacking $(ls .device/debs | wc -l) Debian packages into $prefix"
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in .device/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
  args+=(-Dyaml-cpp_DIR="$lib/cmake/yaml-cpp" -Dfmt_DIR="$lib/cmake/fmt"
         -Dnlohmann_json_DIR="$prefix/usr/share/cmake/nlohmann_json" -DEigen3_DIR="$prefix/usr/share/eigen3/cmake"
         -DCLI11_DIR="$prefix/usr/share/cmake/CLI11" -DPARTUNE_BLAS_LIBRARY="$lib/blas/libblas.so.3"
         # --no-as-needed: libtorch_cuda registers the CUDA device when loaded, and nothing names
         # its symbols, so an --as-needed link (Ubuntu's default) would drop it.
         -DCMAKE_EXE_LINKER_FLAGS="-Wl,--no-as-needed -Wl,-rpath-link,$lib -Wl,-rpath,$lib:$lib/blas")
elif [ $dry -eq 0 ]; then
  echo "device-build: no .device/debs (run scripts/device-pack.sh here and carry .device)" >&2; exit 2
fi
if [ $dry -eq 1 ]; then
  build=build-device-dry
  args+=(-DPARTUNE_WITH_CUDA=OFF)   # Debian's CPU LibTorch, found where it is installed
else
  torch_cmake=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  torch_include=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
  step "LibTorch $(python3 -c 'import torch; print(torch.__version__)') from $torch_cmake; nvcc $(nvcc --version | tail -1)"
  # nccl.h: PyTorch's nvidia-nccl package (its site-packages), for ProcessGroupNCCL.hpp.
  nccl_h=$(python3 - <<'PY'
import glob, os, site
for d in site.getsitepackages():
    for h in glob.glob(os.path.join(d, "nvidia", "**", "nccl.h"), recursive=True):
        print(os.path.dirname(h)); raise SystemExit
PY
)
  step "nccl.h: ${nccl_h:-not found (the CUDA ranks connect over Gloo)}"
  # LibTorch 2.x ships fmt's headers (a newer fmt than Debian's libfmt the prefix has): the
  # translation units that include LibTorch see those, so fmt is header-only everywhere.
  cxxflags="-DFMT_HEADER_ONLY=1"
  # Gloo's headers (ProcessGroupGloo.hpp includes them): LibTorch's own when it ships them,
  # else Debian's, searched after everything else.
  if [ ! -d "$torch_include/gloo" ]; then
    step "LibTorch ships no gloo/ headers: Debian's libgloo-dev headers stand in"
    cxxflags="$cxxflags -idirafter $prefix/usr/include"
  fi
  # LibTorch 2.13 and later need C++20 (their headers stop with an #error otherwise).
  if grep -qs "C++20 or later compatible compiler is required" "$torch_include/ATen/ATen.h" \
       "$torch_include/torch/csrc/api/include/torch/all.h"; then
    step "this LibTorch needs C++20"; args+=(-DCMAKE_CXX_STANDARD=20 -DCMAKE_CUDA_STANDARD=20)
  fi
  arch=$(python3 -c 'import torch; p = torch.cuda.get_device_capability(); print(f"{p[0]}{p[1]}")' 2>/dev/null || echo 90)
  args+=(-DCMAKE_PREFIX_PATH="$torch_cmake;$prefix/usr"
         -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)"
         -DCMAKE_CXX_FLAGS="$cxxflags")
  [ -n "$nccl_h" ] && args+=(-DNCCL_INCLUDE_DIR="$nccl_h")
fi

mkdir -p "$build"
step "configuring $build"
cmake -S . -B "$build" -G Ninja "${args[@]}" > "$build/device-build.configure.log" 2>&1 || {
  tail -40 "$build/device-build.configure.log"; echo "device-build: configure failed" >&2; exit 1; }
grep "partune:" "$build/device-build.configure.log" || true
# Every target in one parallel build; -k 0: a check program that fails to compile costs
# only its own check, and every error is in the log at once (one GPU call may have to fix
# them all). partune-run is what the checks need: without it the build has failed.
targets=(partune-run)
known=$(ninja -C "$build" -t targets all 2>/dev/null)  # (not piped into grep -q: pipefail and SIGPIPE)
for t in flash_attention_cuda_check flash_attention_sdpa_check step_kernel_profile; do
  grep -q "^$t:" <<<"$known" && targets+=("$t")
done
step "building ${targets[*]} with $jobs jobs"
start=$(date +%s)
rm -f "${targets[@]/#/$build/}"
cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k 0 > "$build/device-build.build.log" 2>&1 ||
  grep -E "error|FAILED" "$build/device-build.build.log" | head -60
# fp8 GEMMs and the fused Adam call are the parts compiled only against LibTorch 2.x (never
# here): when one does not compile, the rest is built without it (fp8 jobs are then refused
# by name; Adam steps with the multi-tensor kernels).
if [ ! -x "$build/partune-run" ]; then
  off=()
  grep -q "fp8_linear.cpp" "$build/device-build.build.log" && off+=(-DPARTUNE_FP8_GEMMS=OFF)
  grep -q "multi_tensor_adam.cpp" "$build/device-build.build.log" && off+=(-DPARTUNE_FUSED_ADAM=OFF)
  if [ ${#off[@]} -gt 0 ]; then
    step "rebuilding with ${off[*]} (those sources failed to compile)"
    cmake -S . -B "$build" "${off[@]}" >> "$build/device-build.configure.log" 2>&1
    cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k 0 >> "$build/device-build.build.log" 2>&1 ||
      grep -E "error|FAILED" "$build/device-build.build.log" | tail -30
  fi
fi
for t in "${targets[@]}"; do [ -x "$build/$t" ] && step "$t built" || step "$t FAILED to build"; done
[ -x "$build/partune-run" ] || { echo "device-build: partune-run failed to build" >&2; exit 1; }
step "built in $(( $(date +%s) - start )) s"
if [ $dry -eq 0 ]; then
  tar -xzf .device/partune.tar.gz -C "$build"   # partune (and its libraries in lib/) beside partune-run
  step "partune $("$build/partune" --version 2>&1 | head -1)"
fi
