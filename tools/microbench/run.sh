#!/usr/bin/env bash
# Runs every kernel microbenchmark on this machine's GPU and writes the CSVs into DIR, ready for
#   fleetsim calibrate --kernels DIR --gpu PROFILE
# Usage: tools/microbench/run.sh DIR   (after tools/setup.sh has built build/bin/fleetsim_microbench)
set -euo pipefail
out=${1:?usage: tools/microbench/run.sh DIR}
bench="$(dirname "$0")/../../build/bin/fleetsim_microbench"
[ -x "$bench" ] || { echo "run.sh: $bench is not built (no CUDA toolkit?)" >&2; exit 1; }
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv > "$out/gpu.txt" || true
for what in memory gemm overlap; do
  echo "run.sh: $what" >&2
  "$bench" "$what" "$out/$what.csv"
done
