#!/usr/bin/env bash
# bench_mpi.sh [BUILD_DIR] [ROUNDS] [REPS] — data parallel against one process on this
# machine (the target: on 2 cores, `mpirun -np 2` x 1 thread reaches >= 0.9x the tokens/s
# of one process x 2 threads, same step batch).
#
# Each round runs, one after the other (the order alternating by round):
#   one process:  dormouse bench --set threads=2 --set batch_size=4 --set grad_accum=2
#   two ranks:    mpirun -np 2 dormouse bench --set threads=1 --set batch_size=4 --set grad_accum=2
# (the d2 model, 8 sequences of 512 bytes a step either way; each bench's baseline is the
# same config, so both of its arms are samples), and reads the step_tokens_per_s row of
# its first arm. Prints each round and then the median over rounds of the ratio two
# ranks / one process, and that ratio against 0.9. Extra arguments after REPS go to both
# benches (e.g. --set precision=fp32). Run it on a quiet machine: the contention flags of
# the rows are printed with them. HISTORY=FILE appends the median as a row of
# benches/history.tsv's columns (what bench:mpi, metric step_tokens_per_s_ratio_np2, spread
# max - min over the rounds, flags: every flag a round's rows carried).
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
reps=${3:-5}
shift $(( $# < 3 ? $# : 3 ))
dm=$build/dormouse
[[ -x $dm ]] || { echo "bench_mpi: $dm not found (make build)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_mpi: mpirun not found (Debian: openmpi-bin)" >&2; exit 2; }
mpirun=(mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
common=(--set batch_size=4 --set grad_accum=2 --reps "$reps" "$@")

# the first arm's step tokens/s and flags from a bench's rows
tokens() { awk -F'\t' '$6 == "step_tokens_per_s" && $5 !~ /\| baseline/ { print $7, ($10 == "" ? "-" : $10), $3; exit }'; }

ratios=()
flags=() machine=
for ((r = 1; r <= rounds; r++)); do
  run_one() { "$dm" bench -v --set threads=2 --baseline threads=2 "${common[@]}" | tokens; }
  run_two() { "${mpirun[@]}" -np 2 "$dm" bench -v --set threads=1 --baseline threads=1 "${common[@]}" | tokens; }
  if (( r % 2 )); then one=$(run_one); two=$(run_two); else two=$(run_two); one=$(run_one); fi
  ratio=$(awk -v a="${two%% *}" -v b="${one%% *}" 'BEGIN { printf "%.3f", a / b }')
  ratios+=("$ratio")
  read -r _ f1 machine <<<"$one"
  read -r _ f2 _ <<<"$two"
  flags+=("$f1" "$f2")
  echo "round $r: one process x 2 threads ${one%% *} tokens/s [$f1], mpirun -np 2 x 1 thread ${two%% *} tokens/s [$f2], ratio $ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
verdict=$(awk -v m="$median" 'BEGIN { print (m >= 0.9) ? "reached" : "NOT reached" }')
echo "median ratio (mpirun -np 2 x 1 thread / one process x 2 threads) over $rounds rounds: $median; the 0.9 target is $verdict"
if [[ -n ${HISTORY:-} ]]; then
  spread=$(printf '%s\n' "${ratios[@]}" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.3f", hi - lo }')
  fl=$(printf '%s\n' "${flags[@]}" | tr ',' '\n' | { grep -v '^-$' || true; } | sort -u | paste -sd, -)
  commit=$(git -C "$(dirname "$0")/.." rev-parse --short HEAD 2>/dev/null || echo -)
  [[ -n $(git -C "$(dirname "$0")/.." status --porcelain --untracked-files=no -- . ':!benches/history.tsv' 2>/dev/null) ]] && fl=${fl:+$fl,}dirty
  printf '%s\t%s\t%s\tbench:mpi\tmixer=kda d_model=256 batch_size=4 grad_accum=2 seq_len=512 | one process threads=2 vs mpirun -np 2 threads=1%s\tstep_tokens_per_s_ratio_np2\t%s\t%s\t%s\t%s\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$machine" "${*:+ $*}" "$median" "$spread" "$rounds" "${fl:--}" >>"$HISTORY"
  echo "history: appended 1 row to $HISTORY"
fi
