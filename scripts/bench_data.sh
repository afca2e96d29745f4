#!/usr/bin/env bash
# bench_data.sh [BUILD] [WORK_DIR] — `make bench-data`: corpora of any size (docs/data.md).
#
# Generates a text-like corpus of GIB GiB (default 16; files of 1 GiB,
# each the bundled corpus repeated, every copy headed by a numbered line, so no two
# copies are the same bytes) in WORK_DIR (default bench-data/ in the source tree; it
# needs about 2 x GIB + 4 GiB of free disk, and is removed at the end unless KEEP=1),
# then measures in one run:
#   dd            the disk's sequential write speed: 4 GiB of dd with fsync
#   prepare       `dormouse prepare` of the corpus (1 GiB of it to val.bin): MB/s and its
#                 ratio to dd's (the page cache dropped first where we may: root)
#   first step    seconds from the launch of `train --data DATA_DIR` (d2) to its first
#                 metrics line: caches dropped first (where allowed), then warm; and of
#                 the bundled corpus, caches dropped (the program's own libraries are
#                 read from disk then too)
#   rss, step     a d2 run of STEPS steps (default 20) on DATA_DIR and on the bundled
#                 corpus, ROUNDS rounds (default 3) interleaved, the page cache dropped
#                 before the first (where allowed): peak RSS (summary.json) and median
#                 ms/step of each, their difference and ratio
#   eval          eval_windows=EVAL_WINDOWS (default 4) on the 1 GiB val.bin with the d2
#                 model: bytes scored per second
#   eval all      eval_windows=all on the whole 1 GiB val.bin with a tiny model (d_model
#                 32, one layer: about 20 minutes on 2 cores; d2 would take hours at the
#                 rate above): bytes scored per second and the BPB (EVAL_ALL=0 skips it)
# (VAL_MIB, DD_GIB, HISTORY change the 1 GiB of val.bin, the 4 GiB of dd, the file),
# and appends the rows to benches/history.tsv (what bench:data, the project's columns:
# date, commit, machine, what, config, metric, value, spread, n, flags). I/O heavy: run it
# alone, e.g. `nice -n 19 make bench-data`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
work=${2:-$root/bench-data}
gib=${GIB:-16}
steps=${STEPS:-20}
rounds=${ROUNDS:-3}
valmib=${VAL_MIB:-1024}
ddgib=${DD_GIB:-4}
evalw=${EVAL_WINDOWS:-4}
evalall=${EVAL_ALL:-1}
hist=${HISTORY:-$root/benches/history.tsv}
dm=$build/dormouse
corpus=$root/data/kjv.txt.gz
mkdir -p "$work"
work=$(cd "$work" && pwd)
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$work"/corpus "$work"/data "$work"/dd.bin "$work"/one.txt "$work"/run-*' EXIT

now() { date +%s.%N; }
drop() { # the page cache, where we may
  if [[ -w /proc/sys/vm/drop_caches ]]; then sync; echo 3 >/proc/sys/vm/drop_caches; echo dropped
  else echo kept; fi
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
spread() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.4g", hi - lo }'; }

# the machine as `dormouse bench` names it (io/history.c), from its first row
machine=$("$dm" bench -v --reps 1 --set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 \
  --set gate_rank=8 --set batch_size=1 --set seq_len=32 2>/dev/null |
  awk -F'\t' '!/^#/ && m == "" { m = $3 } END { print m }')
[[ -n $machine ]] || { echo "bench-data: \`dormouse bench -v\` printed no row" >&2; exit 1; }

echo "bench-data: generating ${gib} GiB in $work/corpus"
mkdir -p "$work/corpus"
one=$work/one.txt
zcat "$corpus" >"$one"
per=$(( (1 << 30) / $(stat -c %s "$one") + 1 ))
for f in $(seq 1 "$gib"); do
  out=$work/corpus/part-$(printf %03d "$f").txt
  [[ -f $out ]] && continue
  for c in $(seq 1 "$per"); do printf 'copy %d of part %d\n' "$c" "$f"; cat "$one"; done >"$out.tmp"
  truncate -s $((1 << 30)) "$out.tmp" && mv "$out.tmp" "$out"
done
total=$(du -cb "$work"/corpus/*.txt | tail -1 | cut -f1)

echo "bench-data: dd"
rm -f "$work/dd.bin"
t0=$(now)
dd if=/dev/zero of="$work/dd.bin" bs=8M count=$((ddgib * 128)) conv=fsync status=none
t1=$(now)
dd_mbs=$(awk -v b=$((ddgib << 30)) -v a="$t0" -v c="$t1" 'BEGIN { printf "%.1f", b / (c - a) / 1e6 }')
rm -f "$work/dd.bin"

echo "bench-data: prepare"
rm -rf "$work/data"
cache=$(drop)
t0=$(now)
"$dm" prepare --vocab 256 "$work/corpus" --out "$work/data" --val-bytes $((valmib << 20)) | tail -2
t1=$(now)
prep_mbs=$(awk -v b="$total" -v a="$t0" -v c="$t1" 'BEGIN { printf "%.1f", b / (c - a) / 1e6 }')
prep_ratio=$(awk -v p="$prep_mbs" -v d="$dd_mbs" 'BEGIN { printf "%.3f", p / d }')

echo "bench-data: time to the first step"
first() { # seconds from the launch of a d2 train on $1 to its first metrics line
  local run=$work/run-first
  rm -rf "$run"
  local t0 t1 pid
  t0=$(now)
  "$dm" train --data "$1" --out "$run" --set steps=3 --set log_every=1 >/dev/null &
  pid=$!
  until [[ -s $run/metrics.jsonl ]] || ! kill -0 $pid 2>/dev/null; do sleep 0.01; done
  t1=$(now)
  wait $pid
  awk -v a="$t0" -v c="$t1" 'BEGIN { printf "%.3f", c - a }'
}
drop >/dev/null
first_s=$(first "$work/data")      # cold: the page cache dropped (where allowed)
first_warm=$(first "$work/data")   # warm: the program and its libraries cached
drop >/dev/null
first_b=$(first "$corpus")         # the bundled corpus, cold the same way

echo "bench-data: d2 on the data directory and on the bundled corpus, interleaved"
declare -A ms rss
drop >/dev/null # the first arm starts cold (where allowed)
for r in $(seq 1 "$rounds"); do
  for arm in data bundled; do
    [[ $arm == data ]] && src=$work/data || src=$corpus
    run=$work/run-$arm-$r
    rm -rf "$run"
    "$dm" train --data "$src" --out "$run" --set steps="$steps" --set log_every=1 >/dev/null
    m=$(awk -F'"ms_per_step": ' 'NR > 2 { split($2, a, ","); print a[1] }' "$run/metrics.jsonl" | median)
    ms[$arm]+="$m "
    rss[$arm]+="$(grep -o '"peak_rss_bytes": [0-9]*' "$run/summary.json" | awk '{ printf "%.1f", $2 / 1048576 }') "
  done
done
med() { tr ' ' '\n' | grep . | median; }
spr() { tr ' ' '\n' | grep . | spread; }
ms_d=$(echo "${ms[data]}" | med) ms_b=$(echo "${ms[bundled]}" | med)
rss_d=$(echo "${rss[data]}" | med) rss_b=$(echo "${rss[bundled]}" | med)
step_ratio=$(awk -v a="$ms_d" -v b="$ms_b" 'BEGIN { printf "%.4f", a / b }')
rss_delta=$(awk -v a="$rss_d" -v b="$rss_b" 'BEGIN { printf "%.1f", a - b }')

echo "bench-data: eval_windows=$evalw on val.bin"
t0=$(now)
"$dm" eval "$work/run-data-1" --data "$work/data" --set eval_windows="$evalw" | grep val_bpb
t1=$(now)
eval_bps=$(awk -v b=$((evalw * 81920)) -v a="$t0" -v c="$t1" 'BEGIN { printf "%.0f", b / (c - a) }')

tiny="--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 --set gate_rank=8"
if [[ $evalall == 1 ]]; then
  echo "bench-data: eval_windows=all on val.bin, a tiny model"
  rm -rf "$work/run-tiny"
  # shellcheck disable=SC2086
  "$dm" train --data "$work/data" --out "$work/run-tiny" $tiny --set steps=2 >/dev/null
  t0=$(now)
  # its progress lines to the console as they come (tee to stderr without reopening it)
  all_line=$("$dm" eval "$work/run-tiny" --set eval_windows=all | tee >(cat >&2) | grep val_bpb)
  t1=$(now)
  all_bps=$(awk -v b=$((valmib << 20)) -v a="$t0" -v c="$t1" 'BEGIN { printf "%.0f", b / (c - a) }')
  all_bpb=$(echo "$all_line" | awk '{ print $2 }')
fi

# the rows
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
flags=cache-$cache
[[ -n $(git -C "$root" status --porcelain --untracked-files=no -- . ':!benches/history.tsv' 2>/dev/null) ]] && flags+=,dirty
load=$(cut -d' ' -f1 /proc/loadavg)
awk -v l="$load" -v c="$(nproc)" 'BEGIN { exit !(l > c + 0.5) }' && flags+=,contended
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
cfg="corpus=${gib}GiB text files=$gib val=${valmib}MiB d2"
row() { printf '%s\t%s\t%s\tbench:data\t%s\t%s\t%s\t%s\t%s\t%s\n' "$date" "$commit" "$machine" "$1" "$2" "$3" "$4" "$5" "$flags"; }
rows=$({
  row "$cfg | dd bs=8M ${ddgib}GiB conv=fsync" dd_write_mb_per_s "$dd_mbs" 0 1
  row "$cfg" prepare_mb_per_s "$prep_mbs" 0 1
  row "$cfg | prepare / dd" prepare_ratio_to_dd "$prep_ratio" 0 1
  row "$cfg | data dir, cache $cache, launch to the first metrics line" first_step_s "$first_s" 0 1
  row "$cfg | data dir, cache warm, launch to the first metrics line" first_step_s "$first_warm" 0 1
  row "$cfg | bundled corpus, cache $cache, launch to the first metrics line" first_step_s "$first_b" 0 1
  row "$cfg | data dir, steps=$steps" peak_rss_mib "$rss_d" "$(echo "${rss[data]}" | spr)" "$rounds"
  row "$cfg | bundled corpus, steps=$steps" peak_rss_mib "$rss_b" "$(echo "${rss[bundled]}" | spr)" "$rounds"
  row "$cfg | data dir - bundled" peak_rss_delta_mib "$rss_delta" 0 "$rounds"
  row "$cfg | data dir, steps=$steps" step_ms "$ms_d" "$(echo "${ms[data]}" | spr)" "$rounds"
  row "$cfg | bundled corpus, steps=$steps" step_ms "$ms_b" "$(echo "${ms[bundled]}" | spr)" "$rounds"
  row "$cfg | data dir / bundled, interleaved" step_ms_ratio "$step_ratio" 0 "$rounds"
  row "$cfg | eval_windows=$evalw x 81920, d2" eval_bytes_per_s "$eval_bps" 0 1
  if [[ $evalall == 1 ]]; then
    row "$cfg | eval_windows=all, d_model=32 n_layer=1" eval_bytes_per_s "$all_bps" 0 1
    row "$cfg | eval_windows=all, d_model=32 n_layer=1, 2 steps trained" val_bpb "$all_bpb" 0 1
  fi
})
printf '%s\n' "$rows" | tee -a "$hist"
echo "bench-data: appended $(printf '%s\n' "$rows" | wc -l) rows to $hist (page cache: $cache)"
