#!/usr/bin/env bash
# bench_budget.sh [BUILD] [BUDGET] — does a time-budget run keep its budget on this machine,
# as it is now? Trains the default model with --time-budget BUDGET (default 60s) into a
# temporary run directory and prints the wall clock of the command against the budget as a
# row in the columns of benches/history.tsv (metric wall_over_budget: 1.00 = the budget
# exactly; the promise is at most 1.05 on a machine that slows down up to 2x, docs/budget.md).
# The row's flags are the run's contention flags: a busy machine is what this measures.
# A measurement, not a test (the tests use a clock they drive: tests/test_train.c).
set -euo pipefail
build=${1:-build}
budget=${2:-60s}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$(date +%s.%N)
"$build/dormouse" train --out "$dir/run" --time-budget "$budget" >"$dir/log" 2>&1 || {
  cat "$dir/log"; exit 1; }
end=$(date +%s.%N)
secs=$(awk -v b="$budget" 'BEGIN {
  n = 0; s = b; while (match(s, /^[0-9]+[hms]?/)) { t = substr(s, 1, RLENGTH); s = substr(s, RLENGTH + 1);
  u = substr(t, length(t)); v = t + 0; n += u == "h" ? 3600 * v : u == "m" ? 60 * v : v }
  print n }')
steps=$(awk -F'[:,]' '/"steps"/ { gsub(/ /, "", $2); print $2; exit }' "$dir/run/config.json")
flags=$(awk -F'"' '/"contention":/ { print $4 }' "$dir/run/summary.json")
commit=$(git rev-parse --short HEAD 2>/dev/null || echo -)
machine="$(nproc)cores"
grep -E '^(time budget|summary)' "$dir/log" | sed 's/^/# /'
awk -v s="$start" -v e="$end" -v b="$secs" -v c="$commit" -v m="$machine" -v n="$steps" \
    -v f="$flags" -v bud="$budget" 'BEGIN {
  printf "%s\t%s\t%s\tbench:budget\ttime_budget=%s steps=%s\twall_over_budget\t%.3f\t\t1\t%s\n",
         strftime("%Y-%m-%d"), c, m, bud, n, (e - s) / b, f }'
