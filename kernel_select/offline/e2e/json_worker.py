"""A `compare-models` worker process, both sides: the parent runs `python -m MODULE SPEC RESULT`
with fresh Inductor and Triton caches and reads back one JSON result; the worker's `main`
reads the spec, does its one job and writes the result, an error included, so the comparison
goes on whatever a worker meets. The measurement worker (`model_worker`) and the pretune worker
(`model_pretune`) share it."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernel_select.offline.fresh_process import fresh_cache_env

log = logging.getLogger(__name__)


def run_worker(module: str, spec: dict[str, Any], log_path: Path, timeout_s: float) -> dict[str, Any]:
    """Run `python -m module` on `spec` in a process with empty Inductor and Triton caches, its
    output in `log_path`; returns its result, or {"error": ...} when it timed out or wrote none.

    The worker runs in a session of its own, and that whole process group (Inductor's compile
    workers included, which would otherwise go on writing into the cache folder) is killed when
    the run ends, times out or is interrupted; then the temporary folder is removed, so an
    interrupted comparison leaves no `kernel-select-models-*` folder behind."""
    with tempfile.TemporaryDirectory(prefix="kernel-select-models-", ignore_cleanup_errors=True) as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(json.dumps(spec))
        command = [sys.executable, "-m", module, str(spec_path), str(result_path)]
        with open(log_path, "w") as log_file:
            process = subprocess.Popen(command, env=fresh_cache_env(tmp), stdout=log_file,
                                       stderr=subprocess.STDOUT, start_new_session=True)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return {"error": f"timed out after {timeout_s:.0f} s; see {log_path}"}
            finally:
                kill_group(process)
        if not result_path.exists():
            return {"error": f"the worker stopped without a result; see {log_path}"}
        return json.loads(result_path.read_text())


def kill_group(process: subprocess.Popen) -> None:
    """Kill the process group `process` leads (started with start_new_session) and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # every member has exited already
        pass
    process.wait()


def worker_main(argv: Sequence[str], module: str, work: Callable[[dict[str, Any]], dict[str, Any]],
                setup: Callable[[], None] = lambda: None) -> int:
    """The body of a worker's `main`: `work(spec)` becomes the result file; an exception becomes
    {"error": "Type: message"} there (with the traceback in the log). `setup` runs after logging
    is configured."""
    if len(argv) != 2:
        print(f"usage: python -m {module} SPEC.json RESULT.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    setup()
    spec = json.loads(Path(argv[0]).read_text())
    try:
        result = work(spec)
    except Exception as exc:  # noqa: BLE001 -- report it in the results; the driver goes on
        log.exception("%s failed on %s", module, json.dumps(spec))
        result = {"error": f"{type(exc).__name__}: {exc}"}
    Path(argv[1]).write_text(json.dumps(result))
    return 0
