"""Which device a dataset's rows were measured on: the one rule of `train` and `evaluate`. A model of
one device neither learns from nor is scored on another device's timings, and a file that mixes devices
needs the device named.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from kernel_select.device import DeviceSpec, get_device, key_for_name
from kernel_select.errors import DatasetError
from kernel_select.offline.data import dataset

log = logging.getLogger(__name__)


def names_of(data_path: str | Path | Sequence[str | Path]) -> str:
    """The dataset files' names joined with "+", for messages and reports."""
    return "+".join(p.name for p in dataset.expand_paths(data_path))


def dataset_device(rows: pd.DataFrame, data_path: str | Path) -> DeviceSpec:
    """The one device the rows were measured on (a file of several devices needs it named)."""
    return device_rows(rows, None, data_path)[0]


def device_rows(rows: pd.DataFrame, device: DeviceSpec | str | None,
                data_path: str | Path | Sequence[str | Path]) -> tuple[DeviceSpec, pd.DataFrame]:
    """The device a model is trained or scored for and its rows: the one rule of `train` and
    `evaluate`. Unnamed (None), the rows must come from one device; named, that device's rows are
    kept and the others left out with a warning (a model of one device neither learns from nor is
    scored on another's timings).

    Raises:
        DatasetError: naming the files, when there are no rows, when rows of several devices come
            without one named, or when none is of the device named.
    """
    where = names_of(data_path)
    by_name = {name: key_for_name(str(name)) for name in rows["device_name"].dropna().unique()}
    keys = sorted(set(by_name.values()))
    if not keys:
        raise DatasetError(f"{where}: no rows to use (an empty split, or no device recorded); measure "
                           "with `kernel-select bench`, or name another split")
    if device is None:
        if len(keys) > 1:
            raise DatasetError(f"{where}: rows come from {len(keys)} devices ({', '.join(keys)}); name one "
                               "(device=, --device) to use its rows only")
        return get_device(keys[0]), rows
    spec = get_device(device)
    mine = rows["device_name"].map(by_name) == spec.key
    if not mine.any():
        raise DatasetError(f"{where}: no rows measured on {spec.key} (the rows come from {', '.join(keys)})")
    if not mine.all():
        log.warning("%s: leaving out %d rows measured on devices other than %s (%s)", where,
                    int((~mine).sum()), spec.key, ", ".join(k for k in keys if k != spec.key))
        rows = rows[mine]
    return spec, rows
