#!/bin/bash
# Whole networks on one H100: kernel_select's README recipe (topk-4-gemm: the handler at k = 4 with
# gemm_autotune_options() and precompile_in_process) against Inductor's own GEMM autotuning with the same
# options (stock-gemm) and mode="default" (what each method's autotuning time is measured from), one process
# with empty caches per network and method.
#
#   OUT=/some/folder PYTHONPATH=... bash results/models_h100.sh [SECONDS [WORKLOAD ...]]
#
# Run from the repository root. SECONDS (default 440) bounds the comparison: no run starts that the longest
# run of its method so far says cannot finish in what is left, and a worker still running at the bound is
# cut (its run is kept as "cut by --max-seconds"). The command's own start-up (imports, device detection)
# and the plot at the end add about 20 s. Writes $OUT/models_<device>.json (rewritten after every run),
# $OUT/models_<device>.png, $OUT/logs/<workload>.<method>.0.log and $OUT/compare_models.log (the summary
# and the per-network table). WORKLOAD defaults to the list below, in that order; a workload is measured
# method by method before the next starts, so the bound cuts the end of the list.
#   RESUME=path/to/models_<device>.json   continue an earlier run's file (the name it was written under):
#                                         its measured runs are kept, only the missing ones run
#   METHODS=...                           other methods (default: default,stock-gemm,topk-4-gemm; the eager
#                                         step is timed in every method's process, beside its own)
#   EXTRA_ARGS="--device cpu --tiny"      more compare-models arguments (a smoke test of this script on a CPU)
#
# Estimated wall time per workload (default + stock-gemm + topk-4-gemm), from results/models_h100.json:
# the sum of the three compile times, plus one process's overhead per method (start-up, warm-up compile,
# building the network, timing): wall minus compile_s of earlier single-run compare-models invocations
# (tqdm's time per run): recsys 18-28 s, GPT-2 decode 29-38 s,
# ViT-B/16 decode 27-37 s, Llama decode 41-55 s, GPT-2 prefill 57-60 s. stock-gemm's compile was measured
# on GPT-2 prefill only (115.8 s, 0.875x stock's 132.3 s); elsewhere it is taken as 0.875x stock's. The
# new networks have no measurement: each is estimated from the measured network nearest in size.
#   workload                        default + stock-gemm + topk-4-gemm compile   overhead    total
#   bert-base-2layer-fp32/prefill   ~9 + ~116 + ~14 (as GPT-2 prefill: 8192 tokens,  3 x ~58   ~310 s
#                                   width 768, 6 GEMMs to GPT-2's 5)
#   qwen3-4b-2layer/prefill         ~9 + ~84 + ~18 (as Llama-3-8B-width prefill)     3 x ~48   ~255 s
#   recsys-mlp/decode               5.0 + 52.9 + 5.9                                 3 x ~25   ~140 s
#   llama3-8b-2layer/prefill        8.6 + 84.4 + 17.6                                3 x ~48   ~255 s
#   t5-base-2layer/prefill          ~9 + ~100 + ~14 (as BERT: 6 GEMMs at 4096 tokens) 3 x ~40  ~245 s
#   gpt2-small/decode               9.0 + 58.1 + 12.5                                3 x ~33   ~180 s
#   llama3-8b-2layer/decode         5.9 + 43.3 + 11.3                                3 x ~48   ~205 s
#   convnext-tiny-2stage/prefill    ~8 + ~150 + ~110 (Triton conv templates compiled 3 x ~30   ~360 s
#                                   and benchmarked for 4 convolutions in stock-gemm and topk-4-gemm
#                                   alike: the handler leaves convolutions to Inductor; a ConvNeXt-style
#                                   network's stock-gemm took 209.8 s at batch 32)
# All of them: about 32 minutes. 440 s holds the first one or two; RESUME continues on the next machine.
set -u -o pipefail
: "${OUT:?set OUT to the folder the results go to}"
BOUND=${1:-440}
[ $# -gt 0 ] && shift
DEFAULT_WORKLOADS="bert-base-2layer-fp32/prefill qwen3-4b-2layer/prefill recsys-mlp/decode
  llama3-8b-2layer/prefill t5-base-2layer/prefill gpt2-small/decode llama3-8b-2layer/decode
  convnext-tiny-2stage/prefill"
WORKLOADS=$(echo ${*:-$DEFAULT_WORKLOADS} | tr ' ' ',')
mkdir -p "$OUT"
RESUME_FLAG=()
if [ -n "${RESUME:-}" ]; then
  case "$(basename "$RESUME")" in
    models_*.json) cp "$RESUME" "$OUT/" ;;
    *) echo "models_h100.sh: RESUME=$RESUME: give the models_<device>.json file a comparison wrote" >&2; exit 2 ;;
  esac
  RESUME_FLAG=(--resume)
fi
export PYTHONUNBUFFERED=1
# The outer timeout only guards against a hang outside the workers; the results file is complete after
# every run, so whatever it cuts is the run in progress.
timeout -k 10 $((BOUND + 60)) python3 -m kernel_select.cli compare-models --networks "$WORKLOADS" \
  --methods "${METHODS:-default,stock-gemm,topk-4-gemm}" --out "$OUT" --max-seconds "$BOUND" \
  ${RESUME_FLAG[@]+"${RESUME_FLAG[@]}"} ${EXTRA_ARGS:-} 2>&1 | tee "$OUT/compare_models.log"
