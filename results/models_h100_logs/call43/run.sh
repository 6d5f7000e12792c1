#!/bin/bash
# Lease 2, call 4: new rule (HEAD) vs old rule (b784ce0, run from its own folder so that its package
# comes first on sys.path), alternating, on the workloads whose choices the rule changes.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export KERNEL_SELECT_GIT_SHA=$(cat .diag/sha) PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
ROOT=$PWD
ln -sfn $ROOT/models .diag/old/models; ln -sfn $ROOT/luts .diag/old/luts
mkdir -p $OUT/c4
R=/tmp/work4
where() { [ $1 = old ] && echo $ROOT/.diag/old || echo $ROOT; }
(cd .diag/old && PYTHONPATH=/tmp/site:$ROOT/.diag/old python3 -c "import kernel_select.model.gate as g; print('old rule:', g.RULE, g.__file__)")
PYTHONPATH=/tmp/site:$ROOT python3 -c "import kernel_select.model.gate as g; print('new rule:', g.RULE, g.__file__)"
prof() { (cd $(where $1) && PYTHONPATH=/tmp/site:$(where $1) timeout 100 python3 $ROOT/.diag/train_prof.py $2 topk-4-gemm $OUT/c4/prof_$1_$3.json 2>$OUT/c4/prof_$1_$3.err | tail -1); echo "prof $1 $2 at $SECONDS s"; }
cm() { local v=$1; shift
  (cd $(where $v) && PYTHONPATH=/tmp/site:$(where $v) python3 -m kernel_select.cli compare-models --out $R/$v "$@" >> $OUT/c4/$v.log 2>&1)
  echo "$v $* rc $? at $SECONDS s"; }
prof new recsys-mlp/decode 1; prof old recsys-mlp/decode 1; prof new recsys-mlp/decode 2; prof old recsys-mlp/decode 2
for W in recsys-mlp/decode gpt2-small/decode vit-b16/decode; do
  [ $SECONDS -gt 480 ] && break
  cm new --models $W --methods topk-4-gemm --resume --max-seconds $((570 - SECONDS))
  cm old --models $W --methods topk-4-gemm --resume --max-seconds $((585 - SECONDS))
done
for v in new old; do cp $R/$v/models_h100.json $OUT/c4/$v.json 2>/dev/null; cp -r $R/$v/logs $OUT/c4/logs_$v 2>/dev/null; done
grep -ch "unfused" $OUT/c4/logs_old/* $OUT/c4/logs_new/* 2>/dev/null | paste -sd' '
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
