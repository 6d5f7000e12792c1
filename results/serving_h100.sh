#!/bin/sh
# results/serving_h100.{json,png}: a bf16 Linear(3420 -> 1280), forward and both backward GEMMs,
# sequence length dynamic, served at 560 to 8192. First the harness's best per length (every config
# and cuBLAS of each GEMM, timed alone in the layout the program runs it in), then one process per
# method. Needs an H100 and `pip install '.[offline]'`.
set -e
python -m kernel_select.offline.serving.serving_bench --harness-shapes results/serving_h100_harness_shapes.json
kernel-select bench --shapes results/serving_h100_harness_shapes.json --out results/serving_h100_harness.parquet
python -m kernel_select.offline.serving.serving_bench --harness results/serving_h100_harness.parquet \
    --out results/serving_h100.json
