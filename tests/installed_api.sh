#!/usr/bin/env bash
# installed_api.sh BUILD_DIR SOURCE_DIR — the public C API as a user gets it: install the
# build into a temporary prefix (cmake --install), build tests/api_client.c against it
# with `pkg-config --cflags --libs dormouse` alone, and check that the program gets the
# `dormouse` command's numbers: the BPB `dormouse eval` gives a checkpoint, and after two
# training steps from it the losses, gradient norms and checkpoint (model and optimizer
# tensors, bit for bit) of `dormouse train --resume` for those two steps; and the model
# alone (no optimizer) loaded, evaluated to the same BPB, given those parameters through
# host memory and saved to the same tensors; on the cpu backend and on fenced (the test
# backend that refuses host views).
set -uo pipefail
build=${1:?usage: installed_api.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: installed_api.sh BUILD_DIR SOURCE_DIR}
work=$(mktemp -d /tmp/installed_api.XXXXXX)
fail() { echo "installed_api: FAILED: $* (files in $work)"; exit 1; }

command -v pkg-config >/dev/null || { echo "SKIP installed_api: no pkg-config"; exit 77; }
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
    fail "cmake --install: $(tail -n 1 "$work/install.log")"
pc=$(find "$work/prefix" -name dormouse.pc | head -n 1)
[[ -n $pc ]] || fail "no dormouse.pc installed"
export PKG_CONFIG_PATH=$(dirname "$pc")
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -o "$work/api_client" "$src/tests/api_client.c" \
    $(pkg-config --cflags --libs dormouse) 2>"$work/cc.log" ||
    fail "the client does not build against the installed library: $(head -n 3 "$work/cc.log")"
dormouse=$work/prefix/bin/dormouse

gzip -dc "$src/data/kjv.txt.gz" >"$work/corpus.txt" || fail "cannot unpack the corpus"
sets=()
for s in d_model=64 n_layer=2 n_head=2 head_dim=32 gate_rank=16 batch_size=2 seq_len=64 \
         steps=8 warmup_steps=2 eval_every=4 log_every=1 eval_window=2048 ckpt_every=2 \
         grad_accum=2 threads=1; do
    sets+=(--set "$s")
done
"$dormouse" train --out "$work/run" --data "$work/corpus.txt" "${sets[@]}" --until 4 \
    >"$work/train.log" 2>&1 || fail "dormouse train: $(tail -n 1 "$work/train.log")"
cp -r "$work/run" "$work/resumed"
"$dormouse" train --resume "$work/resumed" --until 6 >>"$work/train.log" 2>&1 ||
    fail "dormouse train --resume: $(tail -n 1 "$work/train.log")"
ckpt=$work/run/ckpt-00000004
want_bpb=$("$dormouse" eval "$ckpt" --data "$work/corpus.txt" 2>&1 | grep -o 'val_bpb [0-9.]*')

# same_steps CLIENT_LOG: the client's two steps against dormouse train --resume's
same_steps() {
/usr/bin/python3 - "$1" "$work/resumed" <<'PY'
import json, os, struct, sys
log, resumed = sys.argv[1:]
f32 = lambda x: struct.pack("<f", float(x))
got = {}
for line in open(log):
    w = line.split()
    if w and w[0] == "step":
        got[int(w[1])] = (w[3], w[5])
want = {}
for line in open(os.path.join(resumed, "metrics.jsonl")):
    o = json.loads(line)
    if o.get("step") in got and "loss" in o:
        want[o["step"]] = (o["loss"], o["grad_norm"])
bad = []
if sorted(got) != [5, 6] or sorted(want) != [5, 6]:
    bad.append(f"steps: client {sorted(got)}, dormouse {sorted(want)}")
for s in sorted(set(got) & set(want)):
    # metrics.jsonl: the loss as a float's shortest digits, the norm as %.6g
    if f32(got[s][0]) != f32(want[s][0]) or "%.6g" % float(got[s][1]) != "%.6g" % want[s][1]:
        bad.append(f"step {s}: client loss {got[s][0]} norm {got[s][1]}, dormouse {want[s]}")
for x in bad:
    print("  " + x)
if not bad:
    print("same losses, gradient norms and step-6 checkpoint as dormouse train --resume")
sys.exit(1 if bad else 0)
PY
}

# same_model CKPT_A CKPT_B: model.safetensors holds the same tensors in both (B may hold
# the optimizer's state too; A, saved by dm_model_save, must not)
same_model() {
/usr/bin/python3 - "$1" "$2" "$src/tests" <<'PY'
import os, sys
a, b, tests = sys.argv[1:]
sys.path.insert(0, tests)
from same_run import tensors
bad = []
if os.path.exists(os.path.join(a, "optim.safetensors")):
    bad.append(f"{a} holds an optimizer state")
ta, tb = (tensors(os.path.join(d, "model.safetensors")) for d in (a, b))
if ta.keys() != tb.keys():
    bad.append(f"tensors in one file only: {sorted(set(ta) ^ set(tb))}")
bad += [f"tensor {k} differs" for k in sorted(set(ta) & set(tb)) if ta[k] != tb[k]]
for x in bad:
    print("  " + x)
if not bad:
    print("the model saved alone holds the trainer's step-6 parameters")
sys.exit(1 if bad else 0)
PY
}

# the client on the cpu backend and on fenced (no host view: every access a copy)
for be in cpu fenced; do
    "$work/api_client" "$ckpt" "$work/corpus.txt" "$work/client.$be" "$be" \
        >"$work/client.$be.log" 2>&1 || fail "api_client on $be: $(tail -n 1 "$work/client.$be.log")"
    cat "$work/client.$be.log"
    got_bpb=$(grep -o '^bpb [0-9.]*' "$work/client.$be.log")
    [[ -n $want_bpb && "val_$got_bpb" == "$want_bpb" ]] ||
        fail "BPB: the client's '$got_bpb', dormouse eval's '$want_bpb'"
    model_bpb=$(grep -o '^model bpb [0-9.]*' "$work/client.$be.log")
    [[ "val_${model_bpb#model }" == "$want_bpb" ]] ||
        fail "BPB of the model alone: the client's '$model_bpb', dormouse eval's '$want_bpb'"
    echo "same BPB as dormouse eval ($want_bpb), with the trainer and the model alone"

    /usr/bin/python3 "$src/tests/same_run.py" --ckpt "$work/client.$be/ckpt-00000006" \
        "$work/resumed/ckpt-00000006" || fail "the step-6 checkpoints differ on $be"
    same_steps "$work/client.$be.log" || fail "the steps differ on $be"
    same_model "$work/client.$be/model/ckpt-00000006" "$work/resumed/ckpt-00000006" ||
        fail "the model saved alone differs on $be"
done
rm -rf "$work"
