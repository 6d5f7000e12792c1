#!/usr/bin/env bash
# Collect a shapes file on this host's GPUs with the benchmark harness (data/README.md says which
# file came from which plan and how fast).
#
#   bash data/collect.sh SHAPES PARQUET GPUS [WORKERS]
#   bash data/collect.sh data/shapes_unseen.json data/h100_unseen.parquet 1
#   bash data/collect.sh data/shapes_bmm_h100.json "$OUT/gpus2/bmm_h100.parquet" 2
#
# GPUS: how many of the host's GPUs time (one compile pool feeds them all); WORKERS: compile
# processes (default: every core but one per GPU). Run from the repository root with kernel_select
# importable. Each run logs to PARQUET's folder: bench-<time>.log (the run) and env-<time>.log (the
# host). MAX_SECONDS (default 540) bounds the run; one that reaches it stops between problems and
# keeps what it timed, and running the same command again resumes. ORDER (`bench --order`: reuse,
# the default, or file) says which problems a bounded run takes first. DTYPE (`bench --dtype`)
# collects only the file's problems of those dtypes, LAYOUT (`bench --layout`) of those operand
# layouts. LITERAL=1 times with the sizes compiled in (`bench --literal-sizes`: as Inductor's
# kernels run, one compile per shape). TRITON_CACHE_DIR, when set, is kept (a resumed run on the
# same machine reuses its kernels); otherwise every kernel compiles into a new empty cache, as on a
# fresh machine.
set -euo pipefail

if [[ $# -lt 3 ]]; then
    echo "usage: bash data/collect.sh SHAPES PARQUET GPUS [WORKERS]" >&2
    exit 2
fi
shapes="$1" out="$2" gpus="$3" workers="${4:-}"
MAX_SECONDS="${MAX_SECONDS:-540}"
dir="$(dirname "$out")"
mkdir -p "$dir"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/triton_cache_XXXXXX")}"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
log="$dir/bench-$stamp.log"

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi -L
    echo "cores: $(nproc)"
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    echo "TRITON_CACHE_DIR=$TRITON_CACHE_DIR ($(ls "$TRITON_CACHE_DIR" | wc -l) entries)"
} > "$dir/env-$stamp.log" 2>&1

start=$(date +%s)
python3 -m kernel_select.cli bench --shapes "$shapes" --out "$out" --gpus "$gpus" ${workers:+--workers "$workers"} \
    ${ORDER:+--order "$ORDER"} ${DTYPE:+--dtype "$DTYPE"} ${LAYOUT:+--layout "$LAYOUT"} \
    ${LITERAL:+--literal-sizes} --max-seconds "$MAX_SECONDS" --no-progress > "$log" 2>&1 || status=$?
status="${status:-0}"
end=$(date +%s)

echo "== collect.sh $shapes -> $out on $gpus GPU(s): exit $status after $((end - start)) s"
grep -E "^(\[GPU [0-9]\] )?(GPU [0-9]+:|[0-9]+ GPUs?:|[0-9]+ problems, [0-9]+ rows in|stopping at|resuming|compile per key)" "$log" \
    | sed 's/^\[GPU [0-9]\] //' || true
grep -E "Error|Traceback|exited with" "$log" | tail -5 || true
if [[ -f "$out" ]]; then
    python3 - "$out" <<'PY'
import sys

import numpy as np

from kernel_select.offline.data import dataset

df = dataset.read(sys.argv[1])
finite = np.isfinite(df["runtime_ms"])
print(f"{df['problem_id'].nunique()} problems, {len(df)} rows ({int(finite.sum())} finite); "
      f"status: {dict(df['status'].value_counts())}")
per_gpu = df.groupby("device_index").agg(problems=("problem_id", "nunique"), rows=("problem_id", "size"))
print("by GPU:", ", ".join(f"{i}: {r.problems} problems, {r.rows} rows" for i, r in per_gpu.iterrows()))
print("by op and dtype:", dict(df.groupby(["op", "dtype"])["problem_id"].nunique()))
PY
fi
exit "$status"
