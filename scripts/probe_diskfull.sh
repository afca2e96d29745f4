#!/usr/bin/env bash
# Transient full disk campaign (opt-in, not in `make test`; needs root for a tmpfs): TRIALS
# times a tiny run of STEPS steps (a metrics line every step, a checkpoint every 50) trains
# in a tmpfs of SIZE; at a random moment dd fills the tmpfs, half a second later the filler
# is removed. A run that stopped (a checkpoint the full disk refused: exit 1 with the
# error) is resumed until it is done. Then metrics.jsonl must hold every step's line once,
# in order. Counts: trials, runs that stopped and were resumed, lines lost (must be 0).
#   sudo scripts/probe_diskfull.sh [BUILD=build] [TRIALS=6] [SIZE=24m] [STEPS=400]
set -uo pipefail
BUILD=$(cd "${1:-build}" && pwd); TRIALS=${2:-6}; SIZE=${3:-24m}; STEPS=${4:-400}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
M=$(mktemp -d /tmp/dm-diskfull.XXXXXX)
mount -t tmpfs -o size="$SIZE" tmpfs "$M" || { echo "cannot mount a tmpfs (root needed)"; exit 1; }
trap 'umount "$M"; rmdir "$M"' EXIT
zcat "$ROOT/data/kjv.txt.gz" | head -c 2000000 > "$M/corpus.txt"
TINY="--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 --set gate_rank=8 \
--set seq_len=32 --set eval_window=1024 --set threads=1" # as probe_common.sh (its trap is this one's)
SETS="$TINY --set batch_size=2 --set warmup_steps=1 --set log_every=1 --set steps=$STEPS \
--set ckpt_every=50 --set eval_every=100"
lost_all=0; stopped=0; noted=0
for t in $(seq "$TRIALS"); do
  run="$M/run"
  rm -rf "$run"
  "$BUILD/dormouse" train --out "$run" --data "$M/corpus.txt" $SETS >"$M/log" 2>&1 & pid=$!
  sleep "0.$((RANDOM % 8 + 1))"
  dd if=/dev/zero of="$M/fill" bs=64k 2>/dev/null; sleep 0.5; rm -f "$M/fill"
  wait $pid; rc=$?
  grep -q "cannot write metrics.jsonl" "$M/log" && noted=$((noted + 1))
  tries=0
  while [ $rc -ne 0 ] && [ $tries -lt 5 ]; do
    stopped=$((stopped + 1)); tries=$((tries + 1))
    echo "trial $t: exit $rc: $(grep -i "error" "$M/log" | tail -1)"
    if [ -d "$run" ] && ls "$run" | grep -q '^ckpt-'; then
      "$BUILD/dormouse" train --resume "$run" >"$M/log" 2>&1; rc=$?
    else
      rm -rf "$run"; "$BUILD/dormouse" train --out "$run" --data "$M/corpus.txt" $SETS >"$M/log" 2>&1; rc=$?
    fi
  done
  have=$(grep -o '^{"step": [0-9]*' "$run/metrics.jsonl" | awk '{print $2}' | tr '\n' ' ')
  want=$(seq -s ' ' 1 "$STEPS")
  lost=$(( STEPS - $(grep -c '^{"step"' "$run/metrics.jsonl") ))
  [ "$have" = "$want " ] || { echo "trial $t: metrics.jsonl lines are not steps 1..$STEPS once each"; [ $lost -eq 0 ] && lost=1; }
  echo "trial $t: exit $rc, $(grep -c '^{"step"' "$run/metrics.jsonl") lines of $STEPS"
  lost_all=$((lost_all + lost))
done
echo "transient full disk ($SIZE tmpfs): $TRIALS trials, $noted noted a refused metrics write, $stopped stopped and were resumed, $lost_all lines lost"
[ $lost_all -eq 0 ]
