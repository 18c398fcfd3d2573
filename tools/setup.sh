#!/usr/bin/env bash
# Installs what fleetsim needs (Debian 12 packages), then configures and builds it (Release) in
# build/. Idempotent: quiet when everything is already installed and up to date.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-packages.sh setup build-essential cmake ccache libboost-graph-dev \
  libboost-program-options-dev libboost-serialization-dev libtbb-dev libhdf5-dev hdf5-tools \
  libyaml-cpp-dev catch2 libbenchmark-dev nlohmann-json3-dev python3-matplotlib python3-h5py \
  python3-pandas chromium libopenmpi-dev openmpi-bin libjemalloc-dev libutfcpp-dev

jobs=$(nproc 2>/dev/null || echo 2)
# Configured once; again when an older build directory lacks MPI.
if ! grep -q "^FLEETSIM_MPI:BOOL=ON" build/CMakeCache.txt 2>/dev/null; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFLEETSIM_MPI=ON >/dev/null
fi
# Progress lines are hidden; warnings and errors are shown, and pipefail keeps the build's status.
cmake --build build -j "$jobs" 2>&1 | { grep -vE '^\[ *[0-9]+%\]|^g?make\[' || true; }
