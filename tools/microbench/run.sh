#!/usr/bin/env bash
# Runs every kernel microbenchmark on this machine's GPU and writes the CSVs into DIR, ready for
#   fleetsim calibrate --kernels DIR --gpu PROFILE
# Usage: tools/microbench/run.sh DIR   (after tools/setup.sh has built build/bin/fleetsim_microbench)
# A benchmark this machine cannot run (overlap on one GPU) is skipped; one that fails is reported
# and the others still run; the exit status is 1 if any failed.
set -uo pipefail
out=${1:?usage: tools/microbench/run.sh DIR}
bench="$(dirname "$0")/../../build/bin/fleetsim_microbench"
[ -x "$bench" ] || { echo "run.sh: $bench is not built (no CUDA toolkit?)" >&2; exit 1; }
mkdir -p "$out" || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv > "$out/gpu.txt"
failed=0
for what in memory gemm overlap; do
  echo "run.sh: $what" >&2
  "$bench" "$what" "$out/$what.csv"
  status=$?
  if [ "$status" -eq 3 ]; then
    echo "run.sh: $what skipped" >&2
  elif [ "$status" -ne 0 ]; then
    echo "run.sh: $what failed (exit $status)" >&2
    failed=1
  fi
done
exit "$failed"
