#!/bin/bash
# results/networks_h200.{json,png}: the zoo's networks on H200s, each compiled by mode="default", by
# Inductor's own GEMM autotuning (stock-gemm), by the README recipe (topk-4-gemm) and by the recipe with
# in-process precompile off (topk-4-gemm-no-inproc: what a bare install() did before that became the
# default), one fresh process with empty caches per network and method; every process times eager beside
# its own step. Measured on a 2-GPU H200 host, two streams side by side:
#
#   OUT=... bash results/networks_h200.sh 500 bert-base-2layer-fp32/prefill,recsys-mlp/decode \
#       llama3-8b-2layer/prefill,gpt2-small/decode     (then the same with the workloads of the other calls:
#   t5-base-2layer/prefill,recsys-mlp/decode qwen3-4b-2layer/prefill,gpt2-small/decode, and at 420 s
#   gpt2-small/decode,recsys-mlp/decode swin-tiny-4stage/prefill,whisper-medium-encoder-2layer/prefill)
#
#   OUT=/some/folder PYTHONPATH=... bash results/networks_h200.sh SECONDS STREAM [STREAM ...]
#   bash results/networks_h200.sh merge RESULT.json COMPARISON.json [COMPARISON.json ...]
#
# Each STREAM is a comma-separated list of workloads (bert-base-2layer-fp32/prefill,recsys-mlp/decode) that
# one GPU measures one after the other, stream i on GPU i, with the machine's cores split evenly between the
# streams (taskset, and Inductor's compile pool sized to match): four streams on a 4-GPU, 64-core host
# each see what a one-GPU, 16-core machine offers. results/models_h100.sh runs each stream, bounded by
# SECONDS (a run that would not fit is not started; one still running at the bound is cut), into
# $OUT/gpu<i>/. The streams' files are then merged into $OUT/networks_<device>.json and .png.
#
# `merge` pools comparisons made by earlier calls (their $OUT/networks_<device>.json) into RESULT.json and
# its .png, and prints the summary and the per-network table; results/networks_h200.json is
#
#   bash results/networks_h200.sh merge results/networks_h200.json call1/networks_h200.json call2/...
#
# METHODS overrides the methods (default: default,stock-gemm,topk-4-gemm,topk-4-gemm-no-inproc; add
# install-gemm for a bare install() with today's defaults).
set -u -o pipefail
HERE=$(dirname "$0")

merge() {
  python3 - "$@" <<'EOF'
import sys

from kernel_select.offline.e2e import compare_models, model_frames, model_report, model_results

out, parts = sys.argv[1], sys.argv[2:]
merged = compare_models.merge_comparisons(parts)
model_results.write_results(merged, out)
model_frames.plot_models(merged, out.removesuffix(".json") + ".png")
print(model_report.format_summary(model_report.summarize(merged)))
print()
print(model_report.format_models(merged))
print(f"wrote {out} and its .png")
EOF
}

if [ "${1:-}" = merge ]; then
  shift
  [ $# -ge 2 ] || { echo "usage: $0 merge RESULT.json COMPARISON.json [...]" >&2; exit 2; }
  merge "$@"
  exit
fi

: "${OUT:?set OUT to the folder the results go to}"
[ $# -ge 2 ] || { echo "usage: OUT=... $0 SECONDS STREAM [STREAM ...]" >&2; exit 2; }
BOUND=$1
shift
STREAMS=("$@")
GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())')
if [ "${#STREAMS[@]}" -gt "$GPUS" ]; then
  echo "networks_h200.sh: ${#STREAMS[@]} streams but $GPUS GPU(s)" >&2
  exit 2
fi
CORES=$(nproc)
PER_STREAM=$((CORES / ${#STREAMS[@]}))
export METHODS=${METHODS:-default,stock-gemm,topk-4-gemm,topk-4-gemm-no-inproc}
mkdir -p "$OUT"
for i in "${!STREAMS[@]}"; do
  first=$((i * PER_STREAM))
  mkdir -p "$OUT/gpu$i"
  CUDA_VISIBLE_DEVICES=$i TORCHINDUCTOR_COMPILE_THREADS=$PER_STREAM OUT="$OUT/gpu$i" \
    taskset -c "$first-$((first + PER_STREAM - 1))" \
    bash "$HERE/models_h100.sh" "$BOUND" "${STREAMS[$i]}" > "$OUT/gpu$i.log" 2>&1 &
done
wait
echo "streams: ${#STREAMS[@]} on $GPUS GPU(s), $PER_STREAM of $CORES cores each" | tee "$OUT/streams.log"
DEVICE=$(python3 -c 'from kernel_select.device import detect; print(detect(0).key)')
merge "$OUT/networks_$DEVICE.json" "$OUT"/gpu*/models_*.json | tee -a "$OUT/streams.log"
