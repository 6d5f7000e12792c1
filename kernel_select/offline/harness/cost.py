"""What collecting a plan will cost on one host, estimated on CPU: compile, timing and wall time.

The estimate replays the harness's pipeline as a small simulation:
  * compile: every distinct key once, in plan order, on `workers` processes, each key taking
    COMPILE_CORE_S[(kernel, dtype)] core-seconds;
  * GPUs: each takes the next problem in plan order whose keys are all compiled (the host's ready
    queue; with one GPU the same), so a GPU waits only when compile is behind;
  * a problem's timing: PROBLEM_S (operands, fp32 reference, cuBLAS, sleeps and syncs) plus
    LOAD_S for every binary new to that GPU's process (its untimed first launch), plus its
    launches: pass 1 runs every config once, pass 2 the contenders REPS more times; a launch costs
    the longer of the host's enqueue (HOST_S) and the GPU's work (L2 flush plus the kernel), since
    launches are queued ahead behind a GPU sleep;
  * the kernel times come from the problem's size: the fastest config at the dtype's measured rate
    (FLOP and bytes, with a floor for tiny problems), the mean config SLOWDOWN times that, and the
    contenders' summed time CONTENDER_SUM times the fastest.

Every constant is a measurement (data/README.md, the committed H100 files, a CPU compile probe),
named with where it comes from. A TF32 problem (`Problem.tf32`) is costed as float32: its keys are
float32 keys with the ALLOW_TF32 constexpr on, at float32's compile factors, and its kernel times at
float32's CUDA-core constants, an upper bound (TF32 runs on tensor cores). Neither has been measured
for TF32 yet; results/tf32_cost_h100.py measures both on a GPU. Checked against whole runs on the H100
host (15 compile workers, the plans' problems in file order): layers run 5 predicted 480 s, measured
469 s; coverage run 2 (with float32) predicted 539 s, measured 520 s; coverage run 1, of the older
harness v2, predicted 293 s, measured 371 s. Off on the H200 for the large-M plan (M 96,000-262,144): its
first 65 problems (float32) predicted 210 s, measured 535 s; the next 152 (128 bfloat16) predicted 282 s,
measured 530 s; the last 9 (float32) predicted 186 s, measured 449 s. A collection's log now measures
COMPILE_CORE_S per class (`compile per key in its worker`, pipeline.CompilePipeline.seconds_line): there
0.61 core-seconds for mm bf16, as assumed, and 1.75-2.89 for mm fp32 against the 1.98 assumed. In the
second run the GPU was busy 190 s against 127 s predicted, compile worked ahead on 470 keys of problems
the bound then cut, and compile and timing overlapped less than the simulation has them: 358 s of compile
on 15 workers and 190 s of timing took 530 s, where the simulation overlaps them.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from kernel_select.offline.harness.bench import REPS
from kernel_select.offline.harness.bench_plan import KERNEL_OF_OP, CompileKey, PlannedRun, reuse_order
from kernel_select.problem import Problem, gemm_flops

#: Core-seconds to compile one key. mm in bf16/fp16: layers run 5 on the H100 host (data/README.md),
#: compile-bound, 11,726 keys in 469.4 s on 15 workers (0.60; seed run 1 with nothing else
#: running: 0.52). The others: 0.60 times the ratio of their compile CPU time (the process and its
#: ptxas) to mm bf16's, 40 random keys each compiled for sm_90 on a CPU host with triton 3.6.0:
#: mm bf16 0.223, bmm bf16 0.214, mm fp32 0.735, bmm fp32 1.274 core-s a key. float32 without TF32
#: compiles 3.3x (mm) to 5.7x (bmm) slower.
COMPILE_CORE_S = {("mm", "bfloat16"): 0.60, ("mm", "float16"): 0.60, ("mm", "float32"): 0.60 * 0.735 / 0.223,
                  ("bmm", "bfloat16"): 0.60 * 0.214 / 0.223, ("bmm", "float16"): 0.60 * 0.214 / 0.223,
                  ("bmm", "float32"): 0.60 * 1.274 / 0.223}
#: Host seconds to enqueue one launch with its L2 flush (timer.INITIAL_ENQUEUE_S, what the timer
#: starts from before it measures its own rate).
HOST_S = 80e-6
#: GPU seconds of one L2 flush: zeroing 50 MB at the 2.6 TB/s the H100 streams a write.
FLUSH_S = 50e6 / 2.6e12
#: Seconds per problem besides its launches (operands, the fp32 reference, checks, syncs), and per
#: binary loaded into a process for the first time (its untimed launch). Not measured apart: with
#: these the checks above hold, and they are small beside compile on those runs.
PROBLEM_S = 0.25
LOAD_S = 0.004
#: The fastest config's rate on problems over 1e10 FLOP (median over the three H100 files), its
#: time on problems under 1e8 FLOP (median: launch latency, not work), and the effective memory
#: rate at which memory-bound problems' fastest configs ran.
RATE_FLOP_S = {"bfloat16": 499e12, "float16": 511e12, "float32": 32e12}
FLOOR_S = {"bfloat16": 10.9e-6, "float16": 6.3e-6, "float32": 21.2e-6}
BYTES_S = 2.0e12
#: The mean config over the fastest (geomean over problems), and the contenders' summed time
#: over the fastest (median over problems), in the three H100 files.
SLOWDOWN = {"bfloat16": 3.87, "float16": 3.32, "float32": 4.39}
CONTENDER_SUM = {"bfloat16": 101.5, "float16": 128.7, "float32": 65.7}
CONTENDERS = 30  # configs re-timed in pass 2: MIN_CONTENDERS and those within 1.5x, typically


@dataclass
class Estimate:
    problems: int
    rows: int
    keys: int
    keys_by_dtype: dict[str, int]
    compile_core_s: float
    timing_s: float  # every problem's timing, summed over GPUs
    wall_s: float
    gpu_wait_s: list[float] = field(default_factory=list)
    gpu_rows: list[int] = field(default_factory=list)

    def rows_per_gpu_minute(self) -> float:
        return 60.0 * self.rows / max(self.wall_s * max(len(self.gpu_rows), 1), 1e-9)

    def lines(self) -> list[str]:
        by_dtype = ", ".join(f"{d} {n}" for d, n in sorted(self.keys_by_dtype.items()))
        out = [f"{self.problems} problems, {self.rows} rows, {self.keys} distinct compile keys ({by_dtype}): "
               f"{self.compile_core_s:.0f} core-seconds of compile, {self.timing_s:.0f} s of timing",
               f"predicted wall {self.wall_s:.0f} s ({self.wall_s / 60:.1f} min) on "
               f"{len(self.gpu_rows)} GPU(s), {self.rows_per_gpu_minute():.0f} rows per GPU-minute"]
        out += [f"  GPU {i}: {rows} rows, waits {wait:.0f} s for compiled kernels"
                for i, (rows, wait) in enumerate(zip(self.gpu_rows, self.gpu_wait_s))]
        return out


def fastest_config_s(p: Problem) -> float:
    """Seconds the fastest config of `p` takes, from its size: the dtype's rate on its work or
    the memory rate on its operands, whichever is slower, and never under the launch floor.
    Planners cap a problem's timing cost with it (the mean config takes SLOWDOWN times as long)."""
    batch = p.batch if KERNEL_OF_OP[p.op] == "bmm" else 1
    return max(FLOOR_S[p.dtype], gemm_flops(batch, p.m, p.n, p.k) / RATE_FLOP_S[p.dtype],
               batch * (p.m * p.k + p.k * p.n + p.m * p.n) * p.dtype_bytes / BYTES_S)


def kernel_times_s(run: PlannedRun) -> tuple[float, float]:
    """(fastest config's seconds, mean config's seconds) of a problem, from its size."""
    best = fastest_config_s(run.problem)
    return best, best * SLOWDOWN[run.problem.dtype]


def problem_timing_s(runs: Sequence[PlannedRun], new_binaries: int) -> float:
    """Seconds one GPU spends on a problem (module docstring)."""
    if not runs:
        return 0.0
    best, mean = kernel_times_s(runs[0])
    dtype = runs[0].problem.dtype
    launches = len(runs) + 1
    pass1 = launches * max(HOST_S, FLUSH_S + mean)
    contenders = min(CONTENDERS, launches)
    pass2 = REPS * max(contenders * HOST_S, contenders * FLUSH_S + CONTENDER_SUM[dtype] * best)
    return PROBLEM_S + LOAD_S * new_binaries + pass1 + pass2


class Simulation:
    """The pipeline replayed one problem at a time, in plan order: `add` a problem's runs and read
    when it would finish. Problems only ever join the end of a plan, and what an earlier problem
    costs never depends on a later one (compile and timing both go in plan order), so a planner
    can grow a plan and ask after each step whether it still fits (`copy` to try a step)."""

    def __init__(self, workers: int, gpus: int = 1, startup_s: float = 10.0,
                 cached: frozenset[CompileKey] = frozenset()) -> None:
        self.workers, self.gpus = workers, gpus
        #: keys compiled by an earlier run into the Triton cache this run keeps: ready at the start
        self.cached = cached
        self.key_done: dict[CompileKey, float] = {}
        self.compile_core_s = 0.0
        self.compile_clock = startup_s  # the pool as one fluid of `workers` cores
        self.free = [(startup_s, gpu) for gpu in range(gpus)]
        heapq.heapify(self.free)
        self.loaded: list[set[CompileKey]] = [set() for _ in range(gpus)]
        self.waits, self.rows = [0.0] * gpus, [0] * gpus
        self.timing_s, self.end, self.problems = 0.0, startup_s, 0

    def add(self, runs: Sequence[PlannedRun]) -> float:
        """Plan one more problem (after every problem added so far); returns when its timing ends."""
        if not runs:
            return self.end
        # Each key looked up once: planners call this for millions of runs, and hashing a key
        # (11 fields) is most of what a lookup costs.
        keys = dict.fromkeys(run.key for run in runs)  # each once, in run order: the compile order
        ready = 0.0  # when the last of the problem's keys is compiled
        for key in keys:
            done = self.key_done.get(key)
            if done is None:
                if key in self.cached:
                    done = 0.0
                else:
                    cost = COMPILE_CORE_S[(key.kernel, key.dtype)]
                    self.compile_core_s += cost
                    self.compile_clock += cost / self.workers
                    done = self.compile_clock
                self.key_done[key] = done
            if done > ready:
                ready = done
        at, gpu = heapq.heappop(self.free)
        start = max(at, ready)
        self.waits[gpu] += start - at
        loaded = len(self.loaded[gpu])
        self.loaded[gpu].update(keys)  # from a dict: its stored hashes, no key hashed again
        seconds = problem_timing_s(runs, len(self.loaded[gpu]) - loaded)
        self.timing_s += seconds
        self.rows[gpu] += len(runs) + 1
        self.problems += 1
        self.end = max(self.end, start + seconds)
        heapq.heappush(self.free, (start + seconds, gpu))
        return start + seconds

    def copy(self) -> Simulation:
        twin = copy.copy(self)
        twin.key_done, twin.free = dict(self.key_done), list(self.free)
        twin.loaded = [set(keys) for keys in self.loaded]
        twin.waits, twin.rows = list(self.waits), list(self.rows)
        return twin

    @property
    def wall_s(self) -> float:
        return self.end

    def result(self) -> Estimate:
        """The estimate so far; its keys are those this run compiles (not the cached ones)."""
        by_dtype: dict[str, int] = {}
        compiled = [key for key in self.key_done if key not in self.cached]
        for key in compiled:
            by_dtype[key.dtype] = by_dtype.get(key.dtype, 0) + 1
        return Estimate(problems=self.problems, rows=sum(self.rows), keys=len(compiled),
                        keys_by_dtype=by_dtype, compile_core_s=self.compile_core_s, timing_s=self.timing_s,
                        wall_s=self.end, gpu_wait_s=list(self.waits), gpu_rows=list(self.rows))


def estimate(planned: Sequence[list[PlannedRun]], workers: int, gpus: int = 1,
             startup_s: float = 10.0) -> Estimate:
    """Simulate collecting `planned` (in this order) with `workers` compile processes and `gpus`
    GPUs. `startup_s`: the pool's and the timing processes' start (imports, CUDA)."""
    simulation = Simulation(workers, gpus, startup_s)
    for runs in planned:
        simulation.add(runs)
    return simulation.result()


def bounded_runs(planned: Sequence[list[PlannedRun]], workers: int, gpus: int = 1, max_seconds: float = 540.0,
                 startup_s: float = 10.0, keep_cache: bool = False, order: str = "reuse") -> list[Estimate]:
    """What each run of a collection bounded at `max_seconds` (data/collect.sh's MAX_SECONDS) collects,
    each resuming where the last one stopped: a run orders the problems left as `bench --order`
    does (`reuse_order`, or "file": as planned) and stops before the first problem it would not
    finish within the bound. Every
    run starts from an empty Triton cache (collect.sh's default), or with `keep_cache` from the
    cache the runs before it filled (a TRITON_CACHE_DIR kept on the machine): then every key the
    compile pool finished before a run's bound, its problem timed or not, is ready in the next.
    A run's estimate counts the kernels its own problems compile; the pool's work ahead, for
    problems the run does not reach, takes no time from them and is not counted.

    Raises:
        ValueError: a problem that no run can finish within `max_seconds`.
    """
    if order not in ("reuse", "file"):
        raise ValueError(f"order: expected 'reuse' or 'file', got {order!r}")
    left = list(planned)
    cached: frozenset[CompileKey] = frozenset()
    out: list[Estimate] = []
    while left:
        ordered = reuse_order(left) if order == "reuse" else left
        simulation = Simulation(workers, gpus, startup_s, cached)
        ends = [simulation.add(runs) for runs in ordered]  # compile runs ahead of timing, as the pool does
        taken = next((i for i, end in enumerate(ends) if end > max_seconds), len(ordered))
        if taken == 0:
            raise ValueError(f"{ordered[0][0].problem}: takes more than the {max_seconds:.0f} s bound of a "
                             "run by itself (compile and timing); raise the bound or drop the problem")
        done = Simulation(workers, gpus, startup_s, cached)
        for runs in ordered[:taken]:
            done.add(runs)
        out.append(done.result())
        if keep_cache:
            cached = cached | {key for key, at in simulation.key_done.items() if at <= max_seconds}
        left = ordered[taken:]
    return out
