#!/bin/sh
# results/models_h100.{json,png}: whole models (GPT-2 small, a 2-layer Llama-3-8B-width decoder,
# ViT-B/16, a recommendation MLP tower) per method, one process with fresh caches per run.
# Needs an H100 and `pip install '.[offline,models]'`. The whole set takes several hours;
# --max-seconds with --resume splits it into pieces that each fit a time limit.
set -e
kernel-select compare-models \
    --methods default,stock,topk-4-gemm,topk-auto-gemm,pinned-gemm \
    --repeat 2 --samples 30 --out results --max-seconds 3000 --resume
