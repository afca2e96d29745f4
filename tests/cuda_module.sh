#!/usr/bin/env bash
# cuda_module.sh DORMOUSE SOURCE_DIR FAKE_DIR FAKE_MODULE INSTALL_DIR [MODULE] — the
# command and the CUDA module (docs/cuda.md section 2), on a machine with or without a GPU:
#   1. the command links no CUDA library (readelf's NEEDED, and ldd's whole tree), and
#      `dormouse --help` peaks under 40 MB resident;
#   2. it runs with the toolkit's libraries out of reach (LD_LIBRARY_PATH emptied) and the
#      module pointed at a path where none is: backend=cuda is refused (exit 2, one line
#      naming the reason), backend=auto trains on the CPU saying why not cuda;
#   3. a build with CUDA (MODULE given) loads the module only where a device answers
#      (a build without loads none even then): with no driver the stand-in
#      module (FAKE_MODULE, which marks a file when loaded) is not loaded; with the
#      stand-in driver of FAKE_DIR it is, and its answer is the reason; with that driver
#      and no module, the loader's reason names the missing file (DM_CUDA_MODULE's, and
#      the search's beside the program and in INSTALL_DIR);
#   4. MODULE (a build with CUDA): it needs cuBLASLt and no symbol of the program;
#   5. MODULE: `cmake --install` puts it in PREFIX/lib*/dormouse, where the installed
#      command finds it.
# Exit 0 when all hold, 1 naming each failure, 77 without readelf.
set -uo pipefail
bin=${1:?usage: cuda_module.sh DORMOUSE SOURCE_DIR FAKE_DIR FAKE_MODULE INSTALL_DIR [MODULE]}
src=${2:?}
fake_dir=${3:?}
fake_module=${4:?}
install_dir=${5:?}
module=${6:-}
work=$(mktemp -d /tmp/cuda_module.XXXXXX)
fail=0
bad() { echo "FAILED: $*"; fail=1; }
ok() { echo "ok     $*"; }

command -v readelf >/dev/null || { echo "SKIP cuda_module: no readelf (binutils)"; exit 77; }

# ---- 1. no CUDA library linked; a small start ----
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
if grep -Eq '(^| )lib(cu|nv)[a-zA-Z]*\.so' <<<"$needed"; then
    bad "$bin needs a CUDA library: $needed"
else ok "NEEDED: $needed"; fi
if tree=$(ldd "$bin" 2>&1); then
    cu=$(grep -E '^\s*lib(cu|nv)' <<<"$tree" | tr -s ' \t' ' ')
    if [[ -n $cu ]]; then bad "ldd $bin lists CUDA libraries: $cu"; else ok "ldd: no libcu*"; fi
else bad "ldd $bin: $tree"; fi
# the peak resident set of `dormouse --help`, read by the parent from the kernel (kB)
rss=$(/usr/bin/python3 -c '
import resource, subprocess, sys
subprocess.run([sys.argv[1], "--help"], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$bin") ||
    bad "dormouse --help did not run"
if [[ $needed == *libasan* || $needed == *libtsan* ]]; then
    echo "skip   the 40 MB bound: a sanitized build (its runtime's own memory)"
elif [[ -n ${rss:-} ]]; then
    if (( rss < 40 * 1024 )); then ok "dormouse --help: $(( rss / 1024 )) MB resident at most"
    else bad "dormouse --help peaks at $(( rss / 1024 )) MB resident (the limit: 40)"; fi
fi

# ---- 2. the toolkit out of reach, the module missing ----
tiny=(--set d_model=32 --set n_layer=1 --set n_head=1 --set head_dim=32 --set gate_rank=8
      --set batch_size=1 --set seq_len=32 --set steps=1 --set warmup_steps=0
      --set eval_every=0 --set log_every=1 --set eval_window=512 --set ckpt_every=0
      --set threads=1)
corpus=$src/data/kjv.txt.gz
nomod=$work/no/such/dir/libdormouse-cuda.so
# run NAME BACKEND [VAR=VALUE...]: a one-step run into $work/NAME, its exit status in rc
run() {
    local name=$1 be=$2; shift 2
    env LD_LIBRARY_PATH= "$@" "$bin" train --out "$work/$name" --data "$corpus" "${tiny[@]}" \
        --set backend="$be" >"$work/$name.out" 2>"$work/$name.err"
    rc=$?
}
run cuda_nomod cuda DM_CUDA_MODULE="$nomod"
err=$(cat "$work/cuda_nomod.err")
if [[ $rc == 2 && $(wc -l <"$work/cuda_nomod.err") == 1 && $err == "error: backend=cuda (device=0): "* ]]
then ok "backend=cuda refused: $err"
else bad "backend=cuda without a module: exit $rc, stderr [$err]"; fi
run auto_nomod auto DM_CUDA_MODULE="$nomod"
note=$(grep -h 'backend: cpu (auto; not cuda: ' "$work/auto_nomod.out" "$work/auto_nomod.err")
if [[ $rc == 0 && -n $note ]]; then ok "auto: $note"
else bad "backend=auto without a module: exit $rc, [$(tail -n 2 "$work/auto_nomod.err")]"; fi

# ---- 3. the module loaded only where a device answers ----
mark=$work/loaded
loaded() { [[ -e $mark ]] && echo yes || echo no; }
if [[ -z $module ]]; then
    # a build without CUDA loads nothing, even where a device answers
    run cuda_off cuda LD_LIBRARY_PATH="$fake_dir" DM_CUDA_MODULE="$fake_module" \
        DM_FAKE_MODULE_MARK="$mark"
    err=$(cat "$work/cuda_off.err")
    if [[ $rc == 2 && ! -e $mark && $err == *"this build has no CUDA"* ]]
    then ok "a build without CUDA, a device: nothing loaded; $err"
    else bad "a build without CUDA: exit $rc, module loaded: $(loaded), [$err]"; fi
else
if [[ -e /dev/nvidiactl ]] || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    echo "skip   the no-driver half: this machine has an NVIDIA driver"
else
    run auto_nodev auto DM_CUDA_MODULE="$fake_module" DM_FAKE_MODULE_MARK="$mark"
    if [[ $rc == 0 && ! -e $mark ]] && grep -q "not cuda: no CUDA driver" "$work/auto_nodev.out" "$work/auto_nodev.err"
    then ok "no driver: the module not loaded, auto says: $(grep -h 'not cuda' "$work"/auto_nodev.*)"
    else bad "no driver: exit $rc, module loaded: $(loaded)"; fi
fi
# the stand-in driver with no device: still no module
rm -f "$mark"
run auto_zero auto LD_LIBRARY_PATH="$fake_dir" DM_FAKE_CUDA_DEVICES=0 \
    DM_CUDA_MODULE="$fake_module" DM_FAKE_MODULE_MARK="$mark"
if [[ $rc == 0 && ! -e $mark ]] && grep -q "not cuda: no CUDA device" "$work/auto_zero.out" "$work/auto_zero.err"
then ok "a driver without devices: the module not loaded"
else bad "a driver without devices: exit $rc, module loaded: $(loaded)"; fi
# the stand-in driver with a device: the module loaded and asked
run cuda_fake cuda LD_LIBRARY_PATH="$fake_dir" DM_CUDA_MODULE="$fake_module" \
    DM_FAKE_MODULE_MARK="$mark"
err=$(cat "$work/cuda_fake.err")
if [[ $rc == 2 && -e $mark && $err == *"the fake CUDA module answers"* ]]
then ok "a device: the module loaded; backend=cuda refused with its answer"
else bad "a device: exit $rc, module loaded: $(loaded), [$err]"; fi
# the stand-in driver with a device and no module: the loader's reason
run cuda_fake_nomod cuda LD_LIBRARY_PATH="$fake_dir" DM_CUDA_MODULE="$nomod"
err=$(cat "$work/cuda_fake_nomod.err")
if [[ $rc == 2 && $err == *"the CUDA module $nomod does not load"*"No such file"* ]]
then ok "a device, no module: $err"
else bad "a device, no module: exit $rc, [$err]"; fi
# ... and with the search (no DM_CUDA_MODULE) finding none: a copy of the command alone
if [[ -e $install_dir/libdormouse-cuda.so ]]; then
    echo "skip   a copy without its module: one is installed in $install_dir"
else
    cp "$bin" "$work/dormouse"
    env -u DM_CUDA_MODULE LD_LIBRARY_PATH="$fake_dir" "$work/dormouse" train --out "$work/alone" \
        --data "$corpus" "${tiny[@]}" --set backend=auto >"$work/alone.out" 2>&1
    rc=$?
    note=$(grep -h 'not cuda: ' "$work/alone.out")
    if [[ $rc == 0 && $note == *"libdormouse-cuda.so is neither beside the program"*"nor in $install_dir"* ]]
    then ok "auto, a copy without its module: $note"
    else bad "auto, a copy without its module: exit $rc, [$note]"; fi
fi
fi

# ---- 4. the module itself ----
if [[ -n $module ]]; then
    mneed=$(readelf -d "$module" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    if [[ $mneed == *libcublasLt* && $mneed != *libcudart* ]]; then ok "the module needs: $mneed"
    else bad "the module's NEEDED: $mneed"; fi
    undef=$(nm -D --undefined-only "$module" 2>/dev/null | grep -c ' dm_')
    exported=$(nm -D --defined-only "$module" 2>/dev/null | awk '$2 ~ /[TD]/ {print $3}' |
               grep -v '^_' | tr '\n' ' ')
    if [[ $undef == 0 && $exported == *dm_cuda_module_entry* ]]
    then ok "the module exports: $exported"
    else bad "the module: $undef undefined dm_ symbols, exports [$exported]"; fi
fi

# ---- 5. MODULE: `make install` puts it where the installed command finds it ----
if [[ -n $module ]]; then
    build=$(dirname "$module")
    if cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1; then
        inst=$(find "$work/prefix" -path '*/dormouse/libdormouse-cuda.so' | head -n 1)
        # the stand-in driver lets the search run; the module found answers (its runtime
        # finds no real driver behind the stand-in), so the reason is not the loader's
        env -u DM_CUDA_MODULE LD_LIBRARY_PATH="$fake_dir" "$work/prefix/bin/dormouse" train \
            --out "$work/installed" --data "$corpus" "${tiny[@]}" --set backend=cuda \
            >"$work/installed.out" 2>"$work/installed.err"
        rc=$?
        err=$(cat "$work/installed.err")
        if [[ -n $inst && $rc == 2 && $err == "error: backend=cuda"* && $err != *"CUDA module"* ]]
        then ok "installed at ${inst#"$work/prefix/"}, found by the installed command: $err"
        else bad "installed module [${inst:-none}]: exit $rc, [$err]"; fi
    else bad "cmake --install: $(tail -n 1 "$work/install.log")"; fi
fi

if (( fail )); then echo "files in $work"; exit 1; fi
rm -rf "$work"
exit 0
