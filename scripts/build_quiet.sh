#!/usr/bin/env bash
# Build only the given CMake targets (default: the dormouse command), quietly: one progress
# line redrawn in place (a line every 10% when stdout is not a terminal), the compiler's
# output kept in BUILD/build.log and printed only when the build fails (its last 60 lines).
# `make run` uses it: the command is all it needs (not the tests, benchmarks or fuzzers).
#   scripts/build_quiet.sh BUILD JOBS [TARGET...]
set -uo pipefail
build=${1:-build}; jobs=${2:-2}; shift $(($# < 2 ? $# : 2))
targets=("$@"); [[ ${#targets[@]} -gt 0 ]] || targets=(dormouse_cli)
log=$build/build.log
label=${targets[*]}; label=${label//dormouse_cli/dormouse}
tty=0; [[ -t 1 ]] && tty=1
start=$(date +%s); last=-10
args=(); for t in "${targets[@]}"; do args+=(--target "$t"); done
show() { # percent, text
  if ((tty)); then printf '\r\033[Kbuilding %s: %3d%% %s' "$label" "$1" "$2"
  elif (($1 >= last + 10)); then echo "building $label: $1%"; last=$1; fi
}
show 0 ""
cmake --build "$build" -j "$jobs" "${args[@]}" >"$log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  pct=$(grep -o '^\[ *[0-9]*%\]' "$log" 2>/dev/null | tail -1 | tr -dc 0-9)
  show "${pct:-0}" "($(($(date +%s) - start)) s)"
  sleep 1
done
wait "$pid"; rc=$?
if ((rc != 0)); then
  ((tty)) && printf '\n'
  echo "build failed (exit $rc); the last lines of $log:" >&2
  tail -n 60 "$log" >&2
  exit "$rc"
fi
warn=$(grep -c 'warning:' "$log" || true)
note=""; [[ $warn != 0 ]] && note=", $warn compiler warnings in $log"
if ((tty)); then printf '\r\033[Kbuilt %s in %d s%s\n' "$label" "$(($(date +%s) - start))" "$note"
else echo "built $label in $(($(date +%s) - start)) s$note"; fi
