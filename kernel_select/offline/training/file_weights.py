"""`train --weight PATTERN=FACTOR`: the training problems of some dataset files weigh FACTOR times
those of the others in the MLP's loss.

A fine-tune on every H200 file drowns the few hundred problems timed with the sizes compiled in
(data/h200_literal.parquet) among ~645k rows of the other files; weighing them up keeps the rest
of the data while the ranking learns theirs. A problem weighs the factor of the file its rows were
read from: where several files measured it, the one `dataset.read_many` keeps (literal-size rows
replace shared-binary ones whatever the order), so the rows trained on and their weight agree. Only
the MLP's `train` split is weighted (fit_loop.step_weights); `val`, the cuBLAS head and gate are not.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import os
from collections.abc import Mapping, Sequence
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_select.errors import OptionError

log = logging.getLogger(__name__)

_KEY = ["problem_id", "device_name"]


def file_factors(paths: Sequence[Path], weights: Mapping[str | Path, float] | None) -> dict[Path, float]:
    """The files of `paths` (the dataset files, expanded) that a pattern of `weights` names, each with
    its factor; {} without weights. The other files weigh 1.

    Raises:
        OptionError: a factor that is not a finite number > 0, a pattern naming none of `paths`, or a
            file that patterns of different factors name.
    """
    chosen: dict[Path, float] = {}
    by: dict[Path, str] = {}
    for pattern, factor in (weights or {}).items():
        pattern = str(pattern)
        if isinstance(factor, bool) or not isinstance(factor, Real) or not 0 < factor < math.inf:
            raise OptionError(f"weight {pattern}: expected a factor that is a finite number > 0, got "
                              f"{factor!r}")
        named = [path for path in paths if names(pattern, path)]
        if not named:
            raise OptionError(f"weight {pattern}={factor:g}: the pattern names none of the dataset files "
                              f"({', '.join(map(str, paths))})")
        for path in named:
            if path in chosen and chosen[path] != factor:
                raise OptionError(f"weight: {path} is named by {by[path]}={chosen[path]:g} and by "
                                  f"{pattern}={factor:g}; give each file one factor")
            chosen[path], by[path] = float(factor), pattern
    return chosen


def names(pattern: str, path: Path) -> bool:
    """Whether `pattern` (a path or glob) names the dataset file `path`: as --data expanded it, as an
    absolute path (`./data/x.parquet` names `data/x.parquet`), or by its file name for a pattern
    without a folder (`h200_literal.parquet`, `*literal*`). Case counts, as it does for --data's globs."""
    if fnmatch.fnmatchcase(str(path), pattern):
        return True
    if fnmatch.fnmatchcase(os.path.abspath(path), os.path.abspath(pattern)):
        return True
    return "/" not in pattern and os.sep not in pattern and fnmatch.fnmatchcase(path.name, pattern)


def problem_files(frame: pd.DataFrame, source: np.ndarray) -> pd.DataFrame:
    """(problem_id, device_name, file) per problem of `frame`, `file` the position of the file its rows
    were read from (`source`, from dataset.read_many_with_sources: one file per problem and device).
    Taken before any row is filtered out, which `source` would no longer line up with."""
    return frame[_KEY].assign(file=source).drop_duplicates(_KEY)


def row_weights(rows: pd.DataFrame, origin: pd.DataFrame, paths: Sequence[Path],
                factors: Mapping[Path, float]) -> tuple[np.ndarray, dict[str, dict[str, Any]]]:
    """Per row of `rows` (training rows of the frame `origin` was taken from), the factor of its file;
    and what the model card records: per weighted file, its factor and the train problems it brought."""
    files = rows[_KEY].merge(origin, on=_KEY, how="left", validate="many_to_one")["file"].to_numpy()
    factor = np.ones(len(paths))
    for path, value in factors.items():
        factor[list(paths).index(path)] = value
    train = (rows["split"] == "train").to_numpy()
    record = {}
    for path, value in factors.items():
        mine = train & (files == list(paths).index(path))
        problems = int(rows.loc[mine, "problem_id"].nunique())
        if problems == 0:
            log.warning("weight %s=%g: no train problem is read from that file (another file's rows "
                        "replace its problems, or it has none in 'train'); the weight changes nothing",
                        path, value)
        record[path.name] = {"factor": value, "train_problems": problems}
    return factor[files], record
