#!/usr/bin/env bash
# Redraws the images under docs/images from the shipped scenarios, as docs/commands.md and the
# README say they were made: the report page's screenshot (headless Chromium) and the plots
# (tools/plot/fleetsim-plot). tools/refresh-golden.sh runs it, so the images show the numbers
# the goldens hold. Needs build/bin/fleetsim, Debian's python3 with h5py and matplotlib, and
# chromium (tools/setup.sh installs them). The images are replaced only when all are drawn.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null; then
  echo "refresh-images: needs chromium (tools/setup.sh)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work" docs/images/*.png.tmp' EXIT
fleetsim=build/bin/fleetsim

# Every variant of these scenarios fits and runs: anything but exit 0 is a failure.
run() {
  "$fleetsim" "$@" -q >/dev/null || { echo "refresh-images: fleetsim $* failed" >&2; exit 1; }
}

# The report of the H100 against B200 comparison, with its attribution, in a browser profile of
# its own (as the report test renders it).
run run scenarios/h100-vs-b200.yaml --attribute -o "$work/h100-vs-b200.h5"
"$fleetsim" report "$work/h100-vs-b200.h5" -o "$work/h100-vs-b200.html" >/dev/null
if ! timeout 120 chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$work/profile" --no-first-run --disable-extensions \
  --window-size=1100,1150 --screenshot="$work/report-h100-vs-b200.png" \
  "file://$work/h100-vs-b200.html" >"$work/chromium.log" 2>&1; then
  cat "$work/chromium.log" >&2
  echo "refresh-images: chromium failed" >&2
  exit 1
fi

# The plots: a sweep's scaling, a pipeline's breakdowns, a run's distributions.
run sweep scenarios/scaling-h100-vs-b200.yaml -o "$work/scaling-h100-vs-b200.h5"
run run scenarios/gpt3-175b-1024-h100.yaml -o "$work/gpt3-175b-1024-h100.h5"
run run scenarios/llama3-70b-pretraining-run.yaml -o "$work/llama3-70b-pretraining-run.h5"
for result in scaling-h100-vs-b200 gpt3-175b-1024-h100 llama3-70b-pretraining-run; do
  /usr/bin/python3 tools/plot/fleetsim-plot "$work/$result.h5" -o "$work" --formats png >/dev/null
done

images=(report-h100-vs-b200 scaling-h100-vs-b200-scaling gpt3-175b-1024-h100-breakdown
  llama3-70b-pretraining-run-runs)
for image in "${images[@]}"; do  # each a PNG of some size, before any is replaced
  if [ "$(head -c 8 "$work/$image.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" != \
    "89504e470d0a1a0a" ] || [ "$(stat -c %s "$work/$image.png")" -lt 20000 ]; then
    echo "refresh-images: $image.png was not drawn" >&2
    exit 1
  fi
done
for image in "${images[@]}"; do
  cp "$work/$image.png" "docs/images/$image.png.tmp"
  mv "docs/images/$image.png.tmp" "docs/images/$image.png"
  echo "docs/images/$image.png"
done
