#!/bin/sh
# results/compare_h100.{json,png}: the 34-problem single-GEMM suite under mode="max-autotune"
# (no CUDA graphs): eager, stock max-autotune and the handler at k = 1, 2, 4, 8, each in its own
# process with fresh caches. Needs an H100 and `pip install '.[offline]'`; about 20 minutes.
set -e
kernel-select compare --gemm-topk 1,2,4,8 --lut luts/h100_seed.json --out results
