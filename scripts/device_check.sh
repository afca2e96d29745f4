#!/usr/bin/env bash
# device_check.sh — the one command of a GPU call (docs/cuda.md): build the CUDA tests and
# the bench, run every GPU test, compute-sanitizer on the small cases, the kernel bench, and
# print one table; everything it wrote lands in $OUT (the bench's rows for
# benches/history.tsv in $OUT/history_rows.tsv, the logs beside them).
#
# Made for a machine with the CUDA toolkit, CMake and a C compiler but none of Debian's
# libraries: prepare here with `bash scripts/device_deps.sh` (the .deb files into
# .device/debs), carry .device/debs, and run `bash scripts/device_check.sh`. Where the
# libraries are installed (a Debian machine) .device/debs is not needed. Sized for one
# device call: each step has its own time limit, the whole at most ~7 minutes. Without a
# GPU it runs up to the tests, which then skip, says so and exits 3 (1: a step failed).
#   DM_CHECK_STEPS  the steps to run (default "build test sanitize bench peer")
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/dm-device-check}
mkdir -p "$out"
steps=${DM_CHECK_STEPS:-build test sanitize bench peer}
jobs=$(nproc 2>/dev/null || echo 4)
build=build-device
t_start=$(date +%s)
names=() results=()
row() { names+=("$1"); results+=("$2"); echo "device_check: $1: $2"; }
has() { [[ " $steps " == *" $1 "* ]]; }
secs() { echo "$(( $(date +%s) - $1 )) s"; }

# ---- the machine ----
gpu="none (no nvidia-smi)"
if command -v nvidia-smi >/dev/null; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
fi
row machine "$(uname -m), $jobs cores; GPU: ${gpu:-none}; nvcc: $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || echo none)"

# ---- the libraries: unpacked from the carried .deb files when there are any ----
prefix_args=()
if [[ -d .device/debs ]]; then
  if bash scripts/device_deps.sh --unpack > "$out/deps.log" 2>&1; then
    p=$PWD/.device/prefix
    prefix_args=(-DCMAKE_PREFIX_PATH="$p/usr")
    export LD_LIBRARY_PATH="$p/usr/lib/x86_64-linux-gnu:$p/usr/lib/x86_64-linux-gnu/openblas-openmp:$p/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    row deps "unpacked $(ls .device/debs/*.deb | wc -l) packages into .device/prefix"
  else
    row deps "FAILED to unpack .device/debs ($out/deps.log)"
  fi
fi

# ---- build: the CUDA tests and the bench (and libdormouse under them) ----
built=0
if has build; then
  t=$(date +%s)
  if timeout 60 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDM_CUDA=ON -DDM_MPI=OFF \
       -DDM_PLPLOT=OFF "${prefix_args[@]}" > "$out/configure.log" 2>&1 &&
     timeout 240 cmake --build "$build" -j "$jobs" --target test_cuda bench_cuda \
       > "$out/build.log" 2>&1; then
    built=1
    w=$(grep -c -i "warning" "$out/build.log")
    row build "ok in $(secs "$t") ($w warning lines)"
  else
    row build "FAILED in $(secs "$t") (tail of the logs below)"
    tail -20 "$out/configure.log" "$out/build.log"
  fi
elif [[ -x $build/test_cuda ]]; then built=1; fi

why=""
if (( built )); then
  why=$("$build/test_cuda" cuda_probe_answers 2>&1 | sed -n 's/^  device 0: //p')
  row probe "device 0: ${why:-?}"
fi
gpu_ok=0
[[ $why == usable ]] && gpu_ok=1

# ---- the GPU tests: every case of test_cuda ----
if (( built )) && has test; then
  t=$(date +%s)
  timeout 180 "$build/test_cuda" > "$out/test_cuda.log" 2>&1
  rc=$?
  pass=$(grep -c '^PASS ' "$out/test_cuda.log") fail=$(grep -c '^FAIL ' "$out/test_cuda.log")
  skip=$(grep -c '^SKIPPED ' "$out/test_cuda.log")
  row tests "$pass passed, $fail failed, $skip skipped (exit $rc, $(secs "$t"))"
  grep -E '^(FAIL|  FAIL)' "$out/test_cuda.log" | head -20
fi

# ---- compute-sanitizer: memcheck on the small cases, racecheck on the shared-memory core ----
if (( built && gpu_ok )) && has sanitize; then
  if command -v compute-sanitizer >/dev/null; then
    t=$(date +%s) bad=()
    for c in cuda_activations cuda_rmsnorm cuda_gatednorm cuda_l2norm cuda_conv cuda_gate \
             cuda_xent cuda_embed cuda_matmul_bf16 cuda_delta_kda cuda_delta_gdn; do
      timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/test_cuda" "$c" \
        >> "$out/sanitizer.log" 2>&1 || bad+=("memcheck:$c")
    done
    timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$build/test_cuda" \
      cuda_delta_gdn >> "$out/sanitizer.log" 2>&1 || bad+=("racecheck:delta")
    row sanitizer "${#bad[@]} failing (${bad[*]:-none}; $(secs "$t"))"
  else
    row sanitizer "not run: compute-sanitizer not on PATH"
  fi
fi

# ---- the kernel bench at d2's shapes ----
if (( built && gpu_ok )) && has bench; then
  t=$(date +%s)
  if timeout 120 "$build/bench_cuda" --history "$out/history_rows.tsv" > "$out/bench.log" 2>&1; then
    row bench "ok ($(secs "$t")): rows in $out/history_rows.tsv"
  else
    row bench "FAILED ($out/bench.log)"
  fi
fi

# ---- the peer: the PyTorch twin on the GPU with fla's kernels, where present ----
if has peer; then
  if python3 -c 'import fla' 2>/dev/null && python3 python/dormouse.py --help 2>/dev/null | grep -q bench; then
    timeout 120 python3 python/dormouse.py bench > "$out/peer.log" 2>&1
    row peer "exit $? ($out/peer.log)"
  else
    row peer "not run: needs fla (flash-linear-attention) and a bench mode in python/dormouse.py"
  fi
fi

# ---- the table ----
echo
[[ -f $out/bench.log ]] && sed -n '/^kernel/,/^[0-9]\{4\}-/p' "$out/bench.log" | grep -v '^[0-9]\{4\}-'
echo
printf '%-10s %s\n' step result
for i in "${!names[@]}"; do printf '%-10s %s\n' "${names[$i]}" "${results[$i]}"; done
echo "total $(secs "$t_start")"
fails=$(printf '%s\n' "${results[@]}" | grep -c 'FAILED\| [1-9][0-9]* failed\|^[1-9][0-9]* failing')
if (( fails > 0 )); then exit 1; fi
if (( ! gpu_ok )); then
  echo "device_check: no usable GPU (${why:-not probed}): the GPU steps did not run" >&2
  exit 3
fi
exit 0
