#!/usr/bin/env bash
# device_check.sh — the one command of a GPU call (docs/cuda.md section 5): build the CUDA
# tests, the bench, the command and its CUDA module; run every GPU test case in a process
# of its own, the kernel bench, the command on the device through the module, and
# compute-sanitizer last; print one table. Everything it keeps lands in $OUT (at most 8
# files: build.log, test_cuda.log, bench.log, history_rows.tsv, module.log,
# sanitizer.log, peer.log), the bench's rows for benches/history.tsv in history_rows.tsv.
#
# Made for a machine with the CUDA toolkit, CMake, Ninja and a C compiler but none of
# Debian's libraries: prepare here with `bash scripts/device_deps.sh` (the .deb files
# into .device/debs, fla's wheel into .device/whl), carry .device/debs and .device/whl,
# and run `bash scripts/device_check.sh` with
# timeout_s 480. Where the libraries are installed (a Debian machine) .device/debs is not
# needed. `make` is not needed: Ninja when found, else CMake's default generator (which
# needs make; the build step says so when neither is there).
#
# Time: the whole run ends by DM_CHECK_DEADLINE seconds (default 450, inside a 480 s
# call); each step runs under the smaller of its own limit and what is left, and a step
# with under 10 s left is not started (the table says so). The order puts what matters
# first: build, tests, bench, the command, then the sanitizer (at most
# DM_CHECK_SANITIZER_S, default 150 s).
#
# Exit: 0 all ran and passed; 1 a step failed; 3 no usable GPU (the probe's reason is
# printed: everything before the GPU ran; the GPU steps did not).
#   DM_CHECK_STEPS  the steps to run (default "build test bench module peer sanitize")
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/dm-device-check}
mkdir -p "$out"
steps=${DM_CHECK_STEPS:-build test bench module peer sanitize}
deadline=${DM_CHECK_DEADLINE:-450}
san_cap=${DM_CHECK_SANITIZER_S:-150}
jobs=$(nproc 2>/dev/null || echo 4)
build=build-device
t_start=$(date +%s)
names=() results=()
row() { names+=("$1"); results+=("$2"); echo "device_check: $1: $2"; }
has() { [[ " $steps " == *" $1 "* ]]; }
secs() { echo "$(( $(date +%s) - $1 )) s"; }
# the seconds a step may take: its own limit or what is left before the deadline
left() { echo $(( deadline - ($(date +%s) - t_start) )); }
limit() { local l; l=$(left); (( l < $1 )) && echo "$l" || echo "$1"; }
# time_for STEP: 0 when at least 10 s are left, else a row saying the step was cut
time_for() {
  if (( $(left) < 10 )); then row "$1" "not run: the ${deadline} s deadline is reached"; return 1; fi
}

# ---- the machine ----
gpu="none (no nvidia-smi)"
if command -v nvidia-smi >/dev/null; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
fi
row machine "$(uname -m), $jobs cores; GPU: ${gpu:-none}; nvcc: $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || echo none)"

# ---- the libraries: unpacked from the carried .deb files when there are any ----
prefix_args=()
if [[ -d .device/debs ]]; then
  if bash scripts/device_deps.sh --unpack > "$out/build.log" 2>&1; then
    p=$PWD/.device/prefix
    prefix_args=(-DCMAKE_PREFIX_PATH="$p/usr")
    export LD_LIBRARY_PATH="$p/usr/lib/x86_64-linux-gnu:$p/usr/lib/x86_64-linux-gnu/openblas-openmp:$p/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    row deps "unpacked $(ls .device/debs/*.deb | wc -l) packages into .device/prefix"
  else
    row deps "FAILED to unpack .device/debs ($out/build.log)"
    tail -5 "$out/build.log"
  fi
fi

# ---- build: the CUDA tests, the bench, the command and the module ----
built=0
if has build && time_for build; then
  t=$(date +%s)
  gen=()
  if command -v ninja >/dev/null; then gen=(-G Ninja)
  elif ! command -v make >/dev/null; then
    row build "FAILED: neither ninja nor make is on PATH (CMake needs one to build)"
  fi
  # a build folder of another generator is started afresh
  if [[ -f $build/CMakeCache.txt ]] &&
     ! grep -q "^CMAKE_GENERATOR:INTERNAL=${gen[1]:-Unix Makefiles}\$" "$build/CMakeCache.txt"; then
    rm -rf "$build"
  fi
  if [[ ${gen[0]:-} == -G ]] || command -v make >/dev/null; then
    if timeout "$(limit 90)" cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
         -DDM_CUDA=ON -DDM_MPI=OFF -DDM_PLPLOT=OFF "${prefix_args[@]}" >> "$out/build.log" 2>&1 &&
       timeout "$(limit 240)" cmake --build "$build" -j "$jobs" --target test_cuda bench_cuda \
         dormouse_cli dormouse_cuda test_cuda_module >> "$out/build.log" 2>&1; then
      built=1
      w=$(grep -c -i "warning" "$out/build.log")
      row build "ok in $(secs "$t") (${gen[1]:-make}; $w warning lines)"
    else
      row build "FAILED in $(secs "$t") (tail of $out/build.log below)"
      tail -20 "$out/build.log"
    fi
  fi
elif [[ -x $build/test_cuda ]]; then built=1; fi

why=""
if (( built )); then
  why=$(timeout 30 "$build/test_cuda" cuda_probe_answers 2>&1 | sed -n 's/^  device 0: //p')
  row probe "device 0: ${why:-? (the probe printed nothing)}"
fi
gpu_ok=0
[[ $why == usable ]] && gpu_ok=1
no_gpu="not run: no usable GPU (${why:-not probed})"

# ---- the GPU tests: each case of test_cuda in a process of its own (a sticky CUDA
# error ends that process only), 60 s at most each ----
if (( built )) && has test && time_for tests; then
  t=$(date +%s) pass=0 fail=0 skip=0 failed=()
  : > "$out/test_cuda.log"
  cases=$("$build/test_cuda" --list 2>/dev/null)
  for c in $cases; do
    if (( $(left) < 10 )); then failed+=("$c(deadline)"); fail=$((fail + 1)); continue; fi
    echo "==== $c" >> "$out/test_cuda.log"
    timeout "$(limit 60)" "$build/test_cuda" "$c" >> "$out/test_cuda.log" 2>&1
    rc=$?
    case $rc in
      0) pass=$((pass + 1)) ;;
      77) skip=$((skip + 1)) ;;
      124) fail=$((fail + 1)); failed+=("$c(timeout)"); echo "TIMEOUT $c" >> "$out/test_cuda.log" ;;
      *) fail=$((fail + 1)); failed+=("$c(exit $rc)") ;;
    esac
  done
  n=$(wc -w <<<"$cases")
  if (( n == 0 )); then row tests "FAILED: test_cuda --list gave no cases"
  else row tests "$pass passed, $fail failed, $skip skipped of $n cases ($(secs "$t"))${failed:+: ${failed[*]}}"; fi
  grep -E '^(FAIL|  FAIL)' "$out/test_cuda.log" | head -20
fi

# ---- the kernel bench at d2's shapes (before the sanitizer: the numbers come first) ----
if (( built )) && has bench && time_for bench; then
  if (( gpu_ok )); then
    t=$(date +%s)
    if timeout "$(limit 120)" "$build/bench_cuda" --history "$out/history_rows.tsv" > "$out/bench.log" 2>&1; then
      row bench "ok ($(secs "$t")): rows in $out/history_rows.tsv"
    else
      row bench "FAILED ($(secs "$t"), $out/bench.log)"
    fi
  else row bench "$no_gpu"; fi
fi

# ---- the command on the device: the module loaded by the `dormouse` just built ----
if (( built )) && has module && time_for module; then
  t=$(date +%s)
  {
    timeout "$(limit 30)" "$build/test_cuda_module"
    echo "test_cuda_module: exit $?"
    timeout "$(limit 60)" "$build/dormouse" train --out "$build/module-run" --data data/kjv.txt.gz \
      --set d_model=32 --set n_layer=1 --set n_head=1 --set head_dim=32 --set gate_rank=8 \
      --set batch_size=1 --set seq_len=32 --set steps=1 --set backend=cuda
    echo "dormouse backend=cuda: exit $?"
    # the bf16 products, the tensor-core delta core and bf16 Newton-Schulz on the device;
    # four steps: the step's graphs captured at the second, replayed at the third
    timeout "$(limit 60)" "$build/dormouse" train --out "$build/module-run-bf16" \
      --data data/kjv.txt.gz --set d_model=32 --set n_layer=1 --set n_head=1 --set head_dim=32 \
      --set gate_rank=8 --set batch_size=1 --set seq_len=80 --set steps=4 --set backend=cuda \
      --set precision=bf16 --set ns_precision=bf16
    echo "dormouse backend=cuda bf16: exit $?"
    # the d2 step on the device (rows for benches/history.tsv): the step as graphs against
    # every kernel launched, and bf16 (the tensor-core core) against fp32
    timeout "$(limit 90)" "$build/dormouse" bench --reps 5 --set backend=cuda \
      --baseline step_graph=off --history "$out/history_rows.tsv"
    echo "dormouse bench graphs: exit $?"
    timeout "$(limit 90)" "$build/dormouse" bench --reps 5 --set backend=cuda \
      --set precision=bf16 --baseline precision=fp32 --history "$out/history_rows.tsv"
    echo "dormouse bench bf16: exit $?"
  } > "$out/module.log" 2>&1
  said=$(grep -m1 '^error: backend=cuda' "$out/module.log")
  tests_rc=$(sed -n 's/^test_cuda_module: exit //p' "$out/module.log")
  if [[ $tests_rc != 0 ]]; then row module "FAILED: test_cuda_module exit $tests_rc ($out/module.log)"
  elif (( gpu_ok )) && grep -q '^dormouse backend=cuda: exit 0' "$out/module.log" &&
       grep -q '^policy: cuda' "$out/module.log" &&
       grep -q '^dormouse backend=cuda bf16: exit 0' "$out/module.log" &&
       grep -q '^policy: cuda.*tensor cores.*matmuls bf16, Newton-Schulz bf16' "$out/module.log" &&
       grep -q '^step graphs: on' "$out/module.log"; then
    row module "ok ($(secs "$t")): the module loaded; backend=cuda trained on the GPU, fp32 and bf16, step graphs on; $(grep -c '^dormouse bench .*: exit 0' "$out/module.log") of 2 benches ran"
  elif (( gpu_ok )); then row module "FAILED: backend=cuda said [${said:-nothing}] ($out/module.log)"
  else row module "$no_gpu; the command said [${said#error: }]"; fi
fi

# ---- the peer: the PyTorch twin's d2 step on the GPU with fla's kernels (the wheel that
# scripts/device_deps.sh put in .device/whl, installed beside the image's PyTorch) ----
if has peer && time_for peer; then
  if ls .device/whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/dm-site .device/whl/*.whl >/dev/null 2>&1 &&
      export PYTHONPATH=/tmp/dm-site${PYTHONPATH:+:$PYTHONPATH}
  fi
  if (( ! gpu_ok )); then row peer "$no_gpu"
  elif ! python3 -c 'import torch, fla; assert torch.cuda.is_available()' 2>/dev/null; then
    row peer "not run: python3 here lacks torch on the GPU or fla (carry .device/whl)"
  else
    t=$(date +%s) ok=0
    for p in fp32 bf16; do
      timeout "$(limit 90)" python3 python/dormouse.py bench --core fla --precision "$p" \
        --history "$out/history_rows.tsv" >> "$out/peer.log" 2>&1 && ok=$((ok + 1))
    done
    row peer "$ok of 2 ran ($(secs "$t")): the PyTorch step with fla's kernels, fp32 and bf16 ($out/peer.log)"
  fi
fi

# ---- compute-sanitizer, last and capped: memcheck on the small cases, racecheck on the
# shared-memory core; each run's last 100 lines kept ----
if (( built )) && has sanitize && time_for sanitizer; then
  if (( ! gpu_ok )); then row sanitizer "$no_gpu"
  elif ! command -v compute-sanitizer >/dev/null; then
    row sanitizer "not run: compute-sanitizer not on PATH"
  else
    t=$(date +%s) bad=() cut=() ran=0
    san_end=$(( $(date +%s) + san_cap ))
    : > "$out/sanitizer.log"
    for run in memcheck:cuda_activations memcheck:cuda_rmsnorm memcheck:cuda_gatednorm \
               memcheck:cuda_l2norm memcheck:cuda_conv memcheck:cuda_gate memcheck:cuda_xent \
               memcheck:cuda_embed memcheck:cuda_matmul_bf16 memcheck:cuda_delta_kda \
               memcheck:cuda_delta_gdn racecheck:cuda_delta_gdn memcheck:cuda_delta_tc_kda \
               racecheck:cuda_delta_tc_gdn; do
      tool=${run%%:*} c=${run#*:}
      s_left=$(( san_end - $(date +%s) ))
      if (( s_left < 10 || $(left) < 10 )); then cut+=("$run"); continue; fi
      (( s_left > $(left) )) && s_left=$(left)
      (( s_left > 60 )) && s_left=60
      echo "==== $tool $c" >> "$out/sanitizer.log"
      timeout "$s_left" compute-sanitizer --tool "$tool" --error-exitcode 9 "$build/test_cuda" "$c" \
        > "$build/sanitizer.one" 2>&1
      rc=$?
      tail -n 100 "$build/sanitizer.one" >> "$out/sanitizer.log"
      ran=$((ran + 1))
      (( rc == 0 )) || bad+=("$run(exit $rc)")
    done
    row sanitizer "${#bad[@]} failing of $ran run (${bad[*]:-none}; $(secs "$t"))${cut:+; cut by the time limit: ${cut[*]}}"
  fi
fi

# ---- the table ----
echo
[[ -f $out/bench.log ]] && sed -n '/^kernel/,/^[0-9]\{4\}-/p' "$out/bench.log" | grep -v '^[0-9]\{4\}-'
echo
printf '%-10s %s\n' step result
for i in "${!names[@]}"; do printf '%-10s %s\n' "${names[$i]}" "${results[$i]}"; done
echo "total $(secs "$t_start") (deadline ${deadline} s)"
nfiles=$(find "$out" -maxdepth 1 -type f | wc -l)
(( nfiles > 8 )) && echo "device_check: $nfiles files in $out: only 8 come back from a device call" >&2
fails=$(printf '%s\n' "${results[@]}" | grep -c 'FAILED\| [1-9][0-9]* failed\|^[1-9][0-9]* failing')
if (( fails > 0 )); then exit 1; fi
if (( ! gpu_ok )); then
  echo "device_check: no usable GPU (${why:-not probed}): the GPU steps did not run" >&2
  exit 3
fi
exit 0
