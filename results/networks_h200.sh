#!/bin/bash
# results/networks_h200.{json,png}: thirteen workloads of twelve networks on H200s, each compiled by
# mode="default", by the zero-benchmark mode (zero-gemm: gemm_topk=1 with the recipe's GEMM-only options),
# by the README recipe (topk-4-gemm) and by Inductor's own GEMM autotuning with the same options
# (stock-gemm), one fresh process with empty caches per network and method; every process times eager
# beside its own step. Measured on a 4-GPU H200 host (64 cores), four streams side by side, in three
# device calls:
#
#   OUT=call1 bash results/networks_h200.sh 515 swin-tiny-4stage/prefill qwen3-moe-2layer/prefill \
#       bert-base-2layer-fp32/prefill whisper-medium-encoder-2layer/prefill,recsys-mlp/decode
#   OUT=call2 bash results/networks_h200.sh 515 llama3-8b-2layer/prefill qwen3-4b-2layer/prefill \
#       t5-base-2layer/prefill,gpt2-small/decode vit-b16/prefill,llama3-8b-2layer/decode
#   OUT=call3 bash results/networks_h200.sh 470 \
#       "zero-gemm,topk-4-gemm@bert-base-2layer-fp32/prefill;stock-gemm@gpt2-small/decode;zero-gemm,topk-4-gemm@recsys-mlp/decode" \
#       gpt2-small/prefill bert-base-2layer/prefill \
#       "zero-gemm,topk-4-gemm@swin-tiny-4stage/prefill;zero-gemm,topk-4-gemm,stock-gemm@llama3-8b-2layer/decode"
#   bash results/networks_h200.sh merge results/networks_h200.json call1/networks_h200.json \
#       call2/networks_h200.json call3/networks_h200.json
#
# The third call measured what the bound had cut (GPT-2 decode's stock-gemm), a second run of four
# methods on three networks, a network more (GPT-2 prefill, BERT bf16), and BERT fp32's zero-gemm and
# recipe again after the model's domain learnt to bound a problem's work (docs/results.md says why): the
# first call's two runs of those were dropped from its file before the merge.
#
# results/networks_h200_launch_bound.{json,png}: the zero-benchmark mode's launch-bound rule, compile
# against `default` (2026-11-29, one H200, 16 cores, two calls):
#
#   S=default,zero-gemm@recsys-mlp/decode,llama3-8b-2layer/decode
#   OUT=lb1 bash results/networks_h200.sh 370 "$S,whisper-medium-encoder-2layer/prefill,qwen3-4b-2layer/prefill"
#   S="zero-gemm@qwen3-4b-2layer/prefill;default,zero-gemm@llama3-8b-2layer/prefill"
#   OUT=lb2 bash results/networks_h200.sh 440 "$S;stock-gemm@recsys-mlp/decode,llama3-8b-2layer/decode"
#   bash results/networks_h200.sh merge results/networks_h200_launch_bound.json lb1/networks_h200.json \
#       lb2/networks_h200.json
#
# results/networks_h200_zero_gemm.{json,png}: the zero-benchmark mode with the shipped H200 model and gate
# on thirteen networks against `default` and stock-gemm, 2026-11-29. The first six on a host of four
# H200s (64 cores), four streams side by side in one call, with the gate shipped before its network for
# batched GEMMs; the other seven on a host of two (32 cores), two streams, in three calls:
#
#   OUT=z bash results/networks_h200.sh 440 "default,zero-gemm,stock-gemm@gpt2-small/prefill" \
#       "default,zero-gemm,stock-gemm@llama3-8b-2layer/decode" "default,zero-gemm@vit-b16/prefill,qwen3-4b-2layer/prefill" \
#       "default,zero-gemm@llama3-8b-2layer/prefill,whisper-medium-encoder-2layer/prefill"
#   OUT=z5 bash results/networks_h200.sh 440 "default,zero-gemm,stock-gemm@swin-tiny-4stage/prefill" \
#       "default,zero-gemm,stock-gemm@qwen3-moe-2layer/prefill"
#   OUT=z6 bash results/networks_h200.sh 430 "default,zero-gemm,stock-gemm@bert-base-2layer-fp32/prefill" \
#       "default,zero-gemm,stock-gemm@t5-base-2layer/prefill,recsys-mlp/decode"
#   OUT=z7 bash results/networks_h200.sh 400 "stock-gemm@qwen3-moe-2layer/prefill;stock-gemm@recsys-mlp/decode" \
#       "default,zero-gemm,stock-gemm@bert-base-2layer/prefill,gpt2-small/decode"
#   bash results/networks_h200.sh merge results/networks_h200_zero_gemm.json z/networks_h200.json \
#       z5/networks_h200.json z6/networks_h200.json z7/networks_h200.json
#
# (The time bound cut the first calls' stock-gemm of the MoE network and the recsys tower; the last
# call measured them.)
#
# results/inproc_precompile_h200.{json,png} (the recipe with in-process precompile off, an earlier H200
# model, a 2-GPU host) came from the same script with METHODS=default,stock-gemm,topk-4-gemm,topk-4-gemm-no-inproc
# and two streams per call.
#
#   OUT=/some/folder PYTHONPATH=... bash results/networks_h200.sh SECONDS STREAM [STREAM ...]
#   bash results/networks_h200.sh merge RESULT.json COMPARISON.json [COMPARISON.json ...]
#
# STREAM i runs on GPU i, with the machine's cores split evenly between the streams (taskset, and
# Inductor's compile pool sized to match): four streams on a 4-GPU, 64-core host each see what a one-GPU,
# 16-core machine offers. A STREAM is one or more segments separated by ";", each
# [METHODS@]WORKLOADS: comma-separated workloads measured one after the other, with the segment's methods
# (default: $METHODS). results/models_h100.sh runs each segment into $OUT/gpu<i>/s<j>/, bounded by what
# is left of SECONDS (a run that would not fit is not started; one still running at the bound is cut).
# The streams' files are then merged into $OUT/networks_<device>.json and .png.
#
# `merge` pools comparisons made by earlier calls (their $OUT/networks_<device>.json): a (network,
# method) measured by two calls gets both runs. It prints the summary and the per-network table.
#
# METHODS: the methods of a segment that names none (default: default,zero-gemm,topk-4-gemm,stock-gemm;
# add install-gemm for a bare install() with today's defaults).
set -u -o pipefail
HERE=$(dirname "$0")

merge() {
  python3 - "$@" <<'EOF'
import sys

from kernel_select.offline.e2e import compare_models, model_frames, model_report, model_results, model_tables

out, parts = sys.argv[1], sys.argv[2:]
merged = compare_models.merge_comparisons(parts)
model_results.write_results(merged, out)
model_frames.plot_models(merged, out.removesuffix(".json") + ".png")
print(model_tables.format_summary(model_report.summarize(merged)))
print()
print(model_tables.format_models(merged))
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
METHODS=${METHODS:-default,zero-gemm,topk-4-gemm,stock-gemm}
DEADLINE=$(($(date +%s) + BOUND))
mkdir -p "$OUT"

stream() {  # stream <gpu> <segments>: each segment in turn, with what is left of the bound
  local gpu=$1 segment methods workloads left j=0
  local -a segments
  IFS=';' read -ra segments <<< "$2"
  for segment in "${segments[@]}"; do
    if [[ $segment == *@* ]]; then methods=${segment%%@*}; workloads=${segment#*@}
    else methods=$METHODS; workloads=$segment; fi
    left=$((DEADLINE - $(date +%s)))
    if [ "$left" -lt 30 ]; then echo "networks_h200.sh: $segment not started: ${left} s left"; continue; fi
    mkdir -p "$OUT/gpu$gpu/s$j"
    METHODS=$methods OUT="$OUT/gpu$gpu/s$j" bash "$HERE/models_h100.sh" "$left" "$workloads"
    j=$((j + 1))
  done
}

for i in "${!STREAMS[@]}"; do
  first=$((i * PER_STREAM))
  mkdir -p "$OUT/gpu$i"
  # taskset runs a program, not a shell function: the stream runs in its own bash, given the function
  CUDA_VISIBLE_DEVICES=$i TORCHINDUCTOR_COMPILE_THREADS=$PER_STREAM taskset -c "$first-$((first + PER_STREAM - 1))" \
    bash -c "$(declare -f stream); $(declare -p OUT HERE METHODS DEADLINE); stream $i \"\$1\"" _ "${STREAMS[$i]}" \
    > "$OUT/gpu$i.log" 2>&1 &
done
wait
echo "streams: ${#STREAMS[@]} on $GPUS GPU(s), $PER_STREAM of $CORES cores each" | tee "$OUT/streams.log"
DEVICE=$(python3 -c 'from kernel_select.device import detect; print(detect(0).key)')
merge "$OUT/networks_$DEVICE.json" "$OUT"/gpu*/s*/models_*.json | tee -a "$OUT/streams.log"
