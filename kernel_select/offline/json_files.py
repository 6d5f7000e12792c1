"""JSON files of the offline tools: shapes files they read, result files they write.

Reading goes through the package's one bounded reader (`kernel_select.lut.bounded_read.read_bounded`): a
regular file of at most its kind's size cap, strict JSON nested at most MAX_JSON_DEPTH deep, and a
DatasetError naming the file otherwise.

The comparison and fidelity tools rewrite their result file after every measurement, so a run
stopped part-way keeps what it measured and `--resume` continues from it. That only works if a
reader never sees half a file and a crash never leaves a truncated one: write a unique temporary
file beside the target, fsync it, and rename it over the target.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernel_select.atomic_write import write_atomic
from kernel_select.errors import DatasetError
from kernel_select.lut.bounded_read import FileKind, read_json

#: Largest shapes file read, in bytes (64 MiB): ~210 bytes a problem (data/shapes_coverage.json:
#: 858 kB for 4,000 problems), so ~320,000 problems.
MAX_SHAPES_BYTES = 64 * 1024 * 1024
#: Largest result file read, in bytes (64 MiB); the largest committed one,
#: results/models_h100.json, is 2.6 MB.
MAX_RESULTS_BYTES = 64 * 1024 * 1024

SHAPES_FILE = FileKind("shapes", "a shapes JSON file (a list of {m, n, k, dtype} objects)", MAX_SHAPES_BYTES,
                       "kernel_select.offline.json_files.MAX_SHAPES_BYTES", error=DatasetError)
RESULTS_FILE = FileKind("results", "a JSON results file", MAX_RESULTS_BYTES,
                        "kernel_select.offline.json_files.MAX_RESULTS_BYTES", error=DatasetError)


def write_json_atomic(data: Any, path: str | Path) -> None:
    """Write `data` as strict JSON (no NaN or inf) to `path`, atomically and durably."""
    target = Path(path)
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"  # fails before touching the disk
    write_atomic(target, text)


def read_json_file(path: str | Path, what: str, kind: FileKind = RESULTS_FILE) -> Any:
    """The parsed content of a JSON file of `kind`; a DatasetError naming the file and `what` it
    should hold when it is missing, not a regular file, over the size cap or not strict JSON."""
    return read_json(path, replace(kind, noun=f"the {what} file"))
