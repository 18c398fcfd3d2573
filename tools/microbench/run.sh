#!/usr/bin/env bash
# Runs every kernel microbenchmark on this machine's GPU and writes the CSVs into DIR, ready for
#   fleetsim calibrate --kernels DIR --gpu PROFILE
# Usage: tools/microbench/run.sh DIR   (after tools/setup.sh has built build/bin/fleetsim_microbench)
# A benchmark this machine cannot run (FP8 GEMMs without FP8 tensor cores, overlap on one GPU) is
# skipped; one that fails is reported and the others still run; the exit status is 1 if any
# failed. A CSV left in DIR by an earlier run is removed before its benchmark runs again, so
# that the fit never takes an old file for this run's.
set -uo pipefail
out=${1:?usage: tools/microbench/run.sh DIR}
bench="$(dirname "$0")/../../build/bin/fleetsim_microbench"
[ -x "$bench" ] || { echo "run.sh: $bench is not built (no CUDA toolkit?)" >&2; exit 1; }
mkdir -p "$out" || exit 1
# The GPU's name, clocks and power limit beside the CSVs, for the record; not needed by the fit.
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv \
  > "$out/gpu.txt" || echo "run.sh: nvidia-smi failed; gpu.txt not written" >&2
failed=0
for what in memory gemm gemm_fp8 overlap; do
  echo "run.sh: $what" >&2
  rm -f "$out/$what.csv"
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
