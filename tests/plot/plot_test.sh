#!/usr/bin/env bash
# tools/plot/fleetsim-plot end to end: a sweep's scaling curves and breakdowns, a run's
# distributions, as PNG and SVG; the same SVG twice; exit 2 on a file that is not a result.
set -euo pipefail
fleetsim=$1
plot=$2
# $3: tests/data/small-sweep.yaml
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

cp "$3" "$dir/sweep.yaml"
cat >"$dir/run.yaml" <<'YAML'
name: plot-run
model: llama3-8b
training: {seq_len: 4096, global_batch: 256, micro_batch: 2, tokens: 1e10}
layout: {dp: 16, zero: 3}
cluster: {node: dgx-h100, nodes: 2, storage: {write: 10GB/s, read: 20GB/s}}
pricing: {gpu_hour: 3USD/h}
run: {interruptions: llama3-405b, checkpoint: young_daly, detection: 5min, restart: 10min,
      replications: 50}
compare:
  - name: every hour
    run: {checkpoint: 1h}
YAML
"$fleetsim" sweep "$dir/sweep.yaml" -q -o "$dir/sweep.h5" >/dev/null
"$fleetsim" run "$dir/run.yaml" -q -o "$dir/run.h5" >/dev/null
mkdir "$dir/out"
"$plot" "$dir/sweep.h5" -o "$dir/out" >"$dir/written"
"$plot" "$dir/run.h5" -o "$dir/out" >>"$dir/written"
for name in sweep-scaling sweep-breakdown sweep-memory run-breakdown run-memory run-runs; do
  grep -qx "$dir/out/$name.png" "$dir/written" || { echo "not reported: $name.png"; exit 1; }
  head -c 8 "$dir/out/$name.png" | od -An -tx1 | grep -q "89 50 4e 47" ||
    { echo "not a PNG: $name.png"; exit 1; }
  grep -q "<svg" "$dir/out/$name.svg" || { echo "not an SVG: $name.svg"; exit 1; }
done
# A sweep over two node types draws two scaling curves, each with its legend entry.
grep -q "cluster.node=dgx-h100" "$dir/out/sweep-scaling.svg"
grep -q "cluster.node=dgx-b200" "$dir/out/sweep-scaling.svg"
grep -q "every hour" "$dir/out/run-runs.svg"
# Nothing but the plots is left behind (no temporary files).
[ "$(ls -A "$dir/out" | wc -l)" -eq 12 ] || { ls -A "$dir/out"; exit 1; }
cp "$dir/out/sweep-scaling.svg" "$dir/first.svg"
"$plot" "$dir/sweep.h5" -o "$dir/out" --formats svg >/dev/null
cmp "$dir/first.svg" "$dir/out/sweep-scaling.svg"
echo "not hdf5" >"$dir/bad.h5"
status=0
"$plot" "$dir/bad.h5" -o "$dir/out" 2>"$dir/err" || status=$?
[ "$status" -eq 2 ] || { echo "exit $status on a bad file"; exit 1; }
grep -q "not a fleetsim result file" "$dir/err"
echo "plot: all checks passed"
