#!/usr/bin/env bash
# `fleetsim report` end to end: the pages of a run (priced, attributed and with a sensitivity
# analysis, one variant that does not fit and whose name is markup and dollars), a sweep, a
# plan, a collective and a run stopped part way have their sections, escape what the file says,
# load nothing from elsewhere (no script, no link, no external reference), and render in
# headless Chromium (Debian's package); a screenshot of the run's page is a PNG. Bad input:
# exit 2. Without Chromium (tools/setup.sh installs it) the test is skipped (77).
set -euo pipefail
fleetsim=$1
sweep=$2           # tests/data/small-sweep.yaml
small_then_huge=$3  # tests/data/small-then-huge.yaml
command -v chromium >/dev/null || { echo "no chromium: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

cat >"$dir/run.yaml" <<'YAML'
name: report-page
description: Llama-3-8B on two DGX H100 nodes against two DGX B200 nodes
model: llama3-8b
training: {seq_len: 4096, global_batch: 128, micro_batch: 2, tokens: 2e10}
layout: {dp: 16, zero: 3}
cluster:
  node: dgx-h100
  nodes: 2
  fabric: {kind: rail-fat-tree, link: 400Gbps}
  storage: {write: 20GB/s, read: 40GB/s}
pricing: {gpu_hour: 3USD/h}
run: {interruptions: llama3-405b, checkpoint: young_daly, detection: 5min, restart: 10min,
      replications: 50}
compare:
  - name: B200
    cluster: {node: dgx-b200}
    pricing: {gpu_hour: 5USD/h}
  - name: "<b>DDP</b> & $3 vs $4"
    layout: {zero: 0}
YAML
# Exit 1: a variant does not fit (the file has every variant all the same).
status=0
"$fleetsim" run "$dir/run.yaml" -q --attribute --sensitivity 2 -o "$dir/run.h5" >/dev/null ||
  status=$?
[ "$status" -eq 1 ] || { echo "the run exited $status"; exit 1; }
"$fleetsim" sweep "$sweep" -q -o "$dir/sweep.h5" >/dev/null
"$fleetsim" collective --node dgx-h100 -b 1M -e 64M --output "$dir/collective.h5" >/dev/null
"$fleetsim" plan "$dir/run.yaml" -q --top 3 -o "$dir/plan.h5" >/dev/null
status=0
"$fleetsim" run "$small_then_huge" -q --no-fold --max-wall 5s -o "$dir/partial.h5" \
  >/dev/null 2>&1 || status=$?
[ "$status" -eq 3 ] || { echo "the stopped run exited $status"; exit 1; }

"$fleetsim" report "$dir/run.h5" -o "$dir/run.html" >/dev/null
"$fleetsim" report "$dir/sweep.h5" >/dev/null  # beside it: sweep.html
"$fleetsim" report "$dir/collective.h5" -o "$dir/collective.html" >/dev/null
"$fleetsim" report "$dir/plan.h5" >/dev/null
"$fleetsim" report "$dir/partial.h5" >/dev/null

expect() {  # PAGE TEXT...: each text is on the page
  local page=$1
  shift
  for text in "$@"; do
    grep -qF "$text" "$page" || { echo "$page lacks: $text"; exit 1; }
  done
}
expect "$dir/run.html" "<h2>Comparison</h2>" "<h2>Where the step goes</h2>" \
  "<h2>Memory per GPU</h2>" "<h2>Why they differ</h2>" "<h2>How sure</h2>" "<h2>Runs</h2>" \
  "<h2>Assumptions and warnings</h2>" "<h2>Provenance</h2>" "15-30% kept free" "B200 against" \
  "assumed: CUDA context" "fleetsim 0.1.0" "link_efficiency.infiniband" "published: "
expect "$dir/sweep.html" "<h2>Scaling</h2>" "cluster.node=dgx-b200" "<h2>Comparison</h2>"
expect "$dir/collective.html" "<h2>Collective</h2>" "busbw (GB/s)"
expect "$dir/plan.html" "<h2>Comparison</h2>" "<h2>Where the step goes</h2>"
expect "$dir/partial.html" "Partial: stopped by" "1 of 2 variants finished" \
  "not finished: 405B on 16,384 GPUs"
# What the file says is text: a name of markup and dollars escaped, not run or typeset.
expect "$dir/run.html" "&lt;b&gt;DDP&lt;/b&gt; &amp; \$3 vs \$4" "does not fit"
if grep -qF "<b>DDP" "$dir/run.html"; then echo "a name was written as markup"; exit 1; fi
for page in run sweep collective plan partial; do
  # Self-contained: no script, stylesheet link, image file or reference out of the page (an
  # SVG's xlink:href="#..." and url(#...) point inside it).
  if grep -qiE '<script|<link|<img|<iframe|src=|url\([^#]|href="[^#]' "$dir/$page.html"; then
    echo "$page.html refers to something outside it"
    exit 1
  fi
done

# Rendered: the DOM Chromium builds has the page's headings, and nothing failed to load.
chromium=(chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars
  --no-first-run --disable-extensions --user-data-dir="$dir/profile")
for page in run sweep collective plan partial; do
  "${chromium[@]}" --enable-logging=stderr --v=0 --dump-dom "file://$dir/$page.html" \
    >"$dir/$page.dom" 2>"$dir/$page.log"
  grep -q "<h2>Comparison</h2>\|<h2>Collective</h2>" "$dir/$page.dom" ||
    { echo "$page: Chromium's DOM has no headings"; cat "$dir/$page.log"; exit 1; }
  if grep -qiE "Failed to load|Uncaught|CONSOLE\(" "$dir/$page.log"; then
    echo "$page: Chromium reports:"
    grep -iE "Failed to load|Uncaught|CONSOLE\(" "$dir/$page.log"
    exit 1
  fi
done
"${chromium[@]}" --window-size=1280,1600 --screenshot="$dir/run.png" "file://$dir/run.html" \
  >/dev/null 2>&1
head -c 8 "$dir/run.png" | od -An -tx1 | grep -q "89 50 4e 47" || { echo "no PNG"; exit 1; }
[ "$(stat -c %s "$dir/run.png")" -gt 50000 ] || { echo "the screenshot is nearly empty"; exit 1; }

# Bad input: not a result file, a page not named .html, no file at all, a directory, a pipe
# (which would never open: refused at once).
echo "not hdf5" >"$dir/bad.h5"
mkfifo "$dir/pipe.h5"
for args in "report $dir/bad.h5" "report $dir/run.h5 -o $dir/page.txt" "report" "report $dir" \
  "report $dir/pipe.h5"; do
  status=0
  # shellcheck disable=SC2086  # the arguments split on purpose
  timeout 60 "$fleetsim" $args >/dev/null 2>"$dir/err" || status=$?
  [ "$status" -eq 2 ] || { echo "exit $status for: $args"; exit 1; }
done
[ ! -e "$dir/page.txt" ] || { echo "a refused page was written"; exit 1; }
# Nothing but the pages and result files is left beside them (no temporary page).
if ls -A "$dir" | grep -q "^\.report\."; then echo "a temporary page was left"; exit 1; fi
echo "report page: all checks passed"
