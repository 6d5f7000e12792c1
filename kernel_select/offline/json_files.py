"""Result files of the offline tools (comparison, fidelity): strict JSON, written atomically.

Both tools rewrite their file after every measurement, so a run stopped part-way keeps what it
measured and `--resume` continues from it. That only works if a reader never sees half a file and
a crash never leaves a truncated one: write a unique temporary file beside the target, fsync it,
and rename it over the target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernel_select.atomic_write import write_atomic
from kernel_select.errors import DatasetError


def write_json_atomic(data: Any, path: str | Path) -> None:
    """Write `data` as strict JSON (no NaN or inf) to `path`, atomically and durably."""
    target = Path(path)
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"  # fails before touching the disk
    write_atomic(target, text)


def read_json_file(path: str | Path, what: str) -> Any:
    """The parsed content of a JSON file; a DatasetError naming the file and `what` it should hold
    when it cannot be read or is not JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not the {what}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
