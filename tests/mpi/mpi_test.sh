#!/usr/bin/env bash
# A run and a sweep spread over two MPI ranks: the same JSON and the same HDF5 file as one
# process writes; a stopped sweep reports both ranks' finished points; commands that run in one
# process refused under mpirun.
set -euo pipefail
fleetsim=$1
mpirun=$2
scenarios=$3
# $4: tests/data/small-sweep.yaml
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# As CI runs: root in a container, two ranks on whatever cores there are.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
two() { timeout 300 "$mpirun" -n 2 --oversubscribe "$fleetsim" "$@"; }
three() { timeout 300 "$mpirun" -n 3 --oversubscribe "$fleetsim" "$@"; }

# tests/data/small-sweep.yaml, each point re-planned.
{ cat "$4"; echo "  layout: plan"; } >"$dir/sweep.yaml"
for args in "sweep $dir/sweep.yaml" "run $scenarios/llama3-70b-pretraining-run.yaml"; do
  set -- $args
  "$fleetsim" "$@" -q --threads 1 --json -o "$dir/one.h5" >"$dir/one.json"
  two "$@" -q --threads 1 --json -o "$dir/two.h5" >"$dir/two.json"
  cmp "$dir/one.json" "$dir/two.json" || { echo "$1: the JSON differs under MPI"; exit 1; }
  # Every group, attribute and value alike (h5dump prints them all; its first line names the
  # file). h5diff would call the empty datasets of both files not comparable.
  diff <(h5dump "$dir/one.h5" | tail -n +2) <(h5dump "$dir/two.h5" | tail -n +2) >/dev/null ||
    { echo "$1: the HDF5 file differs under MPI"; exit 1; }
  # Not an empty comparison: the points and the runs' replications are there.
  grep -q '"tokens_per_s"' "$dir/two.json"
done
h5dump -H -d "/variants/checkpoint_every_6_h/run/wall_s" "$dir/two.h5" | grep -q "( 1000 )"
# More ranks than variants (the third has none to send), with a trace: the same outputs.
"$fleetsim" run "$scenarios/h100-vs-b200.yaml" -q --json --trace "$dir/one.trace" >"$dir/one.json"
three run "$scenarios/h100-vs-b200.yaml" -q --json --trace "$dir/three.trace" >"$dir/three.json"
cmp "$dir/one.json" "$dir/three.json"
cmp "$dir/one.trace" "$dir/three.trace"
# A sweep stopped by --max-wall (each rank's own): both ranks' finished points, marked partial.
# One second: about a quarter of the points (some 40 ms each, on one thread a rank).
status=0
two sweep "$scenarios/../tools/bench/sweep-200.yaml" -q --threads 1 --json --max-wall 1s \
  >"$dir/stopped.json" 2>/dev/null || status=$?
[ "$status" -eq 3 ] || { echo "sweep stopped under mpirun: exit $status"; exit 1; }
python3 - "$dir/stopped.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
partial = report["partial"]
assert "--max-wall" in partial["stopped_by"], partial
assert 0 < partial["variants_finished"] < partial["variants_planned"] == 200, partial
names = [v["name"] for v in report["variants"]]
# Points 0 and 1 are the first of rank 0 and of rank 1.
assert any(n.endswith("link=100Gbps") for n in names), names
assert any(n.endswith("link=105Gbps") for n in names), names
PY
# Copies that a launcher started but MPI did not join would each do all the work: refused.
status=0
OMPI_COMM_WORLD_SIZE=2 "$fleetsim" run "$scenarios/h100-vs-b200.yaml" -q >/dev/null 2>"$dir/err" ||
  status=$?
[ "$status" -eq 2 ] || { echo "lone copy: exit $status"; exit 1; }
grep -q "MPI did not make them one job" "$dir/err"
# A bad input is every rank's: said once, by rank 0, with exit 2.
printf 'name: bad\nmodel: llama3-8b\ntraining: {seq_len: 4096, global_batch: 64, micro_batch: 0}\n' \
  >"$dir/bad.yaml"
status=0
two run "$dir/bad.yaml" -q >/dev/null 2>"$dir/err" || status=$?
[ "$status" -eq 2 ] || { echo "bad input under mpirun: exit $status"; exit 1; }
[ "$(grep -c '^error: ' "$dir/err")" -eq 1 ] || { echo "bad input under mpirun:"; cat "$dir/err"; exit 1; }
grep -q "^error: $dir/bad.yaml:3:" "$dir/err"
status=0
two plan "$scenarios/h100-vs-b200.yaml" >/dev/null 2>"$dir/err" || status=$?
[ "$status" -eq 2 ] || { echo "plan under mpirun: exit $status"; exit 1; }
echo "mpi: all checks passed"
