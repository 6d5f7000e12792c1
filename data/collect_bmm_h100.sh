#!/usr/bin/env bash
# Collect data/shapes_bmm_h100.json (batched GEMMs, M > 4096, float32; data/README.md, "Batched
# GEMMs, M > 4096 and float32") on this host's H100s, from an empty Triton cache.
#
#   bash data/collect_bmm_h100.sh 1    # one GPU, every core but one compiling
#   bash data/collect_bmm_h100.sh 2    # two GPUs fed from one compile pool (bench --gpus 2)
#
# Run from the repository root with kernel_select importable (the wheels installed and PYTHONPATH
# set). Writes under "$OUT/gpus<N>/": bmm_h100.parquet, bench.log (the run) and env.log (the
# host), then prints a summary. --max-seconds bounds the run well inside 9 minutes; a run that
# reaches the bound stops between problems and keeps what it timed (re-running resumes).
set -euo pipefail

gpus="${1:-}"
if [[ "$gpus" != 1 && "$gpus" != 2 ]]; then
    echo "usage: bash data/collect_bmm_h100.sh 1|2 (how many GPUs)" >&2
    exit 2
fi
: "${OUT:?set OUT to the folder the results go to}"
MAX_SECONDS="${MAX_SECONDS:-460}"
dir="$OUT/gpus$gpus"
mkdir -p "$dir"
export TRITON_CACHE_DIR
TRITON_CACHE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/triton_cache_gpus${gpus}_XXXXXX")"  # every kernel compiles
out="$dir/bmm_h100.parquet"
log="$dir/bench.log"

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi -L
    echo "cores: $(nproc)"
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    echo "TRITON_CACHE_DIR=$TRITON_CACHE_DIR"
} > "$dir/env.log" 2>&1

start=$(date +%s)
python3 -m kernel_select.cli bench --shapes data/shapes_bmm_h100.json --out "$out" --gpus "$gpus" \
    --max-seconds "$MAX_SECONDS" --no-progress > "$log" 2>&1 || status=$?
status="${status:-0}"
end=$(date +%s)

echo "== collect_bmm_h100.sh $gpus: exit $status after $((end - start)) s; $dir"
grep -E "^(\[GPU [0-9]\] )?(GPU [0-9]+:|[0-9]+ GPUs?:|[0-9]+ problems, [0-9]+ rows in|stopping at|resuming)" "$log" \
    | sed 's/^\[GPU [0-9]\] //' || true
grep -E "Error|Traceback|exited with" "$log" | tail -5 || true
if [[ -f "$out" ]]; then
    python3 - "$out" <<'EOF'
import sys

import numpy as np

from kernel_select.offline.data import dataset

df = dataset.read(sys.argv[1])
finite = np.isfinite(df["runtime_ms"])
print(f"{df['problem_id'].nunique()} problems, {len(df)} rows ({int(finite.sum())} finite); "
      f"status: {dict(df['status'].value_counts())}")
per_gpu = df.groupby("device_index").agg(problems=("problem_id", "nunique"), rows=("problem_id", "size"))
print("by GPU:", ", ".join(f"{i}: {r.problems} problems, {r.rows} rows" for i, r in per_gpu.iterrows()))
fams = df.groupby("family")["problem_id"].nunique()
print("by family:", ", ".join(f"{f} {n}" for f, n in fams.items()))
aten = df[df["backend"] == "aten"]
print(f"cuBLAS rows: {len(aten)}, finite {int(np.isfinite(aten['runtime_ms']).sum())}")
EOF
fi
exit "$status"
