# probe_common.sh — sourced by the scripts/probe_*.sh campaigns: ROOT (the source tree),
# D (a scratch directory, removed at exit) and TINY (the tiny model's --set flags, one
# thread; the campaign adds its run's keys).
ROOT=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)
D=$(mktemp -d /tmp/dm-probe.XXXXXX)
trap 'rm -rf "$D"' EXIT
TINY="--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 --set gate_rank=8 \
--set seq_len=32 --set eval_window=1024 --set threads=1"
