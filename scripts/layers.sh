#!/usr/bin/env bash
# layers.sh [SOURCE_DIR] — the include-layer rule of docs/architecture.md section 2: a file
# under src/ includes headers of its own layer or of lower ones, never of a higher one.
# Exits 1 and names every include that points up (or that names a header it cannot find).
#
# Layers, lowest first (a folder under src/ and its rank):
#   base 0 (the seeded generator, the config key table, small helpers every layer uses)
#   kernels 1 (kernels/cpu, kernels/ref, kernels/common.h)   ops 2   model 3   optim 4
#   io 5   jobs 6   cli 7
# include/dormouse.h is the public API: any file may include it. System headers (<...>)
# are not checked. A quoted include is resolved as the compiler does: beside the file
# first, then from src/, then from include/.
#
# Across the op layer (docs/backends.md), three more arrows are forbidden:
#   - ops -> a backend's kernels (kernels/cpu, and kernels/<backend> alike) from outside
#     that backend's own table src/ops/<backend>/ (kernels/ref and kernels/common.h are
#     every backend's);
#   - a layer above ops (model, optim, io, jobs, cli) -> kernels/: it reaches the kernels
#     through the op layer;
#   - a layer above ops -> the op layer's internals: anything in ops but its interface,
#     ops/ops.h, ops/atlas.h, ops/backend.h, ops/precision.h and ops/optim_ops.h (not
#     ops/op.h, nor the backends' folders).
set -uo pipefail
src_dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src_dir" || { echo "layers: cannot enter $src_dir" >&2; exit 1; }

declare -A rank=([base]=0 [kernels]=1 [ref]=2 [ops]=2 [backends]=2 [model]=3 [optim]=4 [io]=5 [jobs]=6 [cli]=7)
# the op layer's interface to the layers above it
declare -A ops_public=([src/ops/ops.h]=1 [src/ops/atlas.h]=1 [src/ops/backend.h]=1
                       [src/ops/precision.h]=1 [src/ops/optim_ops.h]=1)

# the layer of a path under src/ ("" when it is not under a known layer folder)
layer_of() {
    local p=${1#src/}
    local top=${p%%/*}
    [[ $p == */* && -n ${rank[$top]+x} ]] && echo "$top"
}

bad=0 files=0 includes=0
while IFS= read -r f; do
    files=$((files + 1))
    from=$(layer_of "$f")
    if [[ -z $from ]]; then
        echo "layers: $f is not in a layer folder (src/{$(echo "${!rank[@]}" | tr ' ' ',')})" >&2
        bad=1
        continue
    fi
    while IFS= read -r inc; do
        includes=$((includes + 1))
        dir=$(dirname "$f")
        if [[ -f $dir/$inc ]]; then target=$(realpath --relative-to=. "$dir/$inc")
        elif [[ -f src/$inc ]]; then target=src/$inc
        elif [[ -f include/$inc ]]; then continue # the public API
        else
            echo "layers: $f includes \"$inc\", which is not under src/ or include/" >&2
            bad=1
            continue
        fi
        to=$(layer_of "$target")
        if [[ -z $to ]]; then
            echo "layers: $f includes $target, which is in no layer" >&2
            bad=1
        elif (( rank[$to] > rank[$from] )); then
            echo "layers: $f ($from, layer ${rank[$from]}) includes $target ($to, layer ${rank[$to]}): an include that points up" >&2
            bad=1
        elif [[ $from == ops && $target == src/kernels/*/* && $target != src/kernels/ref/* ]]; then
            be=${target#src/kernels/}
            be=${be%%/*}
            if [[ $f != src/ops/$be/* ]]; then
                echo "layers: $f (ops) includes $target: only the $be backend's own table" \
                     "(src/ops/$be/) calls kernels/$be" >&2
                bad=1
            fi
        elif [[ $target == src/backends/*/kernels/* ]]; then
            be=${target#src/backends/}
            be=${be%%/*}
            if [[ $f != src/backends/$be/* ]]; then
                echo "layers: $f includes $target: only the $be backend (src/backends/$be/)" \
                     "calls its kernels" >&2
                bad=1
            fi
        elif (( rank[$from] > rank[ops] )) && [[ $to == kernels || $to == ref || $to == backends ]]; then
            echo "layers: $f ($from, layer ${rank[$from]}) includes $target: above the op" \
                 "layer the kernels are reached through ops" >&2
            bad=1
        elif (( rank[$from] > rank[ops] )) && [[ $to == ops && -z ${ops_public[$target]+x} ]]; then
            echo "layers: $f ($from, layer ${rank[$from]}) includes $target: an internal of" \
                 "the op layer (its interface: ${!ops_public[*]})" >&2
            bad=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(find src -type f \( -name '*.c' -o -name '*.h' \) | sort)

if (( files == 0 )); then
    echo "layers: no sources under $src_dir/src" >&2
    exit 1
fi
if (( bad )); then
    echo "layers: FAILED (docs/architecture.md section 2: includes only point down)" >&2
    exit 1
fi
echo "layers: $files files, $includes includes, every one points to its own layer or below"
