"""`kernel-select compare`: stock max-autotune against the top-k handler, through real torch.compile.

For every problem of a suite and every method -- eager `torch.mm`, stock max-autotune (DEFAULT
search space), the kernel_select handler at each k, and optionally stock EXHAUSTIVE -- compile
`torch.mm(a, b)` with mode "max-autotune-no-cudagraphs" and record:
  tuning_s   wall time of the first call of the compiled function (Dynamo + Inductor + autotuning)
  kernel_ms  median time of the compiled function per call, captured in a CUDA graph and replayed
             back to back while rotating over enough input copies to exceed twice the L2 cache,
             so no call finds its operands in L2 (memory-bound problems are not flattered)
  eager_ms   eager `torch.mm` (cuBLAS) timed the same way in the same process, its samples
             interleaved with kernel_ms's: speedups and "slower than eager" compare these two, so
             clock and thermal drift between worker processes cannot masquerade as a speedup
  choice     which kernel Inductor's autotuner found fastest (a Triton config or "aten mm" = cuBLAS)

Every method runs in its own Python process with fresh, empty TORCHINDUCTOR_CACHE_DIR and
TRITON_CACHE_DIR, and compiles the suite's problems one after another (torch._dynamo.reset()
between them), as a user's process compiling a model would. Two methods never share a process:
a compile would reuse what an earlier one left behind (Triton binaries of configs both methods
benchmark, Inductor's in-memory autotuning and codegen caches, the thread-local handler) and bill
the first method for work the later ones get for free. Within a method every problem has a
distinct shape, so nothing is reused. Each worker first compiles an unrelated elementwise kernel
so that one-time start-up (imports, CUDA context, the compile-worker pool) is not counted in any
problem's tuning time. `--resume` keeps the measurements of an earlier run and adds the rest.

Results go to <out>/compare_<device>.json (schema in `results`) and a trade-off plot
<out>/compare_<device>.png (needs matplotlib); `summarize`/`format_summary` make the table the
CLI prints (kernel time against stock with a 95% paired-bootstrap interval over the problems), and
`summary_record` the same as the JSON's "summary". Only `run_compare` and the worker need a GPU;
everything else is plain Python.

Modules: `suite` (problems and methods), `driver` (one worker process per method), `worker` and
`timing` (the GPU side), `results` (the file's schema, migration of older versions, validation),
`summary` and `plot` (what the CLI prints and the notebook shows).
"""

from kernel_select.offline.compare.driver import run_compare
from kernel_select.offline.compare.plot import plot_tradeoff
from kernel_select.offline.compare.results import (
    METHOD_FIELDS,
    RESULTS_KIND,
    SCHEMA_VERSION,
    load_results,
    migrate_results,
    new_results,
    validate_results,
    write_results,
)
from kernel_select.offline.compare.suite import (
    DEFAULT_TOPKS,
    Case,
    Method,
    default_suite_path,
    load_cases,
    methods_for,
    parse_topks,
)
from kernel_select.offline.compare.summary import (
    SLOWER_THAN_EAGER,
    MethodSummary,
    Summary,
    format_summary,
    problem_frame,
    summarize,
    summary_frame,
    summary_record,
)
from kernel_select.offline.compare.timing import MAX_INPUT_COPIES, input_copies

__all__ = [
    "DEFAULT_TOPKS", "MAX_INPUT_COPIES", "METHOD_FIELDS", "RESULTS_KIND", "SCHEMA_VERSION",
    "SLOWER_THAN_EAGER", "Case", "Method", "MethodSummary", "Summary", "default_suite_path",
    "format_summary", "input_copies", "load_cases", "load_results", "methods_for", "migrate_results",
    "new_results", "parse_topks", "plot_tradeoff", "problem_frame", "run_compare", "summarize",
    "summary_frame", "summary_record", "validate_results", "write_results",
]
