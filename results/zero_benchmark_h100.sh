#!/bin/bash
# results/zero_benchmark_h100.{json,png}: the zero-benchmark mode (zero-gemm: gemm_topk=1, where the cuBLAS
# decision alone hands Inductor one choice per GEMM) beside mode="default", Inductor's own GEMM autotuning
# (stock-gemm) and the README recipe (topk-4-gemm), on ten workloads of nine networks, one fresh process with
# empty caches per network and method, on one H100. In nine parts, each one device call of at most 10 minutes:
#
#   OUT=/some/folder bash results/zero_benchmark_h100.sh PART      (PART 1..9, from the repository root)
#
# A part starts from results/zero_benchmark_h100.json where it exists (the parts before it, committed), runs
# its workloads' missing runs, and writes $OUT/zero_benchmark_h100.json and .png (the whole comparison so
# far: copy both to results/ and commit before the next part), $OUT/zero_benchmark_h100_partPART.log (the
# summary, and a line per network and method with the GEMMs Inductor autotuned out of those it lowered:
# under zero-gemm, those it benchmarked anyway) and $OUT/zero_benchmark_h100_partPART_logs.tar.gz (every
# worker's log). A part cut by its bound keeps what it measured; running it again runs the rest.
# BOUND (default 480 s) bounds a part's comparison; start-up, the wheels and the plot add about 40 s.
# EXTRA_ARGS="--torch-device cpu --tiny --samples 3": a smoke test of the script on a CPU (the tiny networks;
# the handler leaves CPU GEMMs alone, and compare-models names that file models_cpu.json).
#
# The GPU machine has no pydantic: the wheels of ../shared/device-wheels/README.md travel in .whl/ (a
# git-ignored folder of the repository) and are installed first.
#
# Estimated wall time per workload, all four methods: the compile times of results/models_h100.json and
# results/networks_h100.json (default, stock-gemm as 0.875x stock where only stock was measured, topk-4-gemm;
# zero-gemm taken as default's plus 2 s), plus each process's overhead (start-up, warm-up compile, building
# the network, 30 timed samples beside eager: a run's wall time minus its compile time, 25-67 s by network).
# The three new networks have no measurement: Swin from its 24 distinct GEMMs (stock-gemm at ~13 s a GEMM,
# ViT's ~16 s for larger ones), the speech encoder from BERT's, the MoE decoder from Qwen3-4B's overhead (its 1.9e9 weights take
# as long to build) and its two grouped-GEMM lowerings, which every max-autotune method autotunes.
#   part  workloads                                   default + stock-gemm + topk-4-gemm + zero-gemm   total
#   1     recsys-mlp/decode, vit-b16/prefill          5 + 53 + 6 + 7, 10 + 80 + 13 + 12; 4 x 25, 4 x 32   ~410 s
#   2     gpt2-small/prefill                          9 + 116 + 14 + 11; 4 x 58                          ~385 s
#   3     llama3-8b-2layer/prefill                    9 + 84 + 18 + 11; 4 x 48                           ~315 s
#   4     llama3-8b-2layer/decode                     6 + 43 + 11 + 8; 4 x 48                            ~260 s
#   5     bert-base-2layer-fp32/prefill               measured walls 37 + 193 + 42, zero-gemm ~40        ~310 s
#   6     t5-base-2layer/prefill                      ~9 + ~100 + ~14 + ~11; 4 x 40                      ~295 s
#   7     swin-tiny-4stage/prefill                    ~10 + ~310 + ~30 + ~25 (its 8 window bmms are     ~495 s
#                                                     benchmarked under zero-gemm too); 4 x 30: the
#                                                     estimate least sure; if the bound cuts the last
#                                                     method, run part 7 again
#   8     whisper-medium-encoder-2layer/prefill       ~10 + ~130 + ~20 + ~15; 4 x 40                     ~335 s
#   9     qwen3-moe-2layer/prefill                    ~10 + ~105 + ~50 + ~40; 4 x 67                     ~475 s
set -u -o pipefail
: "${OUT:?set OUT to the folder the results go to}"
PART=${1:?usage: OUT=DIR bash results/zero_benchmark_h100.sh PART (1..9)}
BOUND=${BOUND:-480}
case $PART in
  1) WORKLOADS="recsys-mlp/decode,vit-b16/prefill" ;;
  2) WORKLOADS="gpt2-small/prefill" ;;
  3) WORKLOADS="llama3-8b-2layer/prefill" ;;
  4) WORKLOADS="llama3-8b-2layer/decode" ;;
  5) WORKLOADS="bert-base-2layer-fp32/prefill" ;;
  6) WORKLOADS="t5-base-2layer/prefill" ;;
  7) WORKLOADS="swin-tiny-4stage/prefill" ;;
  8) WORKLOADS="whisper-medium-encoder-2layer/prefill" ;;
  9) WORKLOADS="qwen3-moe-2layer/prefill" ;;
  *) echo "zero_benchmark_h100.sh: PART must be 1..9, got $PART" >&2; exit 2 ;;
esac
ROOT=$PWD
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$ROOT
else
  export PYTHONPATH=$ROOT  # an environment with the package's dependencies installed
fi
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
RESULTS=$OUT/models_h100.json  # the name compare-models gives the comparison on an H100
[ -f results/zero_benchmark_h100.json ] && cp results/zero_benchmark_h100.json "$RESULTS"
# The outer timeout only guards against a hang outside the workers: the results file is complete after
# every run, so whatever it cuts is the run in progress.
timeout -k 10 $((BOUND + 60)) python3 -m kernel_select.cli compare-models --networks "$WORKLOADS" \
  --methods default,stock-gemm,topk-4-gemm,zero-gemm --out "$OUT" --max-seconds "$BOUND" --resume \
  ${EXTRA_ARGS:-} 2>&1 | tee "$OUT/zero_benchmark_h100_part$PART.log"
status=$?
if [ -f "$RESULTS" ]; then
  mv "$RESULTS" "$OUT/zero_benchmark_h100.json"
  [ -f "$OUT/models_h100.png" ] && mv "$OUT/models_h100.png" "$OUT/zero_benchmark_h100.png"
else  # compare-models names its file by the device: another GPU, or a smoke test with EXTRA_ARGS="--device cpu --tiny"
  echo "zero_benchmark_h100.sh: no $RESULTS written; the comparison is in $(ls "$OUT"/models_*.json 2>/dev/null)" >&2
fi
if [ -d "$OUT/logs" ]; then  # one file: the device machine returns at most 8
  tar -czf "$OUT/zero_benchmark_h100_part${PART}_logs.tar.gz" -C "$OUT" logs && rm -r "$OUT/logs"
fi
exit $status
