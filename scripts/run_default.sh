#!/usr/bin/env bash
# The main job of `make run`: train the default (d2) model on the bundled corpus for a
# budget that finishes in a few minutes on 2 cores, evaluate it, and print a sample.
set -euo pipefail
build=${1:-build}
out=runs/default
STEPS=${STEPS:-300}
rm -rf "$out"
"$build/dormouse" train --out "$out" --set steps="$STEPS" --set eval_every=100 --set warmup_steps=30
"$build/dormouse" eval "$out"
echo "--- sample ---"
"$build/dormouse" sample "$out" --prompt "And God said" --len 400 --temperature 0.8 --seed 1
