#!/usr/bin/env python3
"""dormouse.py -- a PyTorch twin of dormouse's model: load its checkpoints, reproduce its
numbers, sample from it.

dormouse (a C11 trainer) writes plain safetensors checkpoints; this module reads them into a
torch module that computes the same function as the C code (docs/architecture.md section 3,
docs/kda.md), so the weights can be used, inspected and fine-tuned from Python:

    import dormouse
    model = dormouse.load("runs/default")            # a run dir, ckpt dir or model file
    data = dormouse.read_corpus(model.data_path)     # the corpus the run trained on
    print(dormouse.bpb(model, data[-model.config["eval_window"]:]))   # == `dormouse eval`
    print(dormouse.sample(model, b"And God said", 200).decode())      # == `dormouse sample`

Command line (same numbers as the C commands, on the same machine):

    python3 python/dormouse.py eval RUN_DIR [--data PATH] [--set eval_window=N] ...
    python3 python/dormouse.py sample RUN_DIR --prompt "And God said" --len 200
    python3 python/dormouse.py bench [--core fla] [--precision bf16] [--history FILE]

What matches what:
  * the model: token-serial recurrence (impl="serial", the definition) or the chunked form
    (impl="chunked", the WY/UT algorithm of docs/chunked.md); both are the C model's math;
  * `bpb` cuts the window exactly as `dormouse eval` (sequences of seq_len+1 bytes at
    stride seq_len, the last one shorter) and agrees with it to about 1e-6 bits per byte;
  * `sample` uses dormouse's own random generator (xoshiro256** seeded by splitmix64) and
    its temperature / top-k / top-p rule, so it draws the same bytes as `dormouse sample`
    with the same seed (as long as the logits agree, which they do to ~1e-5);
  * precision: dormouse's `precision=auto` runs its matrix products with bf16 operands on a
    CPU with avx512_bf16 / amx_bf16; `precision="auto"` here does the same (the operands
    of every product rounded to bf16, f32 sums), "fp32" never.

Needs only torch and numpy (Debian: python3-torch, for /usr/bin/python3). The safetensors
format is parsed here with json + numpy (the `safetensors` package is not needed). Run by
an interpreter without them, the command says so in one line, naming the interpreter that
has them when there is one.
"""

import argparse
import gzip
import json
import math
import os
import re
import shlex
import struct
import subprocess
import sys
import time


def _lacks_torch(why):
    """One line: this interpreter lacks torch or numpy; which one has them, or what to
    install (Debian's python3-torch serves /usr/bin/python3)."""
    me = os.path.realpath(sys.executable or "python3")
    cmd = " ".join(shlex.quote(a) for a in sys.argv)
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if not os.access(cand, os.X_OK) or os.path.realpath(cand) == me:
            continue
        ok = subprocess.run([cand, "-c", "import torch, numpy"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL).returncode == 0
        if ok:
            return (f"error: dormouse.py needs torch and numpy, which this python ({me}, "
                    f"{sys.version.split()[0]}) lacks ({why}); {cand} has them: "
                    f"{cand} {cmd}")
    return (f"error: dormouse.py needs torch and numpy, which this python ({me}, "
            f"{sys.version.split()[0]}) lacks ({why}); on Debian: sudo apt-get install "
            f"python3-torch, then /usr/bin/python3 {cmd}")


try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    if __name__ == "__main__":
        sys.exit(_lacks_torch(e))
    raise ImportError(_lacks_torch(e)) from e

VOCAB = 256
NORM_EPS = 1e-6  # RMSNorm and the per-head output norm (src/model/model.h)
L2_EPS = 1e-6    # per-head L2 norm of q and k

# the defaults of the C config (src/base/config.c), for keys a checkpoint may lack
DEFAULTS = dict(d_model=256, n_layer=2, n_head=4, head_dim=64, gate_rank=64, conv_size=4,
                mixer="kda", gate_lower_bound=0.0, tie_embeddings=False, seed=1,
                batch_size=8, seq_len=512, eval_window=81920, eval_windows=1, precision="auto")
EVAL_WINDOW_SEED = 0x5EED0FE7A1  # the fixed seed of eval_windows=N (src/io/data.h)


# ---- safetensors -------------------------------------------------------------------------

def read_safetensors(path):
    """The tensors (name -> float32 torch tensor) and the metadata (dict of str) of a
    safetensors file. Only F32 tensors (what dormouse writes)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError(f"{path}: not a safetensors file (header past the end)")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    data = memoryview(raw)[8 + n:]
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} is {t['dtype']}, expected F32")
        b, e = t["data_offsets"]
        shape = tuple(t["shape"])
        if not 0 <= b <= e <= len(data) or e - b != 4 * int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name} has bad offsets")
        arr = np.frombuffer(data[b:e], dtype="<f4").reshape(shape)
        tensors[name] = torch.from_numpy(arr.astype(np.float32))  # a copy, native order
    return tensors, meta


_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5, _M = 9650029242287828579, 2870177450012600261, (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc, lane):
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def xxh64(data, seed=0):
    """XXH64 of bytes (the checksum dormouse keeps per tensor; pure Python, as xxHash 0.8)."""
    n, p = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        p = n // 32 * 32
        for a, b, c, d in struct.iter_unpack("<4Q", data[:p]):
            v = [_round(v[0], a), _round(v[1], b), _round(v[2], c), _round(v[3], d)]
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for x in v:
            h = ((h ^ _round(0, x)) * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while p + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, p)[0])
        h, p = (_rotl(h, 27) * _P1 + _P4) & _M, p + 8
    if p + 4 <= n:
        h ^= (struct.unpack_from("<I", data, p)[0] * _P1) & _M
        h, p = (_rotl(h, 23) * _P2 + _P3) & _M, p + 4
    while p < n:
        h ^= (data[p] * _P5) & _M
        h, p = (_rotl(h, 11) * _P1) & _M, p + 1
    h = ((h ^ (h >> 33)) * _P2) & _M
    h = ((h ^ (h >> 29)) * _P3) & _M
    return h ^ (h >> 32)


def write_safetensors(path, tensors, meta):
    """Write name -> tensor (float32) with string metadata and the checksums dormouse checks
    (XXH64 of each tensor and of the metadata), data 8-byte aligned, tensors in name order
    (as dormouse reads any order)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name].detach().to(torch.float32).cpu().contiguous().numpy().astype("<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    md = {str(k): str(v) for k, v in meta.items()}
    # the checksums dormouse checks on load (docs/robustness.md): of the metadata (key NUL
    # value NUL, by key) and of each tensor's bytes
    md["xxh64:__metadata__"] = "%016x" % xxh64(b"".join(
        k.encode() + b"\0" + v.encode() + b"\0" for k, v in sorted(md.items())))
    for name, blob in zip(sorted(tensors), blobs):
        md["xxh64:" + name] = "%016x" % xxh64(blob)
    header["__metadata__"] = md
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def resolve(path):
    """A run directory (its newest ckpt-NNNNNNNN), a checkpoint directory or a model file ->
    the model file, as `dormouse eval CKPT` resolves it."""
    if os.path.isfile(path):
        return path
    p = os.path.join(path, "model.safetensors")
    if os.path.isfile(p):
        return p
    steps = sorted(int(d[5:]) for d in os.listdir(path) if re.fullmatch(r"ckpt-\d{8}", d))
    if not steps:
        raise FileNotFoundError(f"no checkpoint in {path}")
    return os.path.join(path, f"ckpt-{steps[-1]:08d}", "model.safetensors")


# ---- corpora ------------------------------------------------------------------------------

def read_corpus(path):
    """The bytes of a corpus as dormouse reads it: a file (gzip or plain), a data directory
    of `dormouse prepare` (train.bin then val.bin, read whole: validation_set maps val.bin)
    or a directory (its regular files not starting with '.', sorted by name, concatenated)."""
    if is_data_dir(path):
        return b"".join(read_corpus(os.path.join(path, n)) for n in ("train.bin", "val.bin"))
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(os.fsencode(path)) if not n.startswith(b"."))
        files = [os.path.join(os.fsencode(path), n) for n in names]
        return b"".join(read_corpus(f) for f in files if os.path.isfile(f))
    with open(path, "rb") as f:
        raw = f.read()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def is_data_dir(path):
    """A data directory of `dormouse prepare`: meta.json, train.bin and val.bin (with
    tokens: tokenizer.model, train.tok and val.tok beside them, docs/tokens.md)."""
    return os.path.isdir(path) and all(os.path.isfile(os.path.join(path, n))
                                       for n in ("meta.json", "train.bin", "val.bin"))


# ---- tokens (docs/tokens.md) --------------------------------------------------------------

def tokenizer_checksum(blob):
    """"xxh64:" and 16 hex digits of a tokenizer.model's bytes, as dormouse records it."""
    return f"xxh64:{xxh64(blob):016x}"


def piece_bytes(sp):
    """The bytes each id decodes to: a byte piece one, a control or unknown piece none, a
    piece its text with U+2581 as the space."""
    n = []
    for i in range(sp.get_piece_size()):
        if sp.is_byte(i):
            n.append(1)
        elif sp.is_control(i) or sp.is_unknown(i):
            n.append(0)
        else:
            n.append(len(sp.id_to_piece(i).replace("\u2581", " ").encode()))
    return np.array(n, dtype=np.int64)


def segments(text):
    """dormouse's segments (dm_tok_segment): each ends after a newline, or where a line
    reaches 65,536 bytes, cut back to a character boundary, or at the end."""
    s, n = 0, len(text)
    while s < n:
        nl = text.find(b"\n", s, s + 65536)
        e = nl + 1 if nl >= 0 else min(n, s + 65536)
        if nl < 0 and e < n:
            while e > s + 1 and (text[e] & 0xC0) == 0x80:
                e -= 1
        yield text[s:e]
        s = e


def encode(sp, text):
    """The ids of text (bytes), a segment at a time, as dormouse encodes it."""
    ids = []
    for seg in segments(bytes(text)):
        ids.extend(sp.encode(seg.decode("utf-8")))
    return np.array(ids, dtype=np.int64)


def val_tokens(model, path, val, whole=False):
    """The ids of the validation set of a model of tokens: a data directory of its
    tokenizer gives val.tok; a text is encoded with the run's tokenizer (its validation
    text alone). Another tokenizer is refused, naming both checksums."""
    if is_data_dir(path):
        with open(os.path.join(path, "meta.json")) as f:
            tok = json.load(f).get("tokens")
        if not tok:
            raise ValueError(f"{path}: bytes, but the model has vocab {model.config['vocab']}")
        theirs = tok["tokenizer"]["checksum"]
        if theirs != model.tokenizer_sum:
            raise ValueError(f"the data's tokenizer ({theirs}) is not the checkpoint's "
                             f"({model.tokenizer_sum})")
        dt = np.uint16 if tok["token_bytes"] == 2 else np.uint32
        return np.fromfile(os.path.join(path, "val.tok"), dtype=dt).astype(np.int64)
    return encode(model.sp, val)


def validation_set(path, eval_window, whole=False):
    """The validation set `dormouse eval` scores of a corpus path: a data directory's
    val.bin (mapped, not read), all of a validation corpus (whole: the run's --val), else
    the last eval_window bytes of the corpus."""
    if is_data_dir(path):
        return np.memmap(os.path.join(path, "val.bin"), dtype=np.uint8, mode="r")
    data = read_corpus(path)
    return data if whole else data[-eval_window:]


# ---- the model ----------------------------------------------------------------------------

def cpu_has_bf16():
    """dormouse's run-time rule for precision=auto: hardware bf16 (avx512_bf16 or amx_bf16)
    unless DM_CPU_NO_BF16=1."""
    if os.environ.get("DM_CPU_NO_BF16") == "1":
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", flags))


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * w


def softplus(u):
    # as the C gate: exactly u above 20, else max(u, 0) + log1p(exp(-|u|))
    return torch.where(u > 20, u, u.clamp(min=0) + torch.log1p(torch.exp(-u.abs())))


def causal_conv(x, w):
    """x: [B,T,C], w: [C,W]; y[t,c] = sum_i w[c,i] x[t-W+1+i,c] (zeros before t=0)."""
    W = w.shape[1]
    xp = F.pad(x.transpose(1, 2), (W - 1, 0))
    return F.conv1d(xp, w.unsqueeze(1), groups=w.shape[0]).transpose(1, 2)


def delta_serial(q, k, v, g, beta, scale, S=None):
    """The gated delta rule token by token (docs/kda.md section 4), the definition.
    q, k, g: [B,T,H,dk] (g broadcast for GDN); v: [B,T,H,dv]; beta: [B,T,H];
    S: [B,H,dk,dv] initial state (None: 0). Returns o [B,T,H,dv] and the final state."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    if S is None:
        S = k.new_zeros(B, H, dk, dv)
    out = []
    for t in range(T):
        S = S * torch.exp(g[:, t]).unsqueeze(-1)                    # decay first
        e = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t])     # error of the decayed state
        S = S + beta[:, t, :, None, None] * k[:, t].unsqueeze(-1) * e.unsqueeze(-2)
        out.append(scale * torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(out, 1), S


def delta_chunked(q, k, v, g, beta, scale, chunk=64, S=None):
    """The same recurrence in chunks of `chunk` tokens (docs/chunked.md): within a chunk the
    errors solve a unit lower-triangular system (the UT transform), decay factors taken
    exactly per pair (exp(G_r - G_j), never split); between chunks the state is carried."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    if S is None:
        S = k.new_zeros(B, H, dk, dv)
    # [B,H,T,d] layouts
    q, k, v, g = (x.transpose(1, 2) for x in (q, k, v, g))
    beta = beta.transpose(1, 2)
    out = []
    for c0 in range(0, T, chunk):
        qc, kc, vc, gc, bc = (x[:, :, c0:c0 + chunk] for x in (q, k, v, g, beta))
        n = kc.shape[2]
        G = torch.cumsum(gc, dim=2)                                  # [B,H,n,dk]
        diff = G.unsqueeze(3) - G.unsqueeze(2)                       # [B,H,r,j,dk]: G_r - G_j
        lower = torch.tril(torch.ones(n, n, dtype=torch.bool, device=k.device))
        dec = torch.exp(diff.masked_fill(~lower[..., None], float("-inf")))  # j <= r only
        A = scale * torch.einsum("bhrc,bhjc,bhrjc->bhrj", qc, kc, dec)       # j <= r
        Lr = torch.einsum("bhrc,bhjc,bhrjc->bhrj", kc, kc, dec).tril(-1)     # j < r
        eG = torch.exp(G)
        Kb = bc.unsqueeze(-1) * eG * kc
        R = bc.unsqueeze(-1) * vc - Kb @ S                           # beta v - Kb h
        I = torch.eye(n, dtype=k.dtype, device=k.device)
        Dl = torch.linalg.solve_triangular(I + bc.unsqueeze(-1) * Lr, R, upper=False,
                                           unitriangular=True)
        out.append(scale * (qc * eG) @ S + A @ Dl)                   # Qs h + A Dl
        Gend = G[:, :, -1:]
        S = torch.exp(Gend).transpose(-1, -2) * S + (kc * torch.exp(Gend - G)).transpose(-1, -2) @ Dl
    return torch.cat(out, 2).transpose(1, 2), S


def fla_core(kda):
    """fla's chunked delta rule (fla.ops.kda.chunk_kda, or for GDN
    fla.ops.gated_delta_rule.chunk_gated_delta_rule): q, k, v [B,T,H,d], g the log decay
    ([B,T,H,dk]; GDN [B,T,H]), beta [B,T,H] -> (o, state). ImportError without fla."""
    if kda:
        from fla.ops.kda import chunk_kda
        return chunk_kda
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    return chunk_gated_delta_rule


class Mixer(torch.nn.Module):
    """The KDA / GDN layer (src/model/mixer.c); parameter names as in the checkpoint."""

    def __init__(self, c):
        super().__init__()
        D, H, dh, R, W = c["d_model"], c["n_head"], c["head_dim"], c["gate_rank"], c["conv_size"]
        HD, self.kda = H * dh, c["mixer"] == "kda"
        self.H, self.dh, self.lb = H, dh, float(c["gate_lower_bound"])
        P = lambda *s: torch.nn.Parameter(torch.zeros(*s))
        self.w_q, self.w_k, self.w_v = P(HD, D), P(HD, D), P(HD, D)
        self.conv_q, self.conv_k, self.conv_v = P(HD, W), P(HD, W), P(HD, W)
        if self.kda:
            self.w_f1, self.w_f2 = P(R, D), P(HD, R)
            self.a_log, self.dt_bias = P(H), P(HD)
        else:
            self.w_a, self.a_log, self.dt_bias = P(H, D), P(H), P(H)
        self.w_b = P(H, D)
        if self.kda:
            self.w_g1, self.w_g2, self.b_g2 = P(R, D), P(HD, R), P(HD)
        else:
            self.w_z = P(HD, D)
        self.o_norm = P(dh)
        self.w_o = P(D, HD)

    def gate(self, f):
        """log decay g (<= 0) from the gate pre-activation f: [..., H, Cg]"""
        u = f + self.dt_bias.view(self.H, -1)
        A = torch.exp(self.a_log).view(self.H, 1)
        if self.lb == 0:
            return -A * softplus(u)
        return self.lb * torch.sigmoid(A * u)

    def project(self, x, lin):
        """q^, k^, v (before conv/silu: qt, kt, vt) and g, beta of x: [B,T,D]"""
        B, T, _ = x.shape
        H, dh = self.H, self.dh
        f = lin(lin(x, self.w_f1), self.w_f2) if self.kda else lin(x, self.w_a)
        g = self.gate(f.view(B, T, H, -1)).expand(B, T, H, dh)
        beta = torch.sigmoid(lin(x, self.w_b))
        return lin(x, self.w_q), lin(x, self.w_k), lin(x, self.w_v), g, beta

    def finish(self, x, o, lin):
        """the gated per-head norm and W_o: o [B,T,H,dh] -> y [B,T,D]"""
        B, T = o.shape[:2]
        if self.kda:
            z = lin(lin(x, self.w_g1), self.w_g2, self.b_g2)
            act = torch.sigmoid(z)
        else:
            z = lin(x, self.w_z)
            act = F.silu(z)
        op = rmsnorm(o, self.o_norm).reshape(B, T, -1) * act
        return lin(op, self.w_o)

    def qkv(self, qt, kt, vt, conv):
        """silu(conv(.)) of the projections; q, k L2-normalized per head"""
        B, T = qt.shape[:2]
        H, dh = self.H, self.dh
        l2 = lambda t: t * torch.rsqrt(t.pow(2).sum(-1, keepdim=True) + L2_EPS)
        q = l2(F.silu(conv(qt, self.conv_q)).view(B, T, H, dh))
        k = l2(F.silu(conv(kt, self.conv_k)).view(B, T, H, dh))
        v = F.silu(conv(vt, self.conv_v)).view(B, T, H, dh)
        return q, k, v

    def forward(self, x, lin, impl="chunked", chunk=64):
        qt, kt, vt, g, beta = self.project(x, lin)
        q, k, v = self.qkv(qt, kt, vt, causal_conv)
        scale = self.dh ** -0.5
        if impl == "serial":
            o, _ = delta_serial(q, k, v, g, beta, scale)
        elif impl == "fla":  # fla's Triton kernels (flash-linear-attention), for `bench`
            f = fla_core(self.kda)
            o, _ = f(q, k, v, g if self.kda else g[..., 0].contiguous(), beta, scale=scale)
        else:  # in f32 under a bf16 autocast (bench): its solve and eye have no bf16
            up = lambda t: t.float() if t.dtype in (torch.bfloat16, torch.float16) else t
            with torch.autocast(q.device.type, enabled=False):
                o, _ = delta_chunked(up(q), up(k), up(v), up(g), up(beta), scale, chunk)
        return self.finish(x, o, lin)


class MLP(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        D = c["d_model"]
        Fh = 256 * math.ceil((8 * D // 3) / 256)  # dm_config_mlp_hidden
        self.w_gate = torch.nn.Parameter(torch.zeros(Fh, D))
        self.w_up = torch.nn.Parameter(torch.zeros(Fh, D))
        self.w_down = torch.nn.Parameter(torch.zeros(D, Fh))

    def forward(self, x, lin):
        return lin(F.silu(lin(x, self.w_gate)) * lin(x, self.w_up), self.w_down)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm1 = torch.nn.Parameter(torch.ones(c["d_model"]))
        self.mixer = Mixer(c)
        self.norm2 = torch.nn.Parameter(torch.ones(c["d_model"]))
        self.mlp = MLP(c)


def bf16_round(x):
    """round to bf16 (nearest, ties to even) and back: the operands of dormouse's bf16
    products"""
    return x.to(torch.bfloat16).to(x.dtype)


class Model(torch.nn.Module):
    """The network (src/model/network.c): bytes in, logits over the next byte out.
        x = embed[byte]
        repeat n_layer:  x = x + Mixer(RMSNorm(x));  x = x + MLP(RMSNorm(x))
        logits = lm_head(RMSNorm(x))
    State-dict names are the checkpoint's tensor names."""

    def __init__(self, config):
        super().__init__()
        self.config = c = {**DEFAULTS, **config}
        D = c["d_model"]
        self.vocab = V = int(c.get("vocab", VOCAB))
        self.embed = torch.nn.Parameter(torch.zeros(V, D))
        self.layers = torch.nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.norm_f = torch.nn.Parameter(torch.ones(D))
        if not c["tie_embeddings"]:
            self.lm_head = torch.nn.Parameter(torch.zeros(V, D))
        self.sp = self.tokenizer_sum = None  # a model of tokens: its tokenizer (load)
        self.precision = "fp32"
        self.impl, self.chunk = "chunked", 64
        self.data_path = self.val_path = None  # the run's corpora (load)

    def head(self):
        return self.embed if self.config["tie_embeddings"] else self.lm_head

    def set_precision(self, precision):
        """"fp32", "bf16" (the operands of every matrix product rounded to bf16, as
        dormouse's precision=bf16) or "auto" (bf16 where dormouse's auto would pick it)."""
        if precision == "auto":
            precision = "bf16" if cpu_has_bf16() else "fp32"
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision: fp32, bf16 or auto, not {precision!r}")
        self.precision = precision
        return self

    def lin(self, x, w, b=None):
        if self.precision == "bf16":
            x, w = bf16_round(x), bf16_round(w)
        y = x @ w.t()
        return y if b is None else y + b

    def forward(self, tokens, impl=None, chunk=None):
        """tokens: [B,T] integer bytes -> logits [B,T,256]"""
        impl, chunk = impl or self.impl, chunk or self.chunk
        x = self.embed[tokens.long()]
        for blk in self.layers:
            x = x + blk.mixer(rmsnorm(x, blk.norm1), self.lin, impl, chunk)
            x = x + blk.mlp(rmsnorm(x, blk.norm2), self.lin)
        return self.lin(rmsnorm(x, self.norm_f), self.head())

    def loss(self, tokens, **kw):
        """mean cross-entropy in nats of tokens [B,T+1] (inputs [:, :-1], targets [:, 1:]),
        as dormouse's training loss"""
        logits = self.forward(tokens[:, :-1], **kw)
        return F.cross_entropy(logits.reshape(-1, self.vocab), tokens[:, 1:].reshape(-1).long())


def load(path, dtype=torch.float32, precision="auto"):
    """A dormouse checkpoint (run directory, ckpt-NNNNNNNN directory or model.safetensors)
    as a Model in eval mode. model.config is its config (dict of every key), model.step its
    step; model.data_path / model.val_path the corpora of its run when it lies in one."""
    file = resolve(path)
    tensors, meta = read_safetensors(file)
    if meta.get("format") != "dormouse-1" or "config" not in meta:
        raise ValueError(f"{file} is not a dormouse checkpoint")
    config = json.loads(meta["config"])
    config["seed"] = int(config.get("seed", 1))  # older checkpoints wrote it as a string
    m = Model(config)
    m.load_state_dict(tensors, strict=True)
    m.step = int(meta.get("step", 0))
    if "tokenizer" in meta:  # a model of tokens: the tokenizer its checkpoint carries
        with open(os.path.join(os.path.dirname(file), "tokenizer.model"), "rb") as f:
            blob = f.read()
        if tokenizer_checksum(blob) != meta["tokenizer"]:
            raise ValueError(f"{file}: its tokenizer.model is damaged")
        import sentencepiece
        m.sp = sentencepiece.SentencePieceProcessor(model_proto=blob)
        m.tokenizer_sum = meta["tokenizer"]
    m.to(dtype).eval().set_precision(precision if precision != "config" else config["precision"])
    run = os.path.dirname(os.path.dirname(os.path.abspath(file)))
    for name in ("data_path", "val_path"):
        p = os.path.join(run, name)
        if re.fullmatch(r"ckpt-\d{8}", os.path.basename(os.path.dirname(file))) and os.path.isfile(p):
            with open(p) as f:
                setattr(m, name, f.readline().rstrip("\n") or None)
    return m


def save(model, path, step=None):
    """Write model as a dormouse checkpoint file (model.safetensors) that `dormouse eval` and
    `dormouse sample` read; put it in a ckpt-NNNNNNNN directory to resume from it in C
    (optimizer state is not written: resume needs optim.safetensors)."""
    tensors = {k: v for k, v in model.state_dict().items()}
    meta = {"format": "dormouse-1", "step": str(getattr(model, "step", 0) if step is None else step),
            "config": json.dumps(model.config)}
    write_safetensors(path, tensors, meta)


# ---- bits per byte ------------------------------------------------------------------------

class Progress:
    """Progress of a long evaluation on stderr: a line redrawn on a terminal, else a line
    at every tenth."""

    def __init__(self, total, what="eval", unit="forwards"):
        self.total, self.what, self.unit = total, what, unit
        self.t0, self.shown = time.monotonic(), -1
        self.tty = sys.stderr.isatty()

    def __call__(self, done):
        el = time.monotonic() - self.t0
        tenth = 10 * done // self.total
        if not self.tty and (tenth == self.shown or done == 0):
            return
        self.shown = tenth
        eta = el / done * (self.total - done) if done else float("nan")
        line = (f"{self.what}: {done}/{self.total} {self.unit}, {el:.0f} s, "
                f"about {eta:.0f} s left")
        sys.stderr.write(("\r\033[K" + line) if self.tty else line + "\n")
        if self.tty and done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


@torch.no_grad()
def nats(model, window, seq_len=None, batch_size=None, progress=None, **kw):
    """Sum of the cross-entropy in nats of every prediction in window (bytes): the window is
    cut as dormouse eval cuts it (dm_eval_bpb): sequences of seq_len+1 bytes starting at 0,
    seq_len, 2 seq_len, ..., the last one shorter; len(window)-1 predictions in all.
    progress: called with the forwards done (a Progress, or None)."""
    T = seq_len or model.config["seq_len"]
    B = batch_size or model.config["batch_size"]
    if isinstance(window, np.ndarray) and window.dtype == np.int64:  # token ids
        buf = torch.from_numpy(window)
    else:
        buf = torch.frombuffer(bytearray(bytes(window)), dtype=torch.uint8).long()
    V = model.vocab
    preds = len(window) - 1
    full, rest = divmod(preds, T)
    total = 0.0
    nf = (full + B - 1) // B + (1 if rest else 0)
    if progress is True:
        progress = Progress(nf)
    for s in range(0, full, B):
        if progress:
            progress(s // B)
        b = min(B, full - s)
        idx = (torch.arange(b)[:, None] + s) * T + torch.arange(T + 1)[None, :]
        seq = buf[idx]
        logits = model(seq[:, :-1], **kw).double()
        total += F.cross_entropy(logits.reshape(-1, V), seq[:, 1:].reshape(-1),
                                 reduction="sum").item()
    if rest:
        seq = buf[full * T:].unsqueeze(0)
        logits = model(seq[:, :-1], **kw).double()
        total += F.cross_entropy(logits.reshape(-1, V), seq[:, 1:].reshape(-1),
                                 reduction="sum").item()
    if progress:
        progress(nf)
    return total


def bpb(model, window, seq_len=None, batch_size=None, progress=None, **kw):
    """Bits per byte of window (bytes), as `dormouse eval` computes it: nats / (len-1) / ln 2.
    progress=True shows the forwards done on stderr."""
    if len(window) < 2:
        raise ValueError("a window needs 2 bytes or more")
    return (nats(model, window, seq_len, batch_size, progress, **kw) / (len(window) - 1)
            / math.log(2))


def eval_offsets(val_n, w, n, seed=EVAL_WINDOW_SEED):
    """The offsets of eval_windows=n (dm_corpus_eval_offsets): the set cut into n equal
    strata, one window of w bytes in each at an offset drawn with the fixed seed."""
    stratum = val_n // n if n >= 1 else 0
    if stratum < w:
        raise ValueError(f"eval_windows={n}: {n} windows of {w} bytes need a validation set "
                         f"of at least {n * w} bytes; it has {val_n}")
    r = Rng(seed, 0xE7A1000000000000)
    return [k * stratum + r.below(stratum - w + 1) for k in range(n)]


def cover_nats(model, ids, start, a, b, **kw):
    """Of a model of tokens, the byte window [a, b): the nats of the tokens covering it (the
    first the context) and the bytes the scored ones cover (docs/tokens.md)."""
    t0 = int(np.searchsorted(start[1:], a, side="right"))  # the first token ending after a
    t1 = int(np.searchsorted(start[:-1], b, side="left"))  # the first beginning at b or after
    scored = int(start[t1] - start[t0 + 1])
    return (nats(model, ids[t0:t1], **kw) if t1 - t0 >= 2 else 0.0), scored


def val_bpb(model, val, eval_window=None, eval_windows=None, progress=None, ids=None, **kw):
    """The validation BPB of the set val (validation_set) as dormouse's eval_windows asks
    (dm_eval_val): 1 the last eval_window bytes; n >= 2 the windows of eval_offsets; "all"
    consecutive windows, each starting at the last byte of the one before. Windows are
    combined by their predictions. Returns (bpb, bytes scored). A model of tokens scores
    each window by its covering tokens: ids, the validation set's (val_tokens). progress=True shows the
    windows done on stderr (the forwards, for one window)."""
    w = eval_window or model.config["eval_window"]
    n = model.config["eval_windows"] if eval_windows is None else eval_windows
    start = None
    if ids is not None:
        start = np.concatenate([[0], np.cumsum(piece_bytes(model.sp)[ids])])
        if start[-1] != len(val):
            raise ValueError(f"the tokens cover {start[-1]} bytes, the validation set has "
                             f"{len(val)}")
    if n == 1 and ids is None:
        return bpb(model, val[len(val) - w:], progress=progress, **kw), w
    if n == 1:
        total, preds = cover_nats(model, ids, start, len(val) - w, len(val), **kw)
        return total / preds / math.log(2), w
    if n == "all":
        starts, s = [], 0
        while s + 1 < len(val):
            starts.append((s, min(w, len(val) - s)))
            s += starts[-1][1] - 1
        scored = len(val)
    else:
        starts = [(o, w) for o in eval_offsets(len(val), w, n)]
        scored = n * w
    show = Progress(len(starts), "eval", "windows") if progress else None
    total = preds = 0
    for i, (o, ln) in enumerate(starts):
        if show:
            show(i)
        if ids is None:
            total += nats(model, val[o:o + ln], **kw)
            preds += ln - 1
        else:
            t, p = cover_nats(model, ids, start, o, o + ln, **kw)
            total, preds = total + t, preds + p
    if show:
        show(len(starts))
    return total / preds / math.log(2), scored


# ---- recurrent inference and sampling -----------------------------------------------------

class State:
    """Recurrent inference (src/model/infer.c): one byte in, 256 logits out; per layer the
    last conv_size-1 projections of q, k, v and the delta-rule state of every head."""

    def __init__(self, model):
        self.m = model
        c = model.config
        HD, W = c["n_head"] * c["head_dim"], c["conv_size"]
        dt = model.embed.dtype
        self.cache = [torch.zeros(3, W - 1, HD, dtype=dt) for _ in model.layers]
        self.S = [torch.zeros(1, c["n_head"], c["head_dim"], c["head_dim"], dtype=dt)
                  for _ in model.layers]

    @torch.no_grad()
    def step(self, byte):
        m = self.m
        x = m.embed[byte].view(1, 1, -1)
        for i, blk in enumerate(m.layers):
            mx = blk.mixer
            xn = rmsnorm(x, blk.norm1)
            qt, kt, vt, g, beta = mx.project(xn, m.lin)
            cur = torch.stack([qt[0, 0], kt[0, 0], vt[0, 0]])          # [3, HD]
            win = torch.cat([self.cache[i], cur.unsqueeze(1)], 1)      # [3, W, HD]
            self.cache[i] = win[:, 1:]
            ws = (mx.conv_q, mx.conv_k, mx.conv_v)
            last = [(win[j] * ws[j].t()).sum(0).view(1, 1, -1) for j in range(3)]  # the tap sum
            ident = lambda t, w: t
            q, k, v = mx.qkv(last[0], last[1], last[2], ident)
            o, self.S[i] = delta_serial(q, k, v, g, beta, mx.dh ** -0.5, self.S[i])
            x = x + mx.finish(xn, o, m.lin)
            x = x + blk.mlp(rmsnorm(x, blk.norm2), m.lin)
        return m.lin(rmsnorm(x, m.norm_f), m.head()).view(-1)


M64 = (1 << 64) - 1


class Rng:
    """dormouse's generator (src/base/rng.c): splitmix64 seeding into xoshiro256**; a stream
    is (seed, stream id)."""

    def __init__(self, seed, stream):
        x = (seed ^ (stream * 0xD1B54A32D192ED03)) & M64
        x, _ = self._splitmix(x)
        x ^= stream
        self.s = []
        for _ in range(4):
            x, z = self._splitmix(x)
            self.s.append(z)

    @staticmethod
    def _splitmix(x):
        x = (x + 0x9E3779B97F4A7C15) & M64
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return x, z ^ (z >> 31)

    def u64(self):
        s = self.s
        rotl = lambda v, k: ((v << k) | (v >> (64 - k))) & M64
        out = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return out

    def uniform(self):
        return (self.u64() >> 11) * 2.0 ** -53

    def below(self, n):
        """uniform in [0, n) without bias (dm_rng_below)"""
        lim = M64 - M64 % n
        while True:
            x = self.u64()
            if x < lim:
                return x % n


def f32(x):
    """x rounded to float32, as the C sampler receives its float arguments"""
    return float(np.float32(x))


def sample_byte(logits, temperature, top_k, top_p, rng):
    """dm_sample_byte (src/jobs/sample.c), step for step in double precision."""
    lg = [float(v) for v in np.asarray(logits, dtype=np.float32)]
    best = 0
    for i in range(1, VOCAB):
        if lg[i] > lg[best]:
            best = i
    t = f32(temperature)
    if t <= 0:
        return best
    thr = -math.inf
    if 0 < top_k < VOCAB:
        thr = sorted(lg, reverse=True)[top_k - 1]
    p = [math.exp((lg[i] - lg[best]) / t) if lg[i] >= thr else 0.0 for i in range(VOCAB)]
    total = 0.0
    for v in p:
        total += v
    tp = f32(top_p)
    if tp < 1:
        order = sorted(range(VOCAB), key=lambda i: (-p[i], i))
        want, cum, keep = tp * total, 0.0, set()
        for n, i in enumerate(order):
            if n > 0 and cum >= want:
                break
            keep.add(i)
            cum += p[i]
        p = [v if i in keep else 0.0 for i, v in enumerate(p)]
        total = 0.0
        for v in p:
            total += v
    u = rng.uniform() * total
    for i in range(VOCAB):
        u -= p[i]
        if u < 0 and p[i] > 0:
            return i
    return best


def sample(model, prompt=b"", length=400, temperature=0.8, top_k=0, top_p=1.0, seed=1,
           index=0, stop=None):
    """Generated bytes after prompt (not included), as `dormouse sample --seed SEED` draws
    its sample number index (from 0): stops after length bytes or once the generated bytes
    end with stop."""
    st = State(model)
    rng = Rng(seed, 0x5A3D1E + index)
    logits = None
    for b in (prompt or b"\n"):
        logits = st.step(b)
    out = bytearray()
    for _ in range(length):
        b = sample_byte(logits.float().numpy(), temperature, top_k, top_p, rng)
        out.append(b)
        if stop and out.endswith(stop):
            break
        logits = st.step(b)
    return bytes(out)


# ---- bench: the training step in PyTorch, the peer dormouse's step is measured against -----

BENCH_KEYS = ("d_model", "n_layer", "n_head", "head_dim", "gate_rank", "batch_size", "seq_len",
              "mixer")


def bench(core="auto", reps=5, precision="fp32", sets=None, history=None, device=None):
    """Time a training step of the model in PyTorch (default: dormouse's d2 model, batch
    8 x 512) as `dormouse bench` times its own: forward (the loss), forward and backward,
    and the step (with torch.optim.AdamW: dormouse's Muon has no PyTorch kernel here, so the
    step rows say optimizer=adamw). core: "fla" (fla's Triton kernels), "chunked" (the twin's
    own), or "auto" (fla where importable on a GPU). precision: "fp32" or "bf16" (autocast, as
    fla's tests run). Prints '#' notes and rows in benches/history.tsv's columns (appended to
    `history` too, with the header when the file is new)."""
    c = dict(DEFAULTS)
    for kv in sets or []:
        k, _, v = kv.partition("=")
        if k not in BENCH_KEYS:
            sys.exit(f"error: --set {kv}: bench takes {', '.join(BENCH_KEYS)}")
        c[k] = v if k == "mixer" else int(v)
    if c["n_head"] * c["head_dim"] != c["d_model"]:
        sys.exit("error: n_head * head_dim must equal d_model")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if core == "auto":
        try:
            fla_core(c["mixer"] == "kda")
            core = "fla" if device == "cuda" else "chunked"
        except ImportError:
            core = "chunked"
    elif core == "fla":
        try:
            fla_core(c["mixer"] == "kda")
        except ImportError as e:
            sys.exit(f"error: --core fla: fla (flash-linear-attention) is not importable ({e})")
    torch.manual_seed(1)
    model = Model(c).to(device)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    B, T = c["batch_size"], c["seq_len"]
    tokens = torch.randint(0, 256, (B, T + 1), device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    auto = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run(stage):
        sync()
        t0 = time.perf_counter()
        with auto:
            loss = model.loss(tokens, impl=core)
        if stage != "forward":
            loss.backward()
        if stage == "step":
            opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        return 1e3 * (time.perf_counter() - t0)

    for _ in range(2):  # warm-up: Triton's compilations, the allocator
        run("step")
    ms = {st: [] for st in ("forward", "fwd_bwd", "step")}
    for _ in range(reps):
        for st in ms:
            ms[st].append(run(st))
    med = {st: sorted(v)[len(v) // 2] for st, v in ms.items()}
    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    cfg = (f"peer=pytorch torch={torch.__version__} core={core} device={gpu} "
           f"precision={precision} optimizer=adamw " +
           " ".join(f"{k}={c[k]}" for k in BENCH_KEYS))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
                                timeout=10).stdout.strip() or "-"
    except (OSError, subprocess.SubprocessError):
        commit = "-"
    print(f"# the PyTorch twin's step on {gpu}: core {core}, {precision}, {reps} reps "
          f"(median ms, spread)")
    for st, v in ms.items():
        print(f"# {st:8s} {med[st]:10.2f} ({max(v) - min(v):.2f})")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = [(f"{st}_ms", med[st], max(v) - min(v)) for st, v in ms.items()]
    rows.append(("step_tokens_per_s", B * T / (med["step"] * 1e-3), 0.0))
    lines = [f"{when}\t{commit}\t{gpu}\tbench:peer\t{cfg}\t{m}\t{val:.6g}\t{sp:.6g}\t{reps}\t"
             for m, val, sp in rows]
    print("\n".join(lines))
    if history:
        new = not os.path.exists(history)
        with open(history, "a") as f:
            if new:
                f.write("date\tcommit\tmachine\twhat\tconfig\tmetric\tvalue\tspread\tn\tflags\n")
            f.write("\n".join(lines) + "\n")
        print(f"# history: appended {len(lines)} rows to {history}")
    return med


# ---- command line -------------------------------------------------------------------------

def _sets(model, sets):
    for kv in sets or []:
        k, _, v = kv.partition("=")
        if k not in ("eval_window", "eval_windows", "seq_len", "batch_size"):
            sys.exit(f"error: --set {kv}: only eval_window, eval_windows, seq_len, batch_size "
                     f"here")
        if k == "eval_windows" and v == "all":
            model.config[k] = v
            continue
        if not re.fullmatch(r"[0-9]+", v) or int(v) < 1:
            sys.exit(f"error: --set {kv}: expected {'all or ' if k == 'eval_windows' else ''}"
                     f"an integer >= 1")
        model.config[k] = int(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description="dormouse's model in PyTorch: eval and sample "
                                 "like the C commands")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval", help="bits per byte on the last eval_window bytes")
    e.add_argument("ckpt")
    e.add_argument("--data", help="corpus (default: the run's own, as dormouse eval)")
    e.add_argument("--set", action="append", metavar="key=value")
    s = sub.add_parser("sample", help="generate bytes, as dormouse sample")
    s.add_argument("ckpt")
    s.add_argument("--prompt", default="")
    s.add_argument("--len", type=int, default=400)
    s.add_argument("--temperature", type=float, default=0.8)
    s.add_argument("--top-k", type=int, default=0)
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=1)
    b = sub.add_parser("bench", help="time the training step in PyTorch (the peer of "
                       "dormouse bench), fla's kernels where importable")
    b.add_argument("--core", choices=["auto", "fla", "chunked"], default="auto",
                   help="the delta core: fla's Triton kernels, the twin's own, or fla where "
                   "importable on a GPU (default)")
    b.add_argument("--reps", type=int, default=5)
    b.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: under torch.autocast (default fp32)")
    b.add_argument("--set", action="append", metavar="key=value",
                   help=f"one of {', '.join(BENCH_KEYS)} (default: the d2 model)")
    b.add_argument("--history", metavar="FILE", help="also append the rows to FILE")
    for p in (e, s):
        p.add_argument("--impl", choices=["chunked", "serial"], default="chunked")
        p.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto",
                       help="as dormouse's precision key (default auto, as dormouse)")
        p.add_argument("--float64", action="store_true", help="compute in double precision")
    a = ap.parse_args(argv)
    if a.cmd == "bench":
        if a.reps < 1:
            sys.exit("error: --reps must be >= 1")
        bench(a.core, a.reps, a.precision, a.set, a.history)
        return
    torch.set_grad_enabled(False)
    model = load(a.ckpt, torch.float64 if a.float64 else torch.float32, a.precision)
    model.impl = a.impl
    if a.cmd == "eval":
        _sets(model, a.set)
        path = a.data or model.val_path or model.data_path
        if path is None:
            sys.exit("error: the checkpoint is not in a run directory: pass --data PATH")
        w, n = model.config["eval_window"], model.config["eval_windows"]
        whole = not a.data and model.val_path is not None  # a run's --val: all of it
        val = validation_set(path, w, whole)
        if len(val) < w:
            sys.exit(f"error: {path} has {len(val)} bytes, fewer than eval_window={w}")
        try:
            ids = val_tokens(model, path, val, whole) if model.sp else None
            if is_data_dir(path):
                path = os.path.join(path, "val.bin")
            v, scored = val_bpb(model, val, progress=True, ids=ids)
        except ValueError as e:
            sys.exit(f"error: {e}")
        what = (f"the last {w} bytes" if n == 1 else f"all {scored} bytes (eval_windows=all)"
                if n == "all" else f"{n} fixed windows of {w} bytes (eval_windows={n})")
        print(f"val_bpb {v:.6f} on {what} of {path} ({scored} bytes scored; checkpoint step "
              f"{model.step}; twin: {a.impl}, {model.precision})")
    else:
        out = sample(model, a.prompt.encode(), a.len, a.temperature, a.top_k, a.top_p, a.seed)
        sys.stdout.buffer.write(a.prompt.encode() + out + b"\n")


if __name__ == "__main__":
    main()
