"""ViT-B/16 prefill: why do the max-autotune methods step slower than default? Kernel tables per variant."""
import sys, time, torch
from torch.profiler import profile, ProfilerActivity
import kernel_select.inductor as ks
from kernel_select.offline.e2e import model_zoo as z

w = z.build_workload("vit-b16/prefill", device="cuda")
def timed(step, n=30):
    for _ in range(5): step()
    torch.cuda.synchronize(); out = []
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); step(); b.record(); torch.cuda.synchronize(); out.append(a.elapsed_time(b))
    return sorted(out)[n // 2]
def table(step, label):
    step(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        step(); torch.cuda.synchronize()
    print(f"--- {label}", flush=True)
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=100), flush=True)
variants = {
  "default": None,
  "gemm-auto-cg": dict(ks.gemm_autotune_options()),
  "gemm-auto-nocg": dict(ks.gemm_autotune_options(cudagraphs=False)),
  "default-cg": {"triton.cudagraphs": True},
}
which = sys.argv[1:] or list(variants)
eager = w.make_step(w.module)
for name in which:
    opts = variants[name]
    torch._dynamo.reset()
    if name.startswith("gemm"):
        ks.install(topk="auto", precompile_in_process=True)
    c = torch.compile(w.module, options=opts) if opts else torch.compile(w.module)
    step = w.make_step(c)
    t = time.time(); step(); torch.cuda.synchronize(); cs = time.time() - t
    print(f"{name}: compile {cs:.1f} s  step {timed(step):.3f} ms  eager {timed(eager):.3f} ms", flush=True)
    table(step, name)
    if name.startswith("gemm"):
        ks.uninstall() if hasattr(ks, "uninstall") else None
table(eager, "eager")
