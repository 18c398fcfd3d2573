#!/usr/bin/env bash
# Rewrites tests/golden/<scenario>.json from `fleetsim run scenarios/<scenario>.yaml --json
# --summary` (links summed by kind) for every shipped scenario: run it when a model changes on
# purpose, then read the diff and say in the commit which numbers moved and why. The golden
# tests (ctest -R golden) compare numbers to a relative 1e-9.
set -euo pipefail
cd "$(dirname "$0")/.."
for scenario in scenarios/*.yaml; do
  name=$(basename "$scenario" .yaml)
  status=0
  build/bin/fleetsim run "$scenario" --json --summary -q >"tests/golden/$name.json.tmp" || status=$?
  # 1: a variant does not fit, which the scenario may show on purpose.
  if [ "$status" -gt 1 ]; then
    rm -f "tests/golden/$name.json.tmp"
    echo "refresh-golden: $scenario failed with exit code $status" >&2
    exit 1
  fi
  mv "tests/golden/$name.json.tmp" "tests/golden/$name.json"
  echo "tests/golden/$name.json"
done
