#!/bin/sh
# results/compare_gemm_only_h100.{json,png}: the same suite compiled with GEMM autotuning only
# (the README's recipe), eager and the handler at k = 1 and 4. Needs an H100; about 5 minutes.
set -e
kernel-select compare --gemm-only --gemm-topk 1,4 --only eager,topk-1,topk-4 --out results/gemm_only
mv results/gemm_only/compare_h100.json results/compare_gemm_only_h100.json
mv results/gemm_only/compare_h100.png results/compare_gemm_only_h100.png
