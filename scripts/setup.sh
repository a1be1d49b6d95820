#!/usr/bin/env bash
# Installs every Debian package partune needs (and any named as arguments). Idempotent and non-interactive:
# packages already present are left alone, so re-running costs one apt query.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  ccache                  # compiler cache, used when present (PARTUNE_CCACHE; docs/building.md)
  libsimgrid-dev          # sim/: discrete-event engine (S4U)
  libjemalloc-dev         # the partune binary's allocator: the simulator allocates per activity (docs/performance.md)
  libeigen3-dev           # least-squares fits (calibrate)
  libfmt-dev libspdlog-dev
  libyaml-cpp-dev         # scenario files
  libcli11-dev            # the partune command line
  nlohmann-json3-dev      # --json output, trace files
  catch2                  # tests (v2 single header)
  libbenchmark-dev
  libfabric-dev           # EFA/tcp probe in calibrate
  libtorch-dev libgloo-dev  # backend/ (optional at configure time)
  libopenblas0-openmp     # without it LibTorch uses reference BLAS (~25x slower matmul)
  libblas-dev             # sgemm_ for the FlashAttention tiles (libblas.so.3: OpenBLAS at run time)
  pybind11-dev python3-dev  # the Python module (build/python/partune*.so; optional at configure time)
  python3-matplotlib python3-nbconvert python3-nbclient python3-ipykernel jupyter-nbconvert jupyter-core
                          # the notebooks, executed headless by the tests (jupyter nbconvert --execute)
  libopenmpi-dev openmpi-bin  # sweep and search under mpirun (optional at configure time)
  patchelf                # scripts/device-pack.sh: the partune binary carried to the GPU machine finds its libraries
  chromium                # the --report pages loaded headless by the tests (tests/report/report_pages_browser.sh)
)

packages+=("$@")   # extra packages a script needs (fuzz.sh: clang)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]}"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
