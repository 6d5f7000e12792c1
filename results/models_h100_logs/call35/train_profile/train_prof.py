"""Per-kernel device time of one compiled step: where two methods differ (call35, call38).
From call42 on it also times the device time per step (`dev_ms`): 40 steps queued behind a sleep kernel."""
import json, re, sys, time
from collections import defaultdict
import torch
from kernel_select.offline.e2e.model_worker import worker_device, _warm_up, _marking_steps, recording_gemms
from kernel_select.offline.e2e.model_methods import select_methods
from kernel_select.offline.e2e.model_zoo import build_workload

model, method_name, out = sys.argv[1], sys.argv[2], sys.argv[3]
device = worker_device("cuda")
method = select_methods(method_name)[0]
_warm_up(device, method)
w = build_workload(model, device=device, tiny=False)
step = _marking_steps(w.make_step(method.compile(w.module))) if method.mode != "eager" else w.make_step(w.module)
t = time.perf_counter()
with recording_gemms() as gemms:
    step(); torch.cuda.synchronize()
compile_s = time.perf_counter() - t
for _ in range(5):
    step()
torch.cuda.synchronize()
N = 6 if "train" in model else 200
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    for _ in range(N):
        step()
    torch.cuda.synchronize()
kern = defaultdict(lambda: [0.0, 0])
for ev in prof.events():
    if ev.device_type == torch.autograd.DeviceType.CUDA:
        kern[ev.name][0] += ev.device_time / 1e3 / N  # ms per step
        kern[ev.name][1] += 1
def cat(name):
    if name.startswith("triton_tem") or "_mm_" in name and name.startswith("triton"): return "triton_gemm"
    if re.search(r"gemm|cutlass|xmma|sm90_|cublas|nvjet", name, re.I): return "cublas"
    if "flash" in name or "fmha" in name or "attention" in name.lower(): return "attention"
    if name.startswith("triton"): return "triton_other"
    return "other"
cats = defaultdict(float)
for n, (ms, c) in kern.items():
    cats[cat(n)] += ms
top = sorted(kern.items(), key=lambda kv: -kv[1][0])[:80]
# device time per step, the host kept ahead by a sleep kernel (as the worker's step_device_ms)
dev = []
for _ in range(5):
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(40e6))  # ~20 ms at 1.98 GHz
    s.record()
    for _ in range(40):
        step()
    e.record(); torch.cuda.synchronize()
    dev.append(s.elapsed_time(e) / 40)
dev.sort()
res = {"model": model, "method": method_name, "compile_s": compile_s, "cats": cats, "dev_ms": dev,
       "total_ms": sum(v[0] for v in kern.values()),
       "top": [[n[:160], round(ms, 4), c // N] for n, (ms, c) in top],
       "gemms": [{"shapes": g["shapes"], "choice": g["choice"]} for g in gemms]}
json.dump(res, open(out, "w"), indent=1)
print(method_name, "compile %.1f" % compile_s, "total %.4f" % res["total_ms"], "dev %.4f" % dev[2], {k: round(v, 3) for k, v in cats.items()})
