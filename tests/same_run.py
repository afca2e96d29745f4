"""same_run.py — do two training runs hold the same bits?

    same_run.py RUN_A RUN_B        every metrics.jsonl value (step, loss, grad_norm, val_bpb;
                                   the first differing line named) and every tensor of every
                                   ckpt-* (model and optimizer; at least one checkpoint)
    same_run.py --ckpt CKPT_A CKPT_B   the tensors of two checkpoint directories

A tensor is its dtype, shape and data bytes (the __metadata__ may differ). Prints each
difference; exit 0 when there is none, 1 otherwise."""
import json
import os
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items()}


def same_ckpt(a, b, name):
    bad = []
    for fn in ("model.safetensors", "optim.safetensors"):
        pa, pb = os.path.join(a, fn), os.path.join(b, fn)
        if os.path.exists(pa) != os.path.exists(pb):
            bad.append(f"{name}/{fn} in one run only")
            continue
        if not os.path.exists(pa):
            continue
        ta, tb = tensors(pa), tensors(pb)
        if ta.keys() != tb.keys():
            bad.append(f"{name}/{fn}: tensors {sorted(set(ta) ^ set(tb))} in one file only")
        for k in sorted(set(ta) & set(tb)):
            if ta[k] != tb[k]:
                bad.append(f"{name}/{fn}: tensor {k} differs")
                break
    return bad


def metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [{k: o[k] for k in ("step", "loss", "grad_norm", "val_bpb") if k in o}
                for o in map(json.loads, f)]


def same_run(a, b):
    bad = []
    ma, mb = metrics(a), metrics(b)
    if ma != mb:
        for i, (x, y) in enumerate(zip(ma, mb)):
            if x != y:
                bad.append(f"metrics line {i + 1}: {x} != {y}")
                break
        else:
            bad.append(f"metrics: {len(ma)} lines against {len(mb)}")
    ca = sorted(x for x in os.listdir(a) if x.startswith("ckpt-"))
    cb = sorted(x for x in os.listdir(b) if x.startswith("ckpt-"))
    if not ca or ca != cb:
        bad.append(f"checkpoints {ca} against {cb}")
    for c in sorted(set(ca) & set(cb)):
        bad += same_ckpt(os.path.join(a, c), os.path.join(b, c), c)
    return bad


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "--ckpt":
        problems = same_ckpt(args[1], args[2], os.path.basename(args[1].rstrip("/")))
    elif len(args) == 2:
        problems = same_run(args[0], args[1])
    else:
        sys.exit("usage: same_run.py RUN_A RUN_B | same_run.py --ckpt CKPT_A CKPT_B")
    for p in problems:
        print("    " + p)
    sys.exit(1 if problems else 0)
