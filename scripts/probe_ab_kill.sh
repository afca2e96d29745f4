#!/usr/bin/env bash
# kill -9 of `dormouse ab` campaign (opt-in, not in `make test`): TRIALS times, a sweep of
# two arms (one seed, STEPS steps a cell) is killed with SIGKILL at a random moment while
# a cell trains; its training process must be gone within 2 s, and the rerun of the same
# sweep must finish (exit 0). Counts: trials, orphans left, reruns that failed.
#   scripts/probe_ab_kill.sh [BUILD=build] [TRIALS=50] [STEPS=300]
set -uo pipefail
BUILD=$(cd "${1:-build}" && pwd); TRIALS=${2:-50}; STEPS=${3:-300}
source "$(dirname "$0")/probe_common.sh"
SETS="$TINY --set batch_size=2 --set warmup_steps=1"
orphans=0; failed=0; killed_in_cell=0
for t in $(seq "$TRIALS"); do
  dir="$D/ab$t"
  cmd=("$BUILD/dormouse" ab --dir "$dir" --data "$ROOT/data/kjv.txt.gz" $SETS --steps "$STEPS" \
       --seeds 1 --variant 'lr2: lr=0.006')
  "${cmd[@]}" >/dev/null 2>&1 & pid=$!
  # a random moment once a cell's training process runs (up to 10 s for it to start)
  for i in $(seq 200); do kid=$(cat /proc/$pid/task/$pid/children 2>/dev/null | awk '{print $1}'); [ -n "$kid" ] && break; sleep 0.05; done
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  kid=$(cat /proc/$pid/task/$pid/children 2>/dev/null | awk '{print $1}')
  kill -9 $pid; wait $pid 2>/dev/null
  if [ -n "$kid" ]; then
    killed_in_cell=$((killed_in_cell + 1))
    for i in $(seq 40); do [ -e /proc/$kid ] && [ "$(awk '{print $3}' /proc/$kid/stat 2>/dev/null)" != Z ] || break; sleep 0.05; done
    if [ -e /proc/$kid ] && [ "$(awk '{print $3}' /proc/$kid/stat 2>/dev/null)" != Z ]; then
      orphans=$((orphans + 1)); echo "trial $t: the training process $kid outlived its sweep"; kill -9 $kid
    fi
  fi
  if ! "${cmd[@]}" >"$D/rerun.log" 2>&1; then
    failed=$((failed + 1)); echo "trial $t: the rerun failed: $(tail -1 "$D/rerun.log")"
  fi
  rm -rf "$dir"
done
echo "ab kill -9: $TRIALS trials ($killed_in_cell while a cell trained): $orphans orphans, $failed reruns failed"
[ $orphans -eq 0 ] && [ $failed -eq 0 ]
