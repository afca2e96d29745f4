#!/usr/bin/env bash
# A stopped rank campaign (opt-in, not in `make test`): TRIALS times a tiny run under
# `mpirun -np 2` with comm_timeout=TIMEOUT gets SIGSTOP on rank 1 after its checkpoint of
# step 10; the job must end (exit non-zero, an error naming rank 1) within TIMEOUT + 30 s,
# and the CPU time rank 0 spends while it waits is measured (it must not spin a core).
# Then the last checkpoint must resume in one process.
#   scripts/probe_mpi_stop.sh [BUILD=build] [TRIALS=5] [TIMEOUT=10]
set -uo pipefail
BUILD=$(cd "${1:-build}" && pwd); TRIALS=${2:-5}; TO=${3:-10}
source "$(dirname "$0")/probe_common.sh"
SETS="$TINY --set batch_size=1 --set grad_accum=2 --set warmup_steps=2 --set steps=1000000 \
--set ckpt_every=5 --set eval_every=0 --set comm_timeout=$TO"
ok=0
for t in $(seq "$TRIALS"); do
  run="$D/run$t"
  mpirun --allow-run-as-root --oversubscribe -np 2 sh -c "echo \$\$ > $D/pid.\$OMPI_COMM_WORLD_RANK; \
exec $BUILD/dormouse train --out $run --data $ROOT/data/kjv.txt.gz $SETS" >"$D/log" 2>&1 & mp=$!
  for i in $(seq 600); do [ -d "$run/ckpt-00000010" ] && [ -s "$D/pid.1" ] && [ -s "$D/pid.0" ] && break; sleep 0.05; done
  r0=$(cat "$D/pid.0"); r1=$(cat "$D/pid.1")
  t0=$(date +%s%N); kill -STOP "$r1"
  sleep 1; c0=$(awk '{print $14 + $15}' /proc/$r0/stat 2>/dev/null || echo 0)
  sleep 2; c1=$(awk '{print $14 + $15}' /proc/$r0/stat 2>/dev/null || echo "$c0")
  ( sleep $((TO + 60)); kill -9 $mp 2>/dev/null ) >/dev/null 2>&1 & dog=$!
  wait $mp; rc=$?; t1=$(date +%s%N); kill $dog 2>/dev/null
  kill -9 "$r1" 2>/dev/null
  ms=$(( (t1 - t0) / 1000000 ))
  cpu=$(( (c1 - c0) * 100 / $(getconf CLK_TCK) / 2 ))
  err=$(grep -m1 "comm_timeout" "$D/log")
  resumed=no
  last=$(ls "$run" | grep '^ckpt-[0-9]*$' | sort | tail -1)
  [ -n "$last" ] && "$BUILD/dormouse" train --resume "$run" --until $(( 10#${last#ckpt-} + 2 )) \
    >/dev/null 2>&1 && resumed=yes
  echo "trial $t: exit $rc, $ms ms after SIGSTOP (timeout ${TO} s); rank 0 used ${cpu}% of a core while waiting; resumed: $resumed; $err"
  if [ $rc -ne 0 ] && [ $ms -lt $(( (TO + 30) * 1000 )) ] && [ -n "$err" ] && [ $resumed = yes ]; then ok=$((ok + 1)); fi
  rm -f "$D"/pid.*
done
echo "MPI SIGSTOP: $TRIALS trials, $ok ended within the timeout with the error and a checkpoint that resumes"
[ $ok -eq "$TRIALS" ]
