#!/usr/bin/env bash
# fenced_backend.sh DORMOUSE SOURCE_DIR [MPIEXEC] — the fenced backend (docs/backends.md)
# computes what the cpu backend computes, through every path that needs host data.
#
# backend=fenced runs the CPU kernels on memory that is PROT_NONE outside the backend's
# own calls: any code that still reads or writes model memory directly (parameters,
# gradients, activations, optimizer state) dies of SIGSEGV here. The tiny model trains
# (checkpoints every 4 steps), resumes, evaluates, samples, runs an `ab` sweep and trains
# under `mpirun -np 2` on backend=fenced and on backend=cpu, and every logged loss, grad
# norm and val_bpb, every checkpoint tensor (model and optimizer), the eval and the
# samples must be the same, bit for bit. Exit 0 when all match, 1 naming each difference.
set -uo pipefail
bin=${1:?usage: fenced_backend.sh DORMOUSE SOURCE_DIR [MPIEXEC]}
src=${2:?usage: fenced_backend.sh DORMOUSE SOURCE_DIR [MPIEXEC]}
mpiexec=${3:-}
corpus=$src/data/kjv.txt.gz
work=$(mktemp -d /tmp/fenced_backend.XXXXXX)

tiny=(d_model=64 n_layer=2 n_head=2 head_dim=32 gate_rank=16 batch_size=2 seq_len=64
      steps=8 warmup_steps=2 eval_every=4 log_every=1 eval_window=2048 ckpt_every=4
      threads=1)
sets() { local s; for s in "${tiny[@]}" "$@"; do printf -- ' --set %s' "$s"; done; }

fail=0
bad() { echo "DIFFER $*"; fail=1; }

# same RUN_A RUN_B: metrics.jsonl values and every checkpoint tensor
same() { /usr/bin/python3 "$src/tests/same_run.py" "$1" "$2"; }

# train NAME BACKEND [EXTRA...]: a tiny run into $work/NAME.BACKEND
train() {
    local name=$1 be=$2; shift 2
    # shellcheck disable=SC2046
    "$bin" train --out "$work/$name.$be" --data "$corpus" $(sets backend="$be" "$@") \
        >"$work/$name.$be.log" 2>&1 ||
        { echo "FAILED train $name on $be (exit $?): $(tail -n 2 "$work/$name.$be.log")"; fail=1; }
}

for be in cpu fenced; do train run "$be"; done
same "$work/run.cpu" "$work/run.fenced" && echo "same   train" || bad train

# GDN with full checkpointing and two micro-batches: other host paths (the gradient sum)
for be in cpu fenced; do train gdn "$be" mixer=gdn checkpointing=full grad_accum=2; done
same "$work/gdn.cpu" "$work/gdn.fenced" && echo "same   gdn full grad_accum=2" || bad gdn

# resume on fenced: to step 4, then on to 8, against the straight cpu run
# shellcheck disable=SC2046
"$bin" train --out "$work/resume" --data "$corpus" $(sets backend=fenced) --until 4 \
    >"$work/resume.log" 2>&1 &&
    "$bin" train --resume "$work/resume" --set backend=fenced >>"$work/resume.log" 2>&1 ||
    { echo "FAILED resume on fenced: $(tail -n 2 "$work/resume.log")"; fail=1; }
same "$work/run.cpu" "$work/resume" && echo "same   resume" || bad resume

# eval and sample of the cpu run's checkpoint on each backend
for be in cpu fenced; do
    "$bin" eval "$work/run.cpu" --set backend="$be" >"$work/eval.$be" 2>&1 ||
        { echo "FAILED eval on $be (exit $?): $(tail -n 1 "$work/eval.$be")"; fail=1; }
    "$bin" sample "$work/run.cpu" --len 40 --seed 3 --set backend="$be" >"$work/sample.$be" \
        2>"$work/sample.$be.log" ||
        { echo "FAILED sample on $be (exit $?): $(tail -n 1 "$work/sample.$be.log")"; fail=1; }
done
ea=$(grep -o 'bpb [0-9.]*' "$work/eval.cpu" | head -n 1)
eb=$(grep -o 'bpb [0-9.]*' "$work/eval.fenced" | head -n 1)
[[ -n $ea && $ea == "$eb" ]] && echo "same   eval ($ea)" || bad "eval: '$ea' against '$eb'"
[[ -s $work/sample.cpu ]] && cmp -s "$work/sample.cpu" "$work/sample.fenced" &&
    echo "same   sample ($(wc -c <"$work/sample.cpu") bytes)" || bad "sample"

# an ab sweep: a control and one variant, one seed, on each backend
abkeys=()
for k in "${tiny[@]}"; do [[ $k == log_every=* ]] || abkeys+=(--set "$k"); done
for be in cpu fenced; do
    "$bin" ab --dir "$work/ab.$be" --data "$corpus" "${abkeys[@]}" --set backend="$be" --seeds 1 \
        --variant "lr2: lr=0.006" >"$work/ab.$be.log" 2>&1 ||
        { echo "FAILED ab on $be: $(tail -n 2 "$work/ab.$be.log")"; fail=1; }
done
for cell in control/seed1 lr2/seed1; do
    same "$work/ab.cpu/$cell" "$work/ab.fenced/$cell" && echo "same   ab $cell" || bad "ab $cell"
done

# data parallel: mpirun -np 2 on each backend (the exchange reads host data)
if [[ -n $mpiexec ]]; then
    for be in cpu fenced; do
        # shellcheck disable=SC2046
        # (under a sanitizer build: OpenMPI's own leaks suppressed, as tests/test_dist.c does)
        $mpiexec --allow-run-as-root --oversubscribe --mca mca_base_component_disable_dlclose 1 \
            -x LSAN_OPTIONS="suppressions=$src/tests/fixtures/lsan_mpi.supp:print_suppressions=0" \
            -x ASAN_OPTIONS=fast_unwind_on_malloc=0 -np 2 "$bin" train --out "$work/mpi.$be" --data "$corpus" \
            $(sets backend="$be" grad_accum=2) >"$work/mpi.$be.log" 2>&1 ||
            { echo "FAILED mpirun -np 2 on $be: $(tail -n 2 "$work/mpi.$be.log")"; fail=1; }
    done
    same "$work/mpi.cpu" "$work/mpi.fenced" && echo "same   mpirun -np 2" || bad "mpirun -np 2"
else
    echo "SKIP   mpirun -np 2: this build has no MPI"
fi

if (( fail )); then
    echo "fenced_backend: FAILED (logs were in $work)"
    exit 1
fi
rm -rf "$work"
echo "fenced_backend: every run on backend=fenced matched backend=cpu bit for bit"
