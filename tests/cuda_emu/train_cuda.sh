#!/usr/bin/env bash
# train_cuda.sh DORMOUSE DORMOUSE_EMU SOURCE_DIR [tokens] — `train` with backend=cuda on the CUDA
# emulator (docs/emulator.md): DORMOUSE_EMU is the command built with the CUDA module's
# code run on the emulator. A tiny model trains 20 steps (Muon, AdamW, the sphere
# retraction) on the emulated GPU and on the cpu (DORMOUSE, backend=cpu) from the same
# seed; every logged loss must agree within 1e-5 relative. Then `eval` of the cpu run's
# checkpoint with backend=cuda gives the cpu's val_bpb within 1e-5, `sample` runs, and a
# cuda run stopped at step 10 and resumed logs the straight cuda run's values, bit for bit.
# The cuda runs replay their steps as captured graphs (step graphs: on, said at the start).
# With `bf16`, instead: 20 steps with precision=bf16 on the emulated GPU (its products and
# its delta core on bf16 operands, the core on the tensor cores) against the cpu's bf16
# path (the reference standing in: DM_CPU_BF16_REFERENCE), every loss within 5e-3 (fla's
# bound on the core's output; the cpu's core is f32). With `tokens`, instead: a model of tokens (a vocabulary of 512 prepared from the corpus'
# first 200 kB) trains 10 steps on both, its losses within 1e-5, and samples from a prompt
# on cuda (exit 77, skipped, in a build without SentencePiece).
# Exit 0 when all hold, 1 naming what does not.
set -uo pipefail
cpu=${1:?usage: train_cuda.sh DORMOUSE DORMOUSE_EMU SOURCE_DIR}
emu=${2:?usage: train_cuda.sh DORMOUSE DORMOUSE_EMU SOURCE_DIR}
src=${3:?usage: train_cuda.sh DORMOUSE DORMOUSE_EMU SOURCE_DIR}
mode=${4:-bytes}
work=$(mktemp -d /tmp/train_cuda.XXXXXX)
trap 'rm -rf "$work"' EXIT

tiny=(d_model=32 n_layer=2 n_head=2 head_dim=16 gate_rank=8 batch_size=2 seq_len=32
      steps=20 warmup_steps=2 log_every=1 eval_every=0 eval_window=2048 ckpt_every=10
      precision=fp32 threads=1)
sets() { local s; for s in "${tiny[@]}" "$@"; do printf -- ' --set %s' "$s"; done; }

# every logged loss of run $1 (cpu) against run $2 (cuda): at least $3 steps, within $4
# relative (1e-5 when not given)
same_losses() {
    /usr/bin/python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" "${4:-1e-5}" <<'PY'
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if len(a) < int(sys.argv[3]) or sorted(a) != sorted(b):
    sys.exit(f"steps logged: cpu {len(a)}, cuda {len(b)}")
worst, bound = max(abs(b[s] - a[s]) / abs(a[s]) for s in a), float(sys.argv[4])
for s in sorted(a):
    print(f"step {s:3d}  loss cpu {a[s]:.7f}  cuda {b[s]:.7f}")
print(f"largest relative difference {worst:.3g} (bound {sys.argv[4]})")
sys.exit(0 if worst <= bound else 1)
PY
}

# a model of tokens: the embedding, the fused head and its cross-entropy on the emulated GPU
tokens() {
    gzip -dc "$src/data/kjv.txt.gz" | head -c 200000 >"$work/small.txt"
    if ! "$cpu" prepare "$work/small.txt" --out "$work/tok" --vocab 512 >"$work/prepare.log" 2>&1
    then
        grep -q "without SentencePiece" "$work/prepare.log" &&
            { echo "skipped: $(tail -n 1 "$work/prepare.log")"; exit 77; }
        echo "FAILED prepare --vocab 512: $(tail -n 2 "$work/prepare.log")"; exit 1
    fi
    local be bin
    for be in cpu cuda; do
        bin=$cpu; [[ $be == cuda ]] && bin=$emu
        # shellcheck disable=SC2046
        "$bin" train --out "$work/tok.$be" --data "$work/tok" \
            $(sets backend=$be steps=10) >"$work/tok.$be.log" 2>&1 ||
            { echo "FAILED train of tokens on $be: $(tail -n 3 "$work/tok.$be.log")"; exit 1; }
    done
    same_losses "$work/tok.cpu" "$work/tok.cuda" 10 || { echo "tokens: the losses differ"; exit 1; }
    "$emu" sample "$work/tok.cuda" --len 20 --seed 3 --prompt "The" --set backend=cuda \
        >"$work/sample.tok" 2>"$work/sample.err" ||
        { echo "FAILED sample of tokens on cuda: $(tail -n 2 "$work/sample.err")"; exit 1; }
    echo "tokens on cuda: sampled $(head -c 60 "$work/sample.tok" | tr -c '[:print:]' '?')"
    exit 0
}
[[ $mode == tokens ]] && tokens

if [[ $mode == bf16 ]]; then
    for be in cpu cuda; do
        # shellcheck disable=SC2046
        DM_CPU_NO_BF16=1 DM_CPU_BF16_REFERENCE=1 "$emu" train --out "$work/bf.$be" \
            --data "$src/data/kjv.txt.gz" $(sets backend=$be precision=bf16) \
            >"$work/bf.$be.log" 2>&1 ||
            { echo "FAILED bf16 train on $be: $(tail -n 3 "$work/bf.$be.log")"; exit 1; }
    done
    grep -m1 "policy:" "$work/bf.cuda.log"
    grep -q "step graphs: on" "$work/bf.cuda.log" ||
        { echo "the bf16 cuda run did not replay its steps as graphs"; exit 1; }
    same_losses "$work/bf.cpu" "$work/bf.cuda" 20 5e-3 || exit 1
    exit 0
fi

# shellcheck disable=SC2046
"$cpu" train --out "$work/cpu" --data "$src/data/kjv.txt.gz" $(sets backend=cpu) \
    >"$work/cpu.log" 2>&1 || { echo "FAILED train on cpu: $(tail -n 3 "$work/cpu.log")"; exit 1; }
# shellcheck disable=SC2046
"$emu" train --out "$work/cuda" --data "$src/data/kjv.txt.gz" $(sets backend=cuda) \
    >"$work/cuda.log" 2>&1 || { echo "FAILED train on cuda (emulated): $(tail -n 3 "$work/cuda.log")"; exit 1; }
grep -m1 "policy:" "$work/cuda.log"
grep -m1 "step graphs: on" "$work/cuda.log" ||
    { echo "the cuda run did not replay its steps as graphs: $(grep -m1 "step graphs" "$work/cuda.log")"; exit 1; }
same_losses "$work/cpu" "$work/cuda" 20 || exit 1

# eval and sample of the cpu run's checkpoint on the emulated GPU
for be in cpu cuda; do
    "$emu" eval "$work/cpu" --data "$src/data/kjv.txt.gz" --set backend=$be \
        --set eval_window=2048 >"$work/eval.$be" 2>&1 ||
        { echo "FAILED eval on $be: $(tail -n 2 "$work/eval.$be")"; exit 1; }
done
"$emu" sample "$work/cpu" --len 20 --seed 3 --set backend=cuda >"$work/sample.cuda" 2>&1 ||
    { echo "FAILED sample on cuda: $(tail -n 2 "$work/sample.cuda")"; exit 1; }
a=$(sed -n 's/^val_bpb \([0-9.]*\) .*/\1/p' "$work/eval.cpu")
b=$(sed -n 's/^val_bpb \([0-9.]*\) .*/\1/p' "$work/eval.cuda")
/usr/bin/python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); \
print(f'eval val_bpb cpu {a} cuda {b}'); sys.exit(0 if abs(a - b) <= 1e-5 * a else 1)" "$a" "$b" ||
    { echo "eval differs: cpu [$a] cuda [$b]"; exit 1; }

# resume on the emulated GPU: to step 10, then on to 20, against the straight cuda run
# shellcheck disable=SC2046
"$emu" train --out "$work/resume" --data "$src/data/kjv.txt.gz" $(sets backend=cuda) --until 10 \
    >"$work/resume.log" 2>&1 && "$emu" train --resume "$work/resume" >>"$work/resume.log" 2>&1 ||
    { echo "FAILED resume on cuda: $(tail -n 2 "$work/resume.log")"; exit 1; }
/usr/bin/python3 "$src/tests/same_run.py" "$work/cuda" "$work/resume" && echo "same   resume on cuda" ||
    { echo "DIFFER resume on cuda"; exit 1; }
