#!/usr/bin/env bash
# Checkpoint mutation campaign (opt-in, not in `make test`; docs/robustness.md): a tiny run
# stopped at step 6 (checkpoints 5 and 6) and the same run uninterrupted to step 10. Then
#   MODEL mutations of ckpt-6/model.safetensors, each read by `dormouse eval FILE`: refused,
#         or accepted with the BPB of the unmutated file (a change that changes nothing);
#   OPTIM mutations of ckpt-6/optim.safetensors, each resumed to step 10: refused (exit 2)
#         or passed over (the resume falls back to ckpt-5), and the run's step 10 the bits of
#         the uninterrupted run.
# A mutation is a bit flip, a zeroed block, random bytes, two same-shape tensors' data_offsets
# swapped, or a changed header byte, at a random place; one that leaves the file as it was
# (zeros over zeros) is drawn again. Counts: refused, accepted with the
# same result, accepted with a different one (must be 0).
#   scripts/probe_mutate.sh [BUILD=build] [MODEL=700] [OPTIM=300] [SEED=1]
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd); NM=${2:-700}; NO=${3:-300}; SEED=${4:-1}
source "$(dirname "$0")/probe_common.sh"
SETS="$TINY --set batch_size=2 --set warmup_steps=1 --set log_every=1 --set steps=10 \
--set ckpt_every=1 --set eval_every=0"
DM="$BUILD/dormouse"
$DM train --out "$D/ref" --data "$ROOT/data/kjv.txt.gz" $SETS >/dev/null 2>&1
$DM train --out "$D/run" --data "$ROOT/data/kjv.txt.gz" $SETS --until 6 >/dev/null 2>&1
python3 - "$DM" "$D" "$NM" "$NO" "$SEED" <<'PY'
import json, os, random, shutil, struct, subprocess, sys
dm, d, nm, no, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
def parse(b):
    hl = struct.unpack('<Q', b[:8])[0]
    return json.loads(b[8:8 + hl]), b[8 + hl:]
def build(h, data):
    js = json.dumps(h, separators=(',', ':')).encode()
    js += b' ' * ((-len(js)) % 8)
    return struct.pack('<Q', len(js)) + js + data
def mutate(orig):
    while True:  # a mutation that leaves the bytes as they were (zeros on zeros) is drawn again
        kind, b = mutate_once(orig)
        if b != orig: return kind, b
def mutate_once(b):
    b = bytearray(b)
    hl = struct.unpack('<Q', b[:8])[0]
    kind = rng.choice(['bitflip', 'bitflip', 'zeros', 'random', 'swap', 'header'])
    if kind == 'bitflip':
        i = rng.randrange(len(b)); b[i] ^= 1 << rng.randrange(8)
    elif kind == 'zeros':
        i = rng.randrange(8 + hl, len(b)); n = rng.randint(1, 4096); b[i:i + n] = bytes(len(b[i:i + n]))
    elif kind == 'random':
        i = rng.randrange(8 + hl, len(b)); n = rng.randint(1, 256)
        b[i:i + n] = bytes(rng.randrange(256) for _ in b[i:i + n])
    elif kind == 'header':
        i = rng.randrange(8, 8 + hl); b[i] = rng.randrange(32, 127)
    else:
        h, data = parse(bytes(b))
        names = [k for k in h if k != '__metadata__']
        groups = {}
        for k in names: groups.setdefault(json.dumps(h[k]['shape']), []).append(k)
        pairs = [g for g in groups.values() if len(g) > 1]
        if not pairs: return 'bitflip', bytes(b)
        x, y = rng.sample(rng.choice(pairs), 2)
        h[x]['data_offsets'], h[y]['data_offsets'] = h[y]['data_offsets'], h[x]['data_offsets']
        return kind, build(h, data)
    return kind, bytes(b)
def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr
def bpb(out):
    for w in out.split('\n'):
        if w.startswith('val_bpb '): return w.split()[1]
    return None
model = os.path.join(d, 'run/ckpt-00000006/model.safetensors')
optim = os.path.join(d, 'run/ckpt-00000006/optim.safetensors')
rc, out = run([dm, 'eval', model]); ref_bpb = bpb(out)
orig_m, orig_o = open(model, 'rb').read(), open(optim, 'rb').read()
def ckpt_bytes(p):
    return open(p + '/model.safetensors', 'rb').read() + open(p + '/optim.safetensors', 'rb').read()
ref10 = ckpt_bytes(os.path.join(d, 'ref/ckpt-00000010'))
count = {'refused': 0, 'same': 0, 'different': 0}
kinds = {}
bad = []
os.makedirs(os.path.join(d, 'm/ckpt-00000006'), exist_ok=True)
mp = os.path.join(d, 'm/ckpt-00000006/model.safetensors')
for i in range(nm):
    kind, b = mutate(orig_m)
    kinds[kind] = kinds.get(kind, 0) + 1
    open(mp, 'wb').write(b)
    rc, out = run([dm, 'eval', mp])
    if rc != 0: count['refused'] += 1
    elif bpb(out) == ref_bpb: count['same'] += 1
    else: count['different'] += 1; bad.append(('model', kind, i, out.strip()[-200:]))
ocount = {'refused': 0, 'same': 0, 'different': 0, 'fell back': 0}
for i in range(no):
    kind, b = mutate(orig_o)
    kinds[kind] = kinds.get(kind, 0) + 1
    r = os.path.join(d, 'r')
    shutil.rmtree(r, ignore_errors=True)
    shutil.copytree(os.path.join(d, 'run'), r)
    open(r + '/ckpt-00000006/optim.safetensors', 'wb').write(b)
    rc, out = run([dm, 'train', '--resume', r])
    if rc != 0 and rc != 1: ocount['refused'] += 1
    elif rc == 0 and ckpt_bytes(r + '/ckpt-00000010') == ref10:
        ocount['fell back' if 'skipping a checkpoint' in out or 'falling back' in out else 'same'] += 1
    else: ocount['different'] += 1; bad.append(('optim', kind, i, out.strip()[-200:]))
print('model mutations: %d (eval): refused %d, accepted with the same BPB %d, accepted with '
      'a different BPB %d' % (nm, count['refused'], count['same'], count['different']))
print('optim mutations: %d (resume to step 10): refused %d, passed over (fallen back from) %d, '
      'accepted with the same bits %d, different or failed %d' % (no, ocount['refused'],
      ocount['fell back'], ocount['same'], ocount['different']))
print('kinds: ' + ', '.join('%s %d' % kv for kv in sorted(kinds.items())))
for x in bad[:10]: print('BAD', x)
sys.exit(1 if bad else 0)
PY
