"""The configs' fields as float64 columns, read once per config object rather than once per call.

Reading six fields of 1,206 pydantic configs costs about 0.4 ms on one core, a fifth of the 2 ms
budget of `estimate`, while the configs repeat: `space.for_problem` hands out the same cached
GemmConfig objects for every problem of a size class. So the fields of every config object seen
are kept in a table indexed by `id(config)`, and a call only looks its configs up (about 0.1 ms
for 1,206) and takes their columns.

An id names an object only while it lives, so the table holds a reference to every config it
indexes: an indexed id cannot pass to another object. GemmConfig is frozen, so a config's fields
never change. The table is bounded (it starts over past `max_configs`), and each state is published
as one immutable snapshot, so a thread compiling beside another never reads a half-built table.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kernel_select.configs import GemmConfig

FIELDS = ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m")
#: About 50 exhaustive spaces: a few MB, far more than one process's distinct GEMM sizes need.
MAX_CONFIGS = 1 << 16


class _Table(NamedTuple):
    index: dict[int, int]  # id(config) -> its column in `columns`
    columns: np.ndarray  # (len(FIELDS), indexed configs), float64
    configs: list[GemmConfig]  # keeps every indexed config alive, so its id stays its own


class ConfigColumns:
    """`columns(configs)`: (len(FIELDS), len(configs)) float64, one row per field of FIELDS."""

    def __init__(self, max_configs: int = MAX_CONFIGS) -> None:
        self.max_configs = max_configs
        self._table = _Table({}, np.empty((len(FIELDS), 0)), [])
        self._lock = threading.Lock()

    def __call__(self, configs: Sequence[GemmConfig]) -> np.ndarray:
        table = self._table  # one snapshot for the whole call
        try:
            where = np.fromiter(map(table.index.__getitem__, map(id, configs)), np.intp, len(configs))
        except KeyError:
            table, where = self._add(configs)
        return table.columns[:, where]

    def __len__(self) -> int:
        """How many config objects the table indexes."""
        return len(self._table.configs)

    def _add(self, configs: Sequence[GemmConfig]) -> tuple[_Table, np.ndarray]:
        with self._lock:
            table = self._table
            unseen = list({id(c): c for c in configs if id(c) not in table.index}.values())
            if len(table.configs) + len(unseen) > self.max_configs:
                table = _Table({}, np.empty((len(FIELDS), 0)), [])
                unseen = list({id(c): c for c in configs}.values())
            start = len(table.configs)
            index = {**table.index, **{id(c): start + i for i, c in enumerate(unseen)}}
            columns = np.concatenate([table.columns, read_columns(unseen)], axis=1)
            self._table = table = _Table(index, columns, table.configs + unseen)
        where = np.fromiter(map(table.index.__getitem__, map(id, configs)), np.intp, len(configs))
        return table, where


def read_columns(configs: Sequence[GemmConfig]) -> np.ndarray:
    """The fields of `configs` read afresh, as `ConfigColumns` returns them."""
    # pydantic attribute access costs ~50 ns a field; reading the instance dicts is several times faster
    dicts = [c.__dict__ for c in configs]
    out = np.empty((len(FIELDS), len(dicts)))
    for row, field in zip(out, FIELDS):
        row[:] = np.fromiter(map(operator.itemgetter(field), dicts), np.float64, len(dicts))
    return out
