#!/bin/bash
# call43 and call44 (one lease): bash run.sh call43 | call44. The new rule runs from the repository root,
# the old rule (b784ce0) from .diag/old, each with its own package first on the path.
CALL=$1; D=$([ "$CALL" = call44 ] && echo c5 || echo c4)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export KERNEL_SELECT_GIT_SHA=$(cat .diag/sha) PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
ROOT=$PWD
ln -sfn $ROOT/models .diag/old/models; ln -sfn $ROOT/luts .diag/old/luts
mkdir -p $OUT/$D
R=/tmp/work4
where() { [ $1 = old ] && echo $ROOT/.diag/old || echo $ROOT; }
(cd .diag/old && PYTHONPATH=/tmp/site:$ROOT/.diag/old python3 -c "import kernel_select.model.gate as g; print('old rule:', g.RULE, g.__file__)")
PYTHONPATH=/tmp/site:$ROOT python3 -c "import kernel_select.model.gate as g; print('new rule:', g.RULE, g.__file__)"
prof() { (cd $(where $1) && PYTHONPATH=/tmp/site:$(where $1) timeout 100 python3 $ROOT/results/models_h100_logs/call35/train_profile/train_prof.py $2 topk-4-gemm $OUT/$D/prof_$1_$3.json 2>$OUT/$D/prof_$1_$3.err | tail -1); echo "prof $1 $2 at $SECONDS s"; }
cm() { local v=$1; shift
  (cd $(where $v) && PYTHONPATH=/tmp/site:$(where $v) python3 -m kernel_select.cli compare-models --out $R/$v "$@" >> $OUT/$D/$v.log 2>&1)
  echo "$v $* rc $? at $SECONDS s"; }
if [ "$CALL" = call43 ]; then
  prof new recsys-mlp/decode 1; prof old recsys-mlp/decode 1; prof new recsys-mlp/decode 2; prof old recsys-mlp/decode 2
  for W in recsys-mlp/decode gpt2-small/decode vit-b16/decode; do
    [ $SECONDS -gt 480 ] && break
    cm new --models $W --methods topk-4-gemm --resume --max-seconds $((570 - SECONDS))
    cm old --models $W --methods topk-4-gemm --resume --max-seconds $((585 - SECONDS))
  done
  for v in new old; do cp $R/$v/models_h100.json $OUT/$D/$v.json 2>/dev/null; cp -r $R/$v/logs $OUT/$D/logs_$v 2>/dev/null; done
  grep -ch "unfused" $OUT/$D/logs_old/* $OUT/$D/logs_new/* 2>/dev/null | paste -sd' '
  cd $OUT && tar czf $D.tgz $D && rm -rf $D
else
  cm new --models llama3-8b-2layer/decode --methods topk-4-gemm --resume
  cm old --models llama3-8b-2layer/decode --methods topk-4-gemm --resume
  for W in recsys-mlp/decode gpt2-small/decode vit-b16/decode; do
    [ $SECONDS -gt 420 ] && break
    cm new --models $W --methods topk-4-gemm --repeat 2 --resume --max-seconds $((560 - SECONDS))
    cm old --models $W --methods topk-4-gemm --repeat 2 --resume --max-seconds $((580 - SECONDS))
  done
  [ $SECONDS -lt 470 ] && cm new --models recsys-mlp/decode --methods stock --resume --max-seconds $((585 - SECONDS))
  for v in new old; do cp $R/$v/models_h100.json $OUT/$D/$v.json 2>/dev/null; cp -r $R/$v/logs $OUT/$D/logs_$v 2>/dev/null; done
  grep -A8 "^method" $OUT/$D/new.log | tail -9; grep -A8 "^method" $OUT/$D/old.log | tail -9
  cd $OUT && tar czf $D.tgz $D && rm -rf $D
fi
