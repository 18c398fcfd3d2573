#!/usr/bin/env bash
# Rewrites tests/golden/<scenario>.json from `fleetsim run scenarios/<scenario>.yaml --json
# --summary` (links summed by kind) for every shipped scenario, then the pages generated from
# them (docs/examples/, the README's example: build/bin/fleetsim_docs) and the images under
# docs/images (tools/refresh-images.sh): run it when a model changes on purpose, then read the
# diff and say in the commit which numbers moved and why. The golden tests (ctest -R golden)
# compare numbers to a relative 1e-9.
set -euo pipefail
cd "$(dirname "$0")/.."
# The images are drawn last: what they need is checked first, before any golden is rewritten.
if ! command -v chromium >/dev/null ||
  ! /usr/bin/python3 -c 'import h5py, matplotlib' 2>/dev/null; then
  echo "refresh-golden: needs chromium and python3's h5py and matplotlib (tools/setup.sh)" >&2
  exit 1
fi
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
  # Exit 1 is also what a failure gives: only a whole report with its variants is kept.
  if ! python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["variants"]' \
      "tests/golden/$name.json.tmp" 2>/dev/null; then
    rm -f "tests/golden/$name.json.tmp"
    echo "refresh-golden: $scenario gave no report" >&2
    exit 1
  fi
  mv "tests/golden/$name.json.tmp" "tests/golden/$name.json"
  echo "tests/golden/$name.json"
done
build/bin/fleetsim_docs .
# And the images the docs show, drawn from the same scenarios.
tools/refresh-images.sh
