#!/usr/bin/env bash
# The main job of `make run`: train the default (d2) model on the bundled corpus for a
# budget that finishes in under 10 minutes on 2 cores (600 steps of 8 x 512 bytes), print
# the validation BPB, and print a sample. STEPS=N overrides the budget.
set -euo pipefail
build=${1:-build}
out=runs/default
STEPS=${STEPS:-600}
rm -rf "$out"
"$build/dormouse" train --out "$out" --set steps="$STEPS" --set eval_every=200 --set warmup_steps=50
"$build/dormouse" eval "$out"
echo "--- sample (dormouse sample $out --prompt 'And God said' --len 400 --seed 1) ---"
"$build/dormouse" sample "$out" --prompt "And God said" --len 400 --temperature 0.8 --seed 1
