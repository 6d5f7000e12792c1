"""After the zoo fix: the compiled ViT's attention ops and step vs eager; GPT-2/Llama prefill masks."""
import collections, torch
from torch._dynamo.backends.common import aot_autograd
from kernel_select.offline.e2e import model_zoo as z

def ops_of(fn):
    fw = []
    def fwc(gm, ex):
        fw.append(gm); return gm
    torch._dynamo.reset()
    fn(lambda *a, **k: torch.compile(w.module, backend=aot_autograd(fw_compiler=fwc))(*a, **k))
    c = collections.Counter(str(n.target) for g in fw for n in g.graph.nodes if n.op == "call_function")
    return {k: v for k, v in c.items() if any(s in k for s in ("attention", "bmm", "softmax", "_to_copy"))}

for name in ("vit-b16/prefill", "gpt2-small/prefill", "llama3-8b-2layer/prefill"):
    w = z.build_workload(name, device="cuda")
    print(name, w.module.config._attn_implementation, flush=True)
    print("  aot ops", ops_of(lambda f: w.make_step(f)()), flush=True)
    if name.startswith("vit"):
        step_e = w.make_step(w.module)
        torch._dynamo.reset(); step_c = w.make_step(torch.compile(w.module))
        step_c()
        for label, s in (("eager", step_e), ("default", step_c)) * 2:
            for _ in range(3): s()
            torch.cuda.synchronize(); a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(20): s()
            b.record(); torch.cuda.synchronize(); print("  ", label, "ms", a.elapsed_time(b) / 20, flush=True)
    del w; torch.cuda.empty_cache()
