#!/usr/bin/env bash
# The main job of `make run`: train the default (d2) model on the bundled corpus, prepared
# once into data/kjv (DATA=DIR: elsewhere) as tokens of prepare's default vocabulary with
# the byte model's validation text (--val-split tail: the last 81,920 bytes), for a
# wall-clock budget of 5 minutes (`--time-budget 5m`: steps fixed from the measured rate,
# evaluation included), print the validation BPB, draw the curves (runs/default/plot.png)
# and print a sample.
# BUDGET=D changes the budget (e.g. BUDGET=90s); STEPS=N trains N steps instead of a
# budget; TRAIN_ARGS adds options to `dormouse train`.
# A previous runs/default is moved aside (to runs/default.YYYYmmdd-HHMMSS, its time), never
# deleted.
set -euo pipefail
build=${1:-build}
out=runs/default
data=${DATA:-data/kjv}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${STEPS:-} ]]; then length=(--set "steps=$STEPS"); else length=(--time-budget "${BUDGET:-5m}"); fi
if [[ -e $out ]]; then
  old=$out.$(date -r "$out" +%Y%m%d-%H%M%S)
  for k in $(seq 2 1000); do [[ -e $old ]] || break; old=$out.$(date -r "$out" +%Y%m%d-%H%M%S)-$k; done
  mv "$out" "$old"
  echo "make run: moved the previous $out to $old (delete it when you no longer need it)"
fi
if [[ -d $data ]]; then
  echo "make run: the bundled corpus as prepared in $data"
else
  "$build/dormouse" prepare "$root/data/kjv.txt.gz" --out "$data" --val-split tail
fi
# shellcheck disable=SC2086  # TRAIN_ARGS is a list of options
"$build/dormouse" train --data "$data" --out "$out" "${length[@]}" ${TRAIN_ARGS:-}
"$build/dormouse" eval "$out"
"$build/dormouse" plot "$out" || echo "make run: no plot (see the line above); the curves are in $out/metrics.jsonl"
echo "--- sample ($build/dormouse sample $out --prompt 'And God said' --len 400 --temperature 0.8 --seed 1) ---"
"$build/dormouse" sample "$out" --prompt "And God said" --len 400 --temperature 0.8 --seed 1
