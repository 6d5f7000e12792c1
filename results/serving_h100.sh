#!/bin/sh
# Serving a dynamic sequence length without autotuning, on one H100 (docs/results.md). Two parts,
# from the repository root with the package importable (PYTHONPATH=. or an install with
# '.[offline]'); everything is written to DIR, and a rerun with the same DIR resumes (the methods
# measured without an error are kept, the pinned LUT is served again, pretune's measurements are
# kept in DIR/*_pinned_lut.json.progress.json):
#
#   sh results/serving_h100.sh seed DIR     # results/serving_h100.{json,png} and the harness parquet
#   sh results/serving_h100.sh decoder DIR  # results/serving_decoder_h100.{json,png}
#
# SECONDS_BUDGET (default 480) bounds one run of a part: methods not started by then are recorded
# as skipped, and the next run with the same DIR measures them.
#
# seed: the first user's Linear(3420 -> 1280) step (forward, grad input, grad weight) at lengths
# 560, 1024, 1500, 2048, 3000, 4096, 6000, 8192. First the harness's best per length: every config
# and cuBLAS of each GEMM timed alone in the layout the program runs it in (bench times only the
# lengths the committed parquet lacks). Then pretune on the program's compiled graph (per-bucket
# pins) and one process per method with fresh caches: pinned per bucket, the same LUT served by one
# graph, mode="default", top-4 with one graph per bucket, top-4 ranked over the whole range in one
# graph, stock GEMM-only autotuning and stock max-autotune (the references for top-4's compile
# budget); the pinned and top-4 methods again with the Triton cache their first run left (a
# serving restart).
# decoder: a Llama-3-8B-width decoder layer's prefill at 128..8192: pinned per bucket (and again
# with a warm Triton cache), mode="default", top-4 per bucket, and stock GEMM-only autotuning in
# place of max-autotune, whose pointwise autotuning of a whole layer would not fit. Its kernel
# time is compared with the fastest method per length: the layer runs attention and norms beside
# its GEMMs, so the harness's GEMM-only best does not apply.
#
# Logs go to DIR/*_logs.tar.gz.
set -eu
part=${1:?usage: sh results/serving_h100.sh seed|decoder DIR}
dir=${2:?usage: sh results/serving_h100.sh seed|decoder DIR}
mkdir -p "$dir"
case $part in
seed)
    name=serving_h100
    python3 -m kernel_select.offline.serving.serving_bench \
        --harness-shapes results/serving_h100_harness_shapes.json
    [ -f "$dir/serving_h100_harness.parquet" ] || cp results/serving_h100_harness.parquet "$dir/"
    python3 -m kernel_select.cli bench --shapes results/serving_h100_harness_shapes.json \
        --out "$dir/serving_h100_harness.parquet" --max-seconds 150 --no-progress
    python3 -m kernel_select.offline.serving.serving_bench --program seed --out "$dir/$name.json" \
        --resume --methods pinned_buckets,pinned_lut,default,topk4_buckets,topk4_dynamic,stock_gemm,max_autotune \
        --warm pinned_buckets,pinned_lut,topk4_buckets,topk4_dynamic --max-seconds "${SECONDS_BUDGET:-480}" \
        --harness "$dir/serving_h100_harness.parquet"
    ;;
decoder)
    name=serving_decoder_h100
    python3 -m kernel_select.offline.serving.serving_bench --program decoder --out "$dir/$name.json" \
        --resume --methods pinned_buckets,default,topk4_buckets,stock_gemm \
        --warm pinned_buckets --max-seconds "${SECONDS_BUDGET:-480}"
    ;;
*)
    echo "usage: sh results/serving_h100.sh seed|decoder DIR" >&2
    exit 2
    ;;
esac
if [ -d "$dir/${name}_logs" ]; then  # a resumed run adds its logs beside the earlier ones
    stamp=$(date +%H%M%S)
    tar -czf "$dir/${name}_logs_$stamp.tar.gz" -C "$dir" "${name}_logs" && rm -r "$dir/${name}_logs"
fi
