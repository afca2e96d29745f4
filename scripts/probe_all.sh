#!/usr/bin/env bash
# The outside probe, every class in one run (opt-in, not in `make test`; docs/robustness.md
# "The campaigns"): it drives the `dormouse` command as a user would, never the test
# suite, for about SECONDS of wall clock in all (each class gets its share; a class ends
# its trial in hand when its share is spent), and prints per class the trials, the
# answers that were right (refused with exit 2 or 1 and one error line, or the same
# result as the untouched run), the wrong answers (a different result accepted, a crash
# by a signal, a hang) and the silent changes (exit 0 where a refusal or a note was due).
# Every class needs 0 wrong and 0 silent.
#   kill9     kill -9 of a ckpt_every=1 tiny run at a random moment, resumed until done:
#             every checkpoint loads, at most 3 exist, and the end is the bits of the
#             uninterrupted run
#   damage    a bit flip, zeroed block or random bytes in the newest checkpoint's model or
#             optimizer file: eval and train --resume refuse it or fall back to the one
#             before (eval: that checkpoint's BPB; resume: the uninterrupted run's bits)
#   forged    a checkpoint of another shape (valid checksums) planted as the newest: eval,
#             sample and train --resume all pass over it, with the same note
#   config    bad --set values, config files and config.json edits: exit 2 with one line;
#             an edited exactness key refused at resume, a mutable one said ("changed:")
#   files     an emptied data_path, a ckpt-N.tmp or DIR.partial-PID given as input, a text
#             file given as a checkpoint, a giant shape: refused, never trained or allocated
#   diskfull  a 4 MB tmpfs filled for 0.3 s at a random moment of a run in it (root; else a
#             file-size limit): exit 0 with the uninterrupted run's bits, or exit 1 naming
#             what failed and a resume to those bits
#   mpi       (when mpirun runs here) kill -9 of one rank of `mpirun -np 2 train`: the
#             job ends (no hang), the last checkpoint resumes to the uninterrupted bits
#   scripts/probe_all.sh [BUILD=build] [SECONDS=240] [SEED=1] [CLASSES="kill9 damage ..."]
set -uo pipefail
BUILD=$(cd "${1:-build}" && pwd); SECONDS_ALL=${2:-240}; SEED=${3:-1}
CLASSES=${4:-"kill9 damage forged config files diskfull mpi"}
source "$(dirname "$0")/probe_common.sh"
DM="$BUILD/dormouse"
RANDOM=$SEED
CORPUS="$ROOT/data/kjv.txt.gz"
RUN10="$TINY --set batch_size=2 --set warmup_steps=1 --set log_every=1 --set steps=10 \
--set ckpt_every=1 --set eval_every=0"
n_classes=$(wc -w <<<"$CLASSES")
SHARE=$((SECONDS_ALL / n_classes))
declare -A TRIALS RIGHT WRONG SILENT
WHY="$D/why.txt"; : >"$WHY"

right() { RIGHT[$1]=$((${RIGHT[$1]:-0} + 1)); }
wrong() { WRONG[$1]=$((${WRONG[$1]:-0} + 1)); echo "$1: WRONG: $2" >>"$WHY"; }
silent() { SILENT[$1]=$((${SILENT[$1]:-0} + 1)); echo "$1: SILENT: $2" >>"$WHY"; }
trial() { TRIALS[$1]=$((${TRIALS[$1]:-0} + 1)); }
# the last metrics line's loss of a run and its final val_bpb: the run's bits, as text
bits() { tail -n 1 "$1/metrics.jsonl" 2>/dev/null | python3 -c \
  'import json,sys; d=json.loads(sys.stdin.read() or "{}"); print(d.get("step"), repr(d.get("loss")), d.get("val_bpb"))'; }
bpb() { sed -n 's/.*val_bpb \([0-9.]*\).*/\1/p' <<<"$1" | head -1; }
# a refusal: exit 1 or 2 and exactly one line on stderr starting "error: "
refused() { # rc errfile
  [[ $1 == 1 || $1 == 2 ]] && [[ $(wc -l <"$2") == 1 ]] && grep -q '^error: ' "$2"; }
# the class runs while its share lasts: `while more CLASS; do ... done`
declare -A T0
more() { [[ -z ${T0[$1]:-} ]] && T0[$1]=$(date +%s); (($(date +%s) - T0[$1] < SHARE)); }

# the uninterrupted 10-step run every class compares with
"$DM" train --out "$D/ref" --data "$CORPUS" $RUN10 >/dev/null 2>&1 || { echo "the reference run failed"; exit 1; }
REF=$(bits "$D/ref")
"$DM" train --out "$D/base" --data "$CORPUS" $RUN10 --until 6 >/dev/null 2>&1
BASE5=$(bpb "$("$DM" eval "$D/base/ckpt-00000005" 2>/dev/null)")
BASE6=$(bpb "$("$DM" eval "$D/base/ckpt-00000006" 2>/dev/null)")

resume_to_end() { # dir: resumed until done (at most 8 tries); 0 when it ends at REF
  local k rc
  for k in 1 2 3 4 5 6 7 8; do
    timeout 120 "$DM" train --resume "$1" >"$D/resume.log" 2>&1; rc=$?
    [[ $rc == 0 ]] && break
    grep -q "nothing to train" "$D/resume.log" && break
  done
  [[ $(bits "$1") == "$REF" ]]
}

probe_kill9() {
  while more kill9; do
    trial kill9
    rm -rf "$D/k"
    "$DM" train --out "$D/k" --data "$CORPUS" $RUN10 >/dev/null 2>&1 & local pid=$!
    sleep "0.$((RANDOM % 9))$((RANDOM % 10))"
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    local n; n=$(ls -d "$D"/k/ckpt-???????? 2>/dev/null | wc -l)
    if ((n > 3)); then wrong kill9 "$n checkpoints"; continue; fi
    local bad=0 c
    for c in "$D"/k/ckpt-????????; do
      [[ -d $c ]] || continue
      "$DM" eval "$c" >/dev/null 2>"$D/e.err" || { bad=1; wrong kill9 "$c does not load: $(cat "$D/e.err")"; }
    done
    ((bad)) && continue
    if [[ ! -f $D/k/config.json ]]; then right kill9; continue; fi # killed before it began
    if [[ ! -d $(ls -d "$D"/k/ckpt-???????? 2>/dev/null | head -1) ]]; then
      timeout 60 "$DM" train --resume "$D/k" >/dev/null 2>"$D/r.err"; local rc=$?
      if [[ $rc == 2 ]] && grep -q "no checkpoint" "$D/r.err"; then right kill9; else wrong kill9 "resume without a checkpoint: exit $rc"; fi
      continue
    fi
    if resume_to_end "$D/k"; then right kill9; else wrong kill9 "resumed run ended at $(bits "$D/k"), not $REF"; fi
  done
}

mutate() { # file seed: a bit flip, zeroed block or random bytes in the data section
  python3 - "$1" "$2" <<'PY'
import random, struct, sys
p, seed = sys.argv[1], int(sys.argv[2]); r = random.Random(seed)
b = bytearray(open(p, 'rb').read()); hl = struct.unpack('<Q', b[:8])[0]; o = bytes(b)
while bytes(b) == o:
    k = r.choice(['flip', 'zeros', 'random'])
    i = r.randrange(8 + hl, len(b))
    if k == 'flip': b[i] ^= 1 << r.randrange(8)
    elif k == 'zeros': b[i:i + 512] = bytes(len(b[i:i + 512]))
    else: b[i:i + 64] = bytes(r.randrange(256) for _ in b[i:i + 64])
open(p, 'wb').write(b)
PY
}

probe_damage() {
  while more damage; do
    trial damage
    rm -rf "$D/m"; cp -r "$D/base" "$D/m"
    local which=$((RANDOM % 2)) f=model
    ((which)) && f=optim
    mutate "$D/m/ckpt-00000006/$f.safetensors" $RANDOM
    if [[ $f == model ]]; then # eval of the file itself: refused; of the run: the one before
      "$DM" eval "$D/m/ckpt-00000006" >/dev/null 2>"$D/e.err"; local rc=$?
      if ! refused $rc "$D/e.err"; then wrong damage "eval of the damaged file: exit $rc"; continue; fi
      local out; out=$("$DM" eval "$D/m" 2>"$D/e2.err")
      if [[ $(bpb "$out") != "$BASE5" ]]; then wrong damage "eval fell back to $(bpb "$out"), not $BASE5"; continue
      elif ! grep -q "skipping a checkpoint" "$D/e2.err"; then silent damage "fallback without a note"; continue; fi
    fi
    if resume_to_end "$D/m"; then right damage; else wrong damage "$f damaged: the resume ended at $(bits "$D/m"): $(tail -c 300 "$D/resume.log")"; fi
  done
}

probe_forged() {
  "$DM" train --out "$D/other" --data "$CORPUS" $RUN10 --set d_model=64 --set n_head=4 --until 7 >/dev/null 2>&1
  while more forged; do
    trial forged
    rm -rf "$D/f"; cp -r "$D/base" "$D/f"; cp -r "$D/other/ckpt-00000007" "$D/f/"
    local out e s r
    out=$("$DM" eval "$D/f" 2>"$D/fe.err"); e=$(grep -c "is not a checkpoint of" "$D/fe.err")
    "$DM" sample "$D/f" --len 8 --seed 1 >/dev/null 2>"$D/fs.err"; s=$(grep -c "is not a checkpoint of" "$D/fs.err")
    timeout 120 "$DM" train --resume "$D/f" >"$D/fr.log" 2>&1; local rc=$?; r=$(grep -c "is not a checkpoint of" "$D/fr.log")
    if [[ $(bpb "$out") != "$BASE6" ]]; then wrong forged "eval gave $(bpb "$out"), the run's newest $BASE6"
    elif [[ $rc != 0 || $(bits "$D/f") != "$REF" ]]; then wrong forged "resume: exit $rc, $(bits "$D/f")"
    elif ((e != 1 || s != 1 || r != 1)); then silent forged "notes eval $e sample $s train $r"
    else right forged; fi
  done
}

probe_config() {
  local bad_sets=("d_model=0" "n_head=3" "lr=-1" "lr=nan" "steps=1e3" "seed=-1" "mixer=rnn"
    "precision=fp8" "eval_window=1" "threads=-2" "batch_size=0x10" "time_budget=5 m"
    "warmup_steps=" "=3" "grad_clip=inf" "lr_schedule=linear" "adam_eps=0" "chunk_size=7")
  local keys=(beta1 seed muon_lr lr batch_size grad_clip warmup_steps min_lr_frac)
  local vals=(0.8 7 0.05 0.001 4 0.5 3 0.2)
  while more config; do
    trial config
    case $((RANDOM % 3)) in
    0) local s=${bad_sets[$((RANDOM % ${#bad_sets[@]}))]}
       "$DM" train --out "$D/c" --data "$CORPUS" $TINY --set "$s" >/dev/null 2>"$D/c.err"; local rc=$?
       if refused $rc "$D/c.err" && [[ $rc == 2 && ! -e $D/c ]]; then right config
       elif ((rc == 0)); then silent config "--set $s accepted"; rm -rf "$D/c"
       else wrong config "--set $s: exit $rc, $(head -c 200 "$D/c.err")"; rm -rf "$D/c"; fi ;;
    1) local i=$((RANDOM % ${#keys[@]}))
       rm -rf "$D/cj"; cp -r "$D/base" "$D/cj"
       python3 - "$D/cj/config.json" "${keys[$i]}" "${vals[$i]}" <<'PY'
import json, sys
p, k, v = sys.argv[1:]; c = json.load(open(p)); c[k] = json.loads(v); json.dump(c, open(p, 'w'))
PY
       timeout 60 "$DM" train --resume "$D/cj" >/dev/null 2>"$D/cj.err"; local rc=$?
       if refused $rc "$D/cj.err" && [[ $rc == 2 ]] && grep -q "config.json has ${keys[$i]}=" "$D/cj.err"; then right config
       elif ((rc == 0)); then silent config "config.json ${keys[$i]}=${vals[$i]} trained on"
       else wrong config "config.json ${keys[$i]}: exit $rc"; fi ;;
    2) rm -rf "$D/cs"; cp -r "$D/base" "$D/cs"
       python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['steps']=12; c['log_every']=2; json.dump(c,open(p,'w'))" "$D/cs/config.json"
       timeout 60 "$DM" train --resume "$D/cs" --until 8 >"$D/cs.log" 2>&1; local rc=$?
       if ((rc == 0)) && grep -q "changed: steps 10 -> 12" "$D/cs.log" && grep -q "changed: log_every 1 -> 2" "$D/cs.log"; then right config
       elif ((rc == 0)); then silent config "steps/log_every changed without a word"
       else wrong config "a mutable key refused: exit $rc"; fi ;;
    esac
  done
}

probe_files() {
  printf 'just some text\n' >"$D/notes.txt"
  while more files; do
    trial files
    local k=$((RANDOM % 5)) rc what
    case $k in
    0) rm -rf "$D/e"; cp -r "$D/base" "$D/e"; : >"$D/e/data_path"; what="empty data_path"
       timeout 60 "$DM" train --resume "$D/e" >/dev/null 2>"$D/x.err"; rc=$? ;;
    1) rm -rf "$D/t"; cp -r "$D/base" "$D/t"; cp -r "$D/t/ckpt-00000006" "$D/t/ckpt-00000009.tmp"; what="ckpt-N.tmp"
       "$DM" eval "$D/t/ckpt-00000009.tmp" >/dev/null 2>"$D/x.err"; rc=$? ;;
    2) [[ -d $D/pd.partial-77 ]] || { "$DM" prepare --vocab 256 "$CORPUS" --out "$D/pd" >/dev/null 2>&1; mv "$D/pd" "$D/pd.partial-77"; }
       what="DIR.partial-PID"; rm -rf "$D/pr"
       "$DM" train --out "$D/pr" --data "$D/pd.partial-77" $RUN10 >/dev/null 2>"$D/x.err"; rc=$? ;;
    3) what="a text file as a checkpoint"
       "$DM" eval "$D/notes.txt" >/dev/null 2>"$D/x.err"; rc=$? ;;
    4) what="a giant shape"; rm -rf "$D/g"
       (ulimit -v 8000000; timeout 60 "$DM" train --out "$D/g" --data "$CORPUS" --set d_model=16384 --set n_head=16 --set head_dim=1024 --set steps=1) >/dev/null 2>"$D/x.err"; rc=$? ;;
    esac
    if refused $rc "$D/x.err"; then right files
    elif ((rc == 0)); then silent files "$what accepted"
    else wrong files "$what: exit $rc, $(head -c 200 "$D/x.err")"; fi
  done
}

probe_diskfull() {
  local M="$D/tmpfs" fill
  mkdir -p "$M"
  if mount -t tmpfs -o size=4m tmpfs "$M" 2>/dev/null; then
    trap 'umount "$D/tmpfs" 2>/dev/null; rm -rf "$D"' EXIT
  else
    M=""; echo "diskfull: no tmpfs (root needed): a file-size limit stands in for the full disk" >>"$WHY"
  fi
  while more diskfull; do
    trial diskfull
    local run="${M:-$D}/df"
    rm -rf "$run"
    if [[ -n $M ]]; then # the disk fills at a random moment for 0.3 s
      "$DM" train --out "$run" --data "$CORPUS" $RUN10 >/dev/null 2>"$D/df.err" & local pid=$!
      sleep "0.$((RANDOM % 6))$((RANDOM % 10))"
      dd if=/dev/zero of="$M/fill" bs=64k 2>/dev/null; sleep 0.3; rm -f "$M/fill"
      wait $pid; local rc=$?
    else # a file may hold only so many KiB: a write past it fails as on a full disk
      (trap '' XFSZ; ulimit -f $((RANDOM % 700 + 1)); exec "$DM" train --out "$run" --data "$CORPUS" $RUN10) >/dev/null 2>"$D/df.err"; local rc=$?
    fi
    if ((rc == 0)); then
      if [[ $(bits "$run") == "$REF" ]]; then right diskfull; else wrong diskfull "exit 0 with $(bits "$run")"; fi
      continue
    fi
    if ((rc != 1)) || ! grep -q '^error: ' "$D/df.err"; then wrong diskfull "exit $rc: $(tail -c 200 "$D/df.err")"; continue; fi
    if [[ ! -d $run ]] || [[ -z $(ls -d "$run"/ckpt-???????? 2>/dev/null) ]]; then
      right diskfull; continue # failed before its first checkpoint: nothing to resume
    fi
    if resume_to_end "$run"; then right diskfull; else wrong diskfull "resumed to $(bits "$run")"; fi
  done
}

probe_mpi() {
  if ! command -v mpirun >/dev/null || ! "$DM" --version | grep -q "^mpi: built in"; then
    echo "mpi: skipped (no mpirun, or a build without MPI)" >>"$WHY"; return
  fi
  local MR="mpirun --allow-run-as-root --oversubscribe -np 2"
  if ! timeout 60 $MR "$DM" train --out "$D/mref" --data "$CORPUS" $RUN10 --set grad_accum=2 >/dev/null 2>&1; then
    echo "mpi: skipped (mpirun -np 2 does not start here)" >>"$WHY"; return
  fi
  local MREF; MREF=$(bits "$D/mref")
  while more mpi; do
    trial mpi
    rm -rf "$D/mp"
    timeout 120 $MR "$DM" train --out "$D/mp" --data "$CORPUS" $RUN10 --set grad_accum=2 --set comm_timeout=20 >/dev/null 2>&1 & local pid=$!
    sleep "1.$((RANDOM % 10))"
    local victim; victim=$(pgrep -f "dormouse train --out $D/mp" | tail -1)
    [[ -n $victim ]] && kill -9 "$victim" 2>/dev/null
    wait $pid; local rc=$?
    if ((rc == 124)); then wrong mpi "hung past 120 s after a rank was killed"; continue; fi
    if [[ -z $(ls -d "$D"/mp/ckpt-???????? 2>/dev/null) ]]; then right mpi; continue; fi
    local k
    for k in 1 2 3 4 5; do
      timeout 120 $MR "$DM" train --resume "$D/mp" >/dev/null 2>&1 && break
    done
    if [[ $(bits "$D/mp") == "$MREF" ]]; then right mpi; else wrong mpi "resumed to $(bits "$D/mp"), not $MREF"; fi
  done
}

start=$(date +%s)
for c in $CLASSES; do "probe_$c"; done
printf '%-9s %7s %7s %7s %7s\n' class trials right wrong silent
tw=0; ts=0
for c in $CLASSES; do
  printf '%-9s %7d %7d %7d %7d\n' "$c" "${TRIALS[$c]:-0}" "${RIGHT[$c]:-0}" "${WRONG[$c]:-0}" "${SILENT[$c]:-0}"
  tw=$((tw + ${WRONG[$c]:-0})); ts=$((ts + ${SILENT[$c]:-0}))
done
echo "$(($(date +%s) - start)) s; wrong answers $tw, silent changes $ts"
[[ -s $WHY ]] && head -n 30 "$WHY"
((tw == 0 && ts == 0))
