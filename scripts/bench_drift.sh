#!/usr/bin/env bash
# bench_drift.sh [BUILD_DIR] [RUN_DIR] — does a trained model's step keep the speed of a
# fresh one's? Trains the default model STEPS steps (default 500) into RUN_DIR (default
# runs/bench-drift; an existing run there is used as it is), then times its step on the
# trained weights against the same model at initialisation (`dormouse bench --from`),
# twice: with denormals flushed (dormouse's mode) and with DM_CPU_KEEP_DENORMALS=1
# (gradual underflow). The rows go to benches/history.tsv (HISTORY=... elsewhere); the
# step_speedup_over_baseline rows are the init's step time over the trained one's (1.0: no
# drift). REPS (default 7) reps per arm. Minutes on 2 cores; run it on a quiet machine.
set -euo pipefail
build=${1:-build}
run=${2:-runs/bench-drift}
steps=${STEPS:-500}
reps=${REPS:-7}
history=${HISTORY:-benches/history.tsv}
dm=$build/dormouse
[[ -x $dm ]] || { echo "error: $dm not found (build first: make build)" >&2; exit 2; }
if [[ ! -f $run/config.json ]]; then
  echo "# training the default model $steps steps into $run"
  "$dm" train --out "$run" --steps "$steps" --set eval_every=0 >/dev/null
fi
for mode in flushed kept; do
  echo "# denormals $mode"
  if [[ $mode == kept ]]; then
    DM_CPU_KEEP_DENORMALS=1 "$dm" bench --from "$run" --reps "$reps" --history "$history"
  else
    "$dm" bench --from "$run" --reps "$reps" --history "$history"
  fi | grep -E '^# (weights|trained|init|speed-up|contended|quiet|history)'
done
