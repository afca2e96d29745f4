#!/usr/bin/env bash
# same_bits.sh OLD_BUILD NEW_BUILD [WORK_DIR] — do two builds of dormouse compute the same
# bits? Runs one matrix of small training runs with each build's `dormouse` and compares,
# run by run: every logged loss, grad norm and val_bpb (metrics.jsonl prints a float's
# shortest exact digits), the eval of the last checkpoint, and every tensor of every
# checkpoint (model.safetensors and optim.safetensors: names, dtypes, shapes and data
# bytes; the __metadata__ may differ, e.g. when one build writes checksums there).
#
# The matrix: KDA and GDN; checkpointing none, balanced, full; grad_accum 2; 1 and 2
# threads; a resume (train to step 4, resume to 8) against the straight run's own
# checkpoints; `mpirun -np 2` when MPI is there; precision=bf16 where the CPU has bf16
# (said when it is skipped). Exit 0 when every run matched, 1 with each difference named.
set -uo pipefail
old=${1:?usage: same_bits.sh OLD_BUILD_DIR NEW_BUILD_DIR [WORK_DIR]}
new=${2:?usage: same_bits.sh OLD_BUILD_DIR NEW_BUILD_DIR [WORK_DIR]}
work=${3:-$(mktemp -d /tmp/same_bits.XXXXXX)}
root=$(cd "$(dirname "$0")/.." && pwd)
corpus=$root/data/kjv.txt.gz
for b in "$old" "$new"; do
    [[ -x $b/dormouse ]] || { echo "same_bits: no $b/dormouse (build it first)" >&2; exit 2; }
done
mkdir -p "$work"

tiny=(d_model=64 n_layer=2 n_head=2 head_dim=32 gate_rank=16 batch_size=2 seq_len=64
      steps=8 warmup_steps=2 eval_every=4 log_every=1 eval_window=2048 ckpt_every=4
      threads=1)
sets() { local s; for s in "${tiny[@]}" "$@"; do printf -- ' --set %s' "$s"; done; }

fail=0 runs=0
# compare NAME DIR_OLD DIR_NEW: metrics and every checkpoint's tensors
compare() {
    local name=$1 a=$2 b=$3
    runs=$((runs + 1))
    if ! /usr/bin/python3 - "$a" "$b" <<'PY'; then
import json, os, struct, sys
a, b = sys.argv[1], sys.argv[2]
bad = []
def metrics(d):
    rows = []
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            rows.append({k: o[k] for k in ("step", "loss", "grad_norm", "val_bpb") if k in o})
    return rows
ma, mb = metrics(a), metrics(b)
if ma != mb:
    for i, (x, y) in enumerate(zip(ma, mb)):
        if x != y:
            bad.append(f"metrics line {i + 1}: {x} != {y}")
            break
    else:
        bad.append(f"metrics: {len(ma)} lines against {len(mb)}")
def tensors(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items()}
ca = sorted(x for x in os.listdir(a) if x.startswith("ckpt-"))
cb = sorted(x for x in os.listdir(b) if x.startswith("ckpt-"))
if ca != cb:
    bad.append(f"checkpoints {ca} against {cb}")
for c in sorted(set(ca) & set(cb)):
    for fn in ("model.safetensors", "optim.safetensors"):
        pa, pb = os.path.join(a, c, fn), os.path.join(b, c, fn)
        if os.path.exists(pa) != os.path.exists(pb):
            bad.append(f"{c}/{fn} in one run only")
            continue
        if not os.path.exists(pa):
            continue
        ta, tb = tensors(pa), tensors(pb)
        if ta.keys() != tb.keys():
            bad.append(f"{c}/{fn}: tensors {sorted(set(ta) ^ set(tb))} in one file only")
        for k in sorted(set(ta) & set(tb)):
            if ta[k] != tb[k]:
                bad.append(f"{c}/{fn}: tensor {k} differs")
                break
for x in bad:
    print("    " + x)
sys.exit(1 if bad else 0)
PY
        echo "DIFFER $name"
        fail=1
    else
        echo "same   $name"
    fi
}

# run NAME EXTRA_SETS...: train with both builds and compare
run() {
    local name=$1; shift
    local s; s=$(sets "$@")
    for side in old new; do
        local bin=$old; [[ $side == new ]] && bin=$new
        rm -rf "$work/$name.$side"
        # shellcheck disable=SC2086
        if ! "$bin/dormouse" train --out "$work/$name.$side" --data "$corpus" $s \
            >"$work/$name.$side.log" 2>&1; then
            echo "FAILED $name ($side): $(tail -n 1 "$work/$name.$side.log")"
            fail=1
            return
        fi
    done
    compare "$name" "$work/$name.old" "$work/$name.new"
    local ea eb
    ea=$("$old/dormouse" eval "$work/$name.old" 2>&1 | grep -o 'bpb [0-9.na-]*' | head -n 1)
    eb=$("$new/dormouse" eval "$work/$name.new" 2>&1 | grep -o 'bpb [0-9.na-]*' | head -n 1)
    [[ $ea == "$eb" ]] || { echo "DIFFER $name: eval '$ea' against '$eb'"; fail=1; }
}

run kda_none
run kda_balanced checkpointing=balanced
run kda_full checkpointing=full
run gdn_none mixer=gdn
run gdn_full mixer=gdn checkpointing=full
run kda_accum2 grad_accum=2
run kda_threads2 threads=2
run kda_onednn gemm=onednn
run kda_sphere retract=sphere
if grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo; then
    run kda_bf16 precision=bf16
    run gdn_bf16 mixer=gdn precision=bf16 checkpointing=balanced
else
    echo "SKIP   bf16 runs: this CPU has neither avx512_bf16 nor amx_bf16"
fi

# resume: both builds train to step 4 and resume to 8
for side in old new; do
    bin=$old; [[ $side == new ]] && bin=$new
    d=$work/resume.$side
    rm -rf "$d"
    # shellcheck disable=SC2046
    "$bin/dormouse" train --out "$d" --data "$corpus" $(sets) --until 4 >"$d.log" 2>&1 &&
        "$bin/dormouse" train --resume "$d" >>"$d.log" 2>&1 ||
        { echo "FAILED resume ($side): $(tail -n 1 "$d.log")"; fail=1; }
done
compare resume "$work/resume.old" "$work/resume.new"

mpirun_bin=$(command -v mpirun || true)
if [[ -n $mpirun_bin ]]; then
    for side in old new; do
        bin=$old; [[ $side == new ]] && bin=$new
        d=$work/mpi2.$side
        rm -rf "$d"
        # shellcheck disable=SC2046
        "$mpirun_bin" --allow-run-as-root --oversubscribe -np 2 "$bin/dormouse" train \
            --out "$d" --data "$corpus" $(sets grad_accum=2) >"$d.log" 2>&1 ||
            { echo "FAILED mpi2 ($side): $(tail -n 1 "$d.log")"; fail=1; }
    done
    compare mpi2 "$work/mpi2.old" "$work/mpi2.new"
else
    echo "SKIP   mpirun -np 2: no mpirun"
fi

echo "same_bits: $runs runs compared in $work: $([[ $fail == 0 ]] && echo 'all the same bits' || echo 'DIFFERENCES')"
exit $fail
