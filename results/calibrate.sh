#!/usr/bin/env bash
# `kernel-select calibrate` on one H100 treated as a GPU without a model of its own: the shipped models
# are hidden (KERNEL_SELECT_HIDE_SHIPPED=all), and each run starts from an empty Triton cache:
#
#   scratch   --from none, SCRATCH_MINUTES (default 4.5): what a GPU of a new architecture gets
#   finetune  --from models/h100 (the shipped H100 model), FINETUNE_MINUTES (default 3): what a GPU
#             of an architecture with a model gets
#
#   OUT=/path/to/results bash results/calibrate.sh      (from the repository root, kernel_select
#                                                        importable; about 8 minutes on one H100)
#
# Writes under "$OUT": env.log (the host), and per run <run>/h100/ (the model folder calibrate
# writes: mlp, cuBLAS head and gate, calibration.json, calibration.parquet, calibration_plan.json),
# <run>/summary.json (--json) and <run>/calibrate.log. Then, on any CPU, with the committed H100 data:
#
#   python results/calibrate.py --runs "$OUT"/scratch/h100 "$OUT"/finetune/h100
set -euo pipefail

: "${OUT:?set OUT to the folder the results go to}"
SCRATCH_MINUTES="${SCRATCH_MINUTES:-4.5}"
FINETUNE_MINUTES="${FINETUNE_MINUTES:-3}"
export KERNEL_SELECT_HIDE_SHIPPED=all  # --from auto would find nothing; the runs name their start
mkdir -p "$OUT"
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi -L
    echo "cores: $(nproc)"
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/env.log" 2>&1

status=0
for run in "scratch none $SCRATCH_MINUTES" "finetune models/h100 $FINETUNE_MINUTES"; do
    read -r name start minutes <<< "$run"
    dir="$OUT/$name"
    mkdir -p "$dir"
    TRITON_CACHE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/triton_cache_${name}_XXXXXX")"  # every kernel compiles
    export TRITON_CACHE_DIR
    begin=$(date +%s)
    rc=0
    python3 -m kernel_select.cli calibrate --max-seconds "$(awk "BEGIN {print $minutes * 60}")" --from "$start" --out "$dir" --json --no-progress \
        > "$dir/summary.json" 2> "$dir/calibrate.log" || rc=$?
    [[ $rc == 0 ]] || status=$rc
    echo "== $name (--from $start, $minutes min): exit $rc after $(( $(date +%s) - begin )) s; $dir"
    grep -E "^(plan|measured|held-out|  |wrote|kernel-select: error)" "$dir/calibrate.log" || true
    rm -rf "$TRITON_CACHE_DIR"
done
exit "$status"
