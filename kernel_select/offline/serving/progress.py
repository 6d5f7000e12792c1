"""pretune's progress file, `<out>.progress.json`: the measurements of a run so far, by problem and
candidates, so that a rerun writing the same LUT resumes instead of measuring again. pretune rewrites it
atomically after each measurement; here it is named and read back, checked, so a torn or foreign file
is one line naming it rather than a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernel_select.errors import KernelSelectError, first_line
from kernel_select.offline.serving.crossovers import Timings


def progress_path(out: str | Path) -> Path:
    """Where pretune keeps the measurements of a run writing the LUT `out`."""
    out = Path(out)
    return out.with_name(out.name + ".progress.json")


def load_progress(path: Path) -> dict[str, Timings]:
    """The measurements of an earlier run kept at `path` ({} when there is none).

    Raises:
        KernelSelectError: one line naming the file, when it is not readable or not pretune's
            measurements (move it aside or delete it to measure again).
    """
    if not path.exists():
        return {}
    fix = "move it aside, or delete it to measure again"
    try:
        done = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise KernelSelectError(f"{path}: pretune's progress file cannot be read ({first_line(exc)}); "
                                f"{fix}") from None
    if not isinstance(done, dict):
        raise KernelSelectError(f"{path}: pretune's progress file holds {type(done).__name__}, not an "
                                f"object of measurements; {fix}")
    for key, timings in done.items():
        if not (isinstance(timings, dict) and all(
                isinstance(label, str) and isinstance(ms, (int, float)) and not isinstance(ms, bool)
                for label, ms in timings.items())):
            raise KernelSelectError(f"{path}: pretune's progress file: entry {key!r} is not a "
                                    f"{{choice: milliseconds}} object; {fix}")
    return done
