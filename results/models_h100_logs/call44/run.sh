#!/bin/bash
# Lease 2, call 5: Llama decode new vs old, second processes of the others, stock on recsys decode.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export KERNEL_SELECT_GIT_SHA=$(cat .diag/sha) PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
ROOT=$PWD
ln -sfn $ROOT/models .diag/old/models; ln -sfn $ROOT/luts .diag/old/luts
mkdir -p $OUT/c5
R=/tmp/work4
where() { [ $1 = old ] && echo $ROOT/.diag/old || echo $ROOT; }
cm() { local v=$1; shift
  (cd $(where $v) && PYTHONPATH=/tmp/site:$(where $v) python3 -m kernel_select.cli compare-models --out $R/$v "$@" >> $OUT/c5/$v.log 2>&1)
  echo "$v $* rc $? at $SECONDS s"; }
cm new --models llama3-8b-2layer/decode --methods topk-4-gemm --resume
cm old --models llama3-8b-2layer/decode --methods topk-4-gemm --resume
for W in recsys-mlp/decode gpt2-small/decode vit-b16/decode; do
  [ $SECONDS -gt 420 ] && break
  cm new --models $W --methods topk-4-gemm --repeat 2 --resume --max-seconds $((560 - SECONDS))
  cm old --models $W --methods topk-4-gemm --repeat 2 --resume --max-seconds $((580 - SECONDS))
done
[ $SECONDS -lt 470 ] && cm new --models recsys-mlp/decode --methods stock --resume --max-seconds $((585 - SECONDS))
for v in new old; do cp $R/$v/models_h100.json $OUT/c5/$v.json 2>/dev/null; cp -r $R/$v/logs $OUT/c5/logs_$v 2>/dev/null; done
grep -A8 "^method" $OUT/c5/new.log | tail -9; grep -A8 "^method" $OUT/c5/old.log | tail -9
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
