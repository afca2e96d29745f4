#!/usr/bin/env bash
# fuzz.sh [SECONDS] — `make fuzz`: build the libFuzzer harnesses of fuzz/ with clang
# (ASan + UBSan, build-fuzz/) and run each target for SECONDS (default: FUZZ_SECONDS or
# 60) or until FUZZ_RUNS executions when that is set, one after the other, at nice 19
# (FUZZ_NICE). Each run starts from the seeds of
# fuzz/corpus/T and what earlier runs found (kept in build-fuzz/corpus/T, not in git).
# An input that crashes, hangs (FUZZ_TIMEOUT s, default 10) or trips a sanitizer is
# copied into fuzz/regress/T/ — the regression corpus `make test` replays through the
# plain build (tests/test_fuzz.c) — and makes this script exit 1. Prints per target the
# executions, the time and the corpus size.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${FUZZ_SECONDS:-60}}
nice_level=${FUZZ_NICE:-19}
timeout_s=${FUZZ_TIMEOUT:-10}
targets=${FUZZ_TARGETS:-safetensors ckpt config}

if ! command -v clang >/dev/null 2>&1; then
  echo "fuzz: needs clang with libFuzzer (Debian: apt-get install clang libclang-rt-14-dev libomp-14-dev)" >&2
  exit 1
fi
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDM_FUZZ=ON -DDM_SANITIZE=ON \
  -DDM_NATIVE=OFF >/dev/null || exit 1
for t in $targets; do
  nice -n "$nice_level" cmake --build build-fuzz -j "${JOBS:-2}" --target "fuzz_$t" \
    >build-fuzz/build.log 2>&1 || { cat build-fuzz/build.log >&2; exit 1; }
done

found=0
for t in $targets; do
  work=build-fuzz/corpus/$t art=build-fuzz/artifacts/$t/ log=build-fuzz/fuzz_$t.log
  mkdir -p "$work" "$art"
  dict=()
  [[ -f fuzz/$t.dict ]] && dict=(-dict="fuzz/$t.dict")
  [[ -n ${FUZZ_RUNS:-} ]] && dict+=(-runs="$FUZZ_RUNS")
  t0=$(date +%s)
  nice -n "$nice_level" "build-fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" "${dict[@]}" \
    -max_total_time="$secs" -timeout="$timeout_s" -rss_limit_mb=2048 \
    -artifact_prefix="$art" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  t1=$(date +%s)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cp "$log" "build-fuzz/fuzz_$t.$(date +%Y%m%d-%H%M%S).log"
  echo "fuzz $t: ${execs:-?} executions in $((t1 - t0)) s, corpus $(ls "$work" | wc -l) inputs" \
       "($(du -sk "$work" | cut -f1) KiB), exit $rc (log: $log)"
  for a in "$art"*; do
    [[ -f $a ]] || continue
    mkdir -p "fuzz/regress/$t"
    cp "$a" "fuzz/regress/$t/$(basename "$a")"
    echo "fuzz $t: FOUND $(basename "$a") -> fuzz/regress/$t/ (replayed by make test; fix it)" >&2
    rm -f "$a"
    found=1
  done
  [[ $rc -ne 0 && $found -eq 0 ]] && { echo "fuzz $t: libFuzzer exited $rc (see $log)" >&2; found=1; }
done
exit $found
