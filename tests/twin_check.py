#!/usr/bin/env python3
"""twin_check.py -- the PyTorch twin's side of tests/test_python.c.

    twin_check.py CKPT TOKENS LOGITS WINDOW SAMPLE_ARGS_JSON

CKPT: a dormouse run directory. TOKENS: raw bytes [B, T+1] (B from the file size and T from
the checkpoint's seq_len); LOGITS: the C model's logits of tokens[:, :T] as float32
[B, T, 256] (fp32 products). WINDOW: the bytes `dormouse eval` scored. SAMPLE_ARGS_JSON: the
arguments of the samples to draw. Prints one JSON object of the twin's numbers; the C test
compares them with dormouse's. No asserts here: the test owns the bounds.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import dormouse  # noqa: E402


def main():
    ckpt, tokens_path, logits_path, window_path, sample_json = sys.argv[1:6]
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)
    model = dormouse.load(ckpt, precision="fp32")
    T = model.config["seq_len"]
    tok = np.fromfile(tokens_path, dtype=np.uint8).reshape(-1, T + 1)
    c_logits = torch.from_numpy(np.fromfile(logits_path, dtype="<f4").reshape(tok.shape[0], T, 256))
    x = torch.from_numpy(tok[:, :T].astype(np.int64))
    out = {"ref_max_abs": c_logits.abs().max().item()}
    for impl in ("serial", "chunked"):
        lg = model(x, impl=impl, chunk=16)  # chunks of 16: several chunks and a partial one
        out[f"logits_max_abs_diff_{impl}"] = (lg - c_logits).abs().max().item()
    out["serial_vs_chunked"] = (model(x, impl="serial") - model(x, impl="chunked", chunk=16)).abs().max().item()
    loss_c = torch.nn.functional.cross_entropy(c_logits.reshape(-1, 256).double(),
                                               torch.from_numpy(tok[:, 1:].astype(np.int64)).reshape(-1))
    out["loss_from_c_logits"] = loss_c.item()
    out["loss_twin"] = model.loss(torch.from_numpy(tok.astype(np.int64))).item()
    with open(window_path, "rb") as f:
        window = f.read()
    out["bpb_fp32"] = dormouse.bpb(model, window)
    model.set_precision("auto")
    out["precision_auto"] = model.precision
    out["bpb_auto"] = dormouse.bpb(model, window)
    model.set_precision("fp32")
    samples = []
    for s in json.loads(sample_json):
        b = dormouse.sample(model, s["prompt"].encode(), s["len"], s["temperature"], s["top_k"],
                            s["top_p"], s["seed"], s.get("index", 0))
        samples.append((s["prompt"].encode() + b).hex())
    out["samples"] = samples
    # the twin writes a checkpoint dormouse reads: the same weights, the same numbers
    saved = os.path.join(os.path.dirname(tokens_path), "twin.safetensors")
    dormouse.save(model, saved)
    again, _ = dormouse.read_safetensors(saved)
    out["saved"] = saved
    out["saved_roundtrip"] = all(torch.equal(again[k], v) for k, v in model.state_dict().items())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
