#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS (default 60) on a scratch copy of its seeds (shipped
# scenarios, bad inputs, logs, microbenchmark CSVs, unit strings, past findings), after
# building them with the fuzz preset (clang). A crash, a leak, undefined behaviour or an input
# slower than 60 s stops it with exit 1 and leaves the input under build-fuzz/findings/: copy
# it to tests/fuzz/regressions/<target>/ once fixed, so it runs with the test suite.
# Prints each target's executions, executions per second and new corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
# libFuzzer comes with clang's runtime libraries (Debian 12: clang 14).
tools/install-packages.sh fuzz clang libclang-rt-14-dev
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc 2>/dev/null || echo 2)" 2>&1 |
  { grep -vE '^\[ *[0-9]+%\]|^g?make\[' || true; }
declare -A seeds=(
  [fuzz_scenario]="scenarios tests/bad_inputs tests/data"
  [fuzz_agreement]="scenarios tests/data"
  [fuzz_units]="tests/fuzz/units"
  [fuzz_nccl_log]="calibration/logs"
  [fuzz_microbench]="calibration/microbench"
)
mkdir -p build-fuzz/findings
status=0
for target in fuzz_scenario fuzz_agreement fuzz_units fuzz_nccl_log fuzz_microbench; do
  corpus=$(mktemp -d)
  for dir in ${seeds[$target]} "tests/fuzz/regressions/$target"; do
    # Numbered copies where two seeds share a name.
    find "$dir" -type f -exec cp --backup=numbered {} "$corpus/" \;
  done
  log=build-fuzz/findings/$target.log
  if ! "build-fuzz/bin/$target" "$corpus" -max_total_time="$seconds" -timeout=60 \
      -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$target-" \
      >"$log" 2>&1; then
    echo "fuzz: $target found a problem: see $log and build-fuzz/findings/" >&2
    status=1
  fi
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  echo "fuzz: $target: $runs executions in ${seconds} s ($rate/s), corpus $(ls "$corpus" | wc -l) inputs"
  rm -rf "$corpus"
done
exit $status
