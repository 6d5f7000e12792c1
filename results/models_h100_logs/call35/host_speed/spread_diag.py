"""Per-process host spread of a launch-bound compiled step: which host factor moves it.

    python spread_diag.py MODEL METHOD OUT.json [gc]

Without `gc` (call35): three sets of rounds, a fixed pure-Python loop timed beside the steps.
With `gc` (call34): sets as timed, again, after gc.collect() + gc.freeze(), with gc disabled, and
after Inductor's compile workers were shut down; no host loop (call34 ran it that way)."""
import gc, json, os, statistics, sys, time
import torch
from kernel_select.offline.e2e.model_worker import worker_device, _warm_up, _marking_steps, recording_gemms
from kernel_select.offline.e2e.model_methods import select_methods
from kernel_select.offline.e2e.model_zoo import build_workload
from kernel_select.offline.e2e.step_timing import CudaEventTimer, interleaved_ms, relative_iqr

model, method_name, out = sys.argv[1], sys.argv[2], sys.argv[3]
GC_MODE = sys.argv[4:] == ["gc"]

def proc_stat():
    f = open("/proc/stat").readline().split()[1:]
    return [int(x) for x in f]  # user nice system idle iowait irq softirq steal

def ctx():
    d = {}
    for line in open("/proc/self/status"):
        if "ctxt_switches" in line:
            k, v = line.split(":"); d[k] = int(v)
    return d

gc_events = {"n": [0, 0, 0], "ms": 0.0, "t0": 0.0}
def gc_cb(phase, info):
    if phase == "start":
        gc_events["t0"] = time.perf_counter()
    else:
        gc_events["n"][info["generation"]] += 1
        gc_events["ms"] += (time.perf_counter() - gc_events["t0"]) * 1e3
gc.callbacks.append(gc_cb)

def host_ms(step, n=200):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        step()
    h = (time.perf_counter() - t) * 1e3 / n
    torch.cuda.synchronize()
    return h

def phase(name, steps):
    gc_events.update(n=[0, 0, 0], ms=0.0)
    s0, c0, w0, p0 = proc_stat(), ctx(), time.perf_counter(), time.process_time()
    samples = interleaved_ms(steps, CudaEventTimer(), samples=30, min_sample_ms=20.0)
    s1, c1, w1, p1 = proc_stat(), ctx(), time.perf_counter(), time.process_time()
    hosts = [host_ms(steps["step"]) for _ in range(10)]
    host_eager = [host_ms(steps["eager"], 50) for _ in range(5)]
    tot = sum(s1) - sum(s0)
    r = {"phase": name, "step_ms": statistics.median(samples["step"]), "eager_ms": statistics.median(samples["eager"]),
         "step_iqr": relative_iqr(samples["step"]), "eager_iqr": relative_iqr(samples["eager"]),
         "host_step_ms": statistics.median(hosts), "host_eager_ms": statistics.median(host_eager),
         "steal_frac": (s1[7] - s0[7]) / max(tot, 1), "busy_frac": 1 - (s1[3] - s0[3]) / max(tot, 1),
         "cpu_over_wall": (p1 - p0) / (w1 - w0),
         "ctx": {k: c1[k] - c0[k] for k in c1}, "gc_n": list(gc_events["n"]), "gc_ms": round(gc_events["ms"], 2),
         "gc_counts": gc.get_count(), "gc_tracked": len(gc.get_objects()) if name == "base" else None,
         "samples_step": [round(x, 4) for x in samples["step"]]}
    if GC_MODE:
        print(json.dumps({k: v for k, v in r.items() if k != "samples_step"}), flush=True)
        return r
    r["samples_cpu"] = [round(x, 4) for x in samples["cpu"]]
    r["cpu_ms"] = statistics.median(samples["cpu"]); r["cpu_iqr"] = relative_iqr(samples["cpu"])
    r["samples_eager"] = [round(x, 4) for x in samples["eager"]]
    print("PHASE " + json.dumps({k: v for k, v in r.items() if not k.startswith("samples")}), flush=True)
    return r

device = worker_device("cuda")
method = select_methods(method_name)[0]
_warm_up(device, method)
w = build_workload(model, device=device, tiny=False)
eager = w.make_step(w.module)
step = eager
t = time.perf_counter()
if method.mode != "eager":
    step = _marking_steps(w.make_step(method.compile(w.module)))
    with recording_gemms():
        step(); torch.cuda.synchronize()
print("compile", time.perf_counter() - t, "cpu", os.sched_getaffinity(0).__len__(), flush=True)
def cpu_work():
    # A fixed amount of pure-Python work: the host's own speed, timed beside the steps.
    return sum(i * i for i in range(4000))
steps = {"step": step, "eager": eager} if GC_MODE else {"step": step, "eager": eager, "cpu": cpu_work}
res = {"model": model, "method": method_name, "pid": os.getpid(), "phases": []}
res["phases"].append(phase("base", steps))
res["phases"].append(phase("base2", steps))
if not GC_MODE:
    res["phases"].append(phase("base3", steps))
else:
    gc.collect(); gc.freeze()
    res["phases"].append(phase("frozen", steps))
    gc.disable()
    res["phases"].append(phase("gc_off", steps))
    try:
        from torch._inductor import async_compile
        async_compile.shutdown_compile_workers()
        res["shutdown"] = True
    except Exception as e:
        res["shutdown"] = repr(e)
    time.sleep(1)
    res["phases"].append(phase("no_pool", steps))
json.dump(res, open(out, "w"))
