#!/usr/bin/env bash
# `kernel-select calibrate` on a GPU treated as one without a model of its own: shipped models are hidden
# (HIDE: a device key, or all), and each run starts from empty Triton and Inductor caches.
#
#   RUNS="NAME:FROM:SECONDS ..."   the runs, one after the other; FROM is calibrate's --from
#
#   OUT=/path/to/results HIDE=all RUNS="scratch:none:150 finetune:models/h100:180" bash results/calibrate.sh
#                                  the H100 runs of 2026-11-25 (one H100, about 6 minutes)
#   OUT=/path/to/results HIDE=h200 RUNS="5min:auto:300 10min:auto:600 15min:auto:900" \
#       bash results/calibrate.sh
#                                  an H200 treated as new, from the H100 model (auto finds it)
#
# (from the repository root, kernel_select importable). Writes under "$OUT": env.log (the host), and per
# run <run>/<device>/ (the model folder calibrate writes: mlp, cuBLAS head and gate, calibration.json,
# calibration.parquet, calibration_plan.json), <run>/summary.json (--json) and <run>/calibrate.log.
# A run whose folder already holds measurements resumes them (calibrate's own resume), with the same
# caches: a machine that stops a command after 10 minutes runs a 15-minute calibration as this script
# twice, within seconds of each other. Then, on any CPU, with the committed data of that GPU:
#
#   python results/calibrate.py --device DEVICE --runs "$OUT"/<run>/<device> ...
set -euo pipefail

: "${OUT:?set OUT to the folder the results go to}"
: "${RUNS:?set RUNS to NAME:FROM:SECONDS ... (see the top of this script)}"
export KERNEL_SELECT_HIDE_SHIPPED="${HIDE:-all}"
mkdir -p "$OUT"
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi -L
    echo "cores: $(nproc)"
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} >> "$OUT/env.log" 2>&1

status=0
for run in $RUNS; do
    IFS=: read -r name start seconds <<< "$run"
    dir="$OUT/$name"
    mkdir -p "$dir"
    # every kernel compiles in a run's first command; a resumed run keeps what its first one compiled
    export TRITON_CACHE_DIR="$dir/.triton_cache" TORCHINDUCTOR_CACHE_DIR="$dir/.inductor_cache"
    begin=$(date +%s)
    rc=0
    python3 -m kernel_select.cli calibrate --max-seconds "$seconds" --from "$start" --out "$dir" --json --no-progress \
        > "$dir/summary.json" 2>> "$dir/calibrate.log" || rc=$?
    [[ $rc == 0 ]] || status=$rc
    echo "== $name (--from $start, $seconds s): exit $rc after $(( $(date +%s) - begin )) s; $dir"
    grep -E "^(plan|measured|held-out|  |wrote|kernel-select: error)" "$dir/calibrate.log" || true
    [[ $rc != 0 ]] || rm -rf "$TRITON_CACHE_DIR" "$TORCHINDUCTOR_CACHE_DIR"
done
exit "$status"
