"""ViT-B/16: why is every compiled method ~1.9x slower than eager? Kernels, ops, and variants."""
import collections, sys, time, torch
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd
from torch.profiler import profile, ProfilerActivity
import transformers
from kernel_select.offline.e2e import model_zoo as z
print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)

m = z.vit_b16().to("cuda", torch.bfloat16).eval()
print("attn impl", m.config._attn_implementation, flush=True)
x = torch.randn(64, 3, 224, 224, device="cuda", dtype=torch.bfloat16)

def ops_of(fn, *args):
    fw = []
    def fwc(gm, ex):
        fw.append(gm); return gm
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=aot_autograd(fw_compiler=fwc))(*args)
    c = collections.Counter(str(n.target) for g in fw for n in g.graph.nodes if n.op == "call_function")
    return len(fw), {k: v for k, v in c.items() if any(s in k for s in ("attention", "bmm", "softmax", "convolution", "mm", "clone", "copy"))}

def step_ms(fn, n=30):
    with torch.no_grad():
        for _ in range(3): fn(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(n):
            s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
            s.record(); fn(x); e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e))
    return sorted(times)[n // 2]

def kernels(fn, label):
    with torch.no_grad():
        fn(x); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            fn(x); torch.cuda.synchronize()
    print(f"--- {label} kernels", flush=True)
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=90), flush=True)

print("eager ms", step_ms(m), flush=True)
kernels(m, "eager")
torch._dynamo.reset()
c = torch.compile(m)
t = time.time(); 
with torch.no_grad(): c(x)
print("default compile s", time.time() - t, "ms", step_ms(c), flush=True)
kernels(c, "default compiled")
print("aot ops, vit", ops_of(m, x), flush=True)
for p in m.parameters(): p.requires_grad_(False)
print("aot ops, vit params frozen", ops_of(m, x), flush=True)
torch._dynamo.reset(); c2 = torch.compile(m)
print("default ms, params frozen", step_ms(c2), flush=True)
for p in m.parameters(): p.requires_grad_(True)
# the dynamo graph's sdpa node
dyn = []
def be(gm, ex):
    dyn.append(gm); return gm
torch._dynamo.reset()
with torch.no_grad():
    torch.compile(m, backend=be)(x)
print("dynamo graphs", len(dyn), flush=True)
for g in dyn:
    for n in g.graph.nodes:
        if "attention" in str(n.target) or "softmax" in str(n.target):
            print("dynamo node", n.target, [str(a) for a in n.args[:4]], n.kwargs, flush=True)
            for a in n.args[:3]:
                v = a.meta.get("example_value") if hasattr(a, "meta") else None
                print("  arg", getattr(v, "shape", None), v.stride() if v is not None else None, getattr(v, "dtype", None), getattr(v, "requires_grad", None), flush=True)
            break
names = [n for n, mod in m.named_modules() if type(mod).__name__.endswith("SelfAttention")]
attn = dict(m.named_modules())[names[0]]
print("self-attention class", type(attn).__name__, type(attn).__module__, flush=True)
hidden = torch.randn(64, 197, 768, device="cuda", dtype=torch.bfloat16)
print("attention module alone ops", ops_of(lambda h: attn(h)[0], hidden), flush=True)
torch.backends.cuda.enable_math_sdp(False)
try:
    print("vit ops, math sdp off", ops_of(m, x), flush=True)
    torch._dynamo.reset(); print("default ms, math off", step_ms(torch.compile(m)), flush=True)
except Exception as e:
    print("math off failed:", type(e).__name__, str(e)[:400], flush=True)
torch.backends.cuda.enable_math_sdp(True)
import inspect
src = inspect.getsource(type(attn).forward)
print(src[:3000])
from transformers.integrations import sdpa_attention
print(inspect.getsource(sdpa_attention.sdpa_attention_forward)[:4000])
