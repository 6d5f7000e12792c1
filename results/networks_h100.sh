#!/bin/bash
# results/networks_h100.json: networks outside the older whole-model suite (a BERT-style masked LM with eager
# fp32 attention, a 2,560-wide Qwen3-4B-shaped decoder, a T5-style encoder-decoder, a ConvNeXt-style
# network), each compiled by mode="default", by Inductor's own GEMM autotuning (stock-gemm) and by the
# README recipe (topk-4-gemm), one fresh process per method, on one H100:
#
#   OUT=/some/folder PYTHONPATH=... bash results/networks_h100.sh [SECONDS]
#
# (results/models_h100.sh does the work; SECONDS bounds it, default 440.) Then copy
# $OUT/models_h100.json to results/networks_h100.json.
set -euo pipefail
exec bash "$(dirname "$0")/models_h100.sh" "${1:-440}" bert-base-2layer-fp32/prefill qwen3-4b-2layer/prefill \
  t5-base-2layer/prefill convnext-tiny-2stage/prefill
