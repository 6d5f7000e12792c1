"""The configs' fields as float64 columns, read once per config object rather than once per call.

Reading six fields of 1,206 pydantic configs costs about 0.4 ms on one core, a fifth of the 2 ms
budget of `estimate`, while the configs repeat: `space.for_problem` hands out the same cached
GemmConfig objects for every problem of a size class. So the fields of every config object seen
are kept in a table indexed by `id(config)`, and a call only looks its configs up (about 0.1 ms
for 1,206) and takes their columns.

An id names an object only while it lives, so the table holds a reference to every config it
indexes: an indexed id cannot pass to another object. GemmConfig is frozen, so a config's fields
never change. The table is bounded: past `max_configs` it starts over with a new one. New configs
are appended under a lock, their columns written before their ids enter the index, so a thread
compiling beside another finds a config either complete or not at all (a miss, which takes the
lock and waits).
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kernel_select.configs import GemmConfig

FIELDS = ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m")
#: About 13 exhaustive spaces, the size classes of a compile several times over. 16,384 configs
#: take ~17 MB, mostly objects the space's own cache (`space._space`) holds for their size class.
MAX_CONFIGS = 1 << 14


class _Table(NamedTuple):
    index: dict[int, int]  # id(config) -> its column in `columns`
    columns: np.ndarray  # (len(FIELDS), capacity) float64; the first len(configs) columns are filled
    configs: list[GemmConfig]  # keeps every indexed config alive, so its id stays its own

    @classmethod
    def empty(cls, capacity: int) -> _Table:
        return cls({}, np.empty((len(FIELDS), capacity)), [])


class ConfigColumns:
    """`columns(configs)`: (len(FIELDS), len(configs)) float64, one row per field of FIELDS."""

    def __init__(self, max_configs: int = MAX_CONFIGS) -> None:
        self.max_configs = max_configs
        self._table = _Table.empty(0)
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
        # A config listed twice while unseen gets two columns with the same fields: harmless.
        with self._lock:
            table = self._table
            unseen = [c for c in configs if id(c) not in table.index]
            start = len(table.configs)
            if start + len(unseen) > table.columns.shape[1]:  # full (or not yet allocated): a new table
                table, unseen, start = _Table.empty(max(self.max_configs, len(configs))), list(configs), 0
            stop = start + len(unseen)
            table.columns[:, start:stop] = read_columns(unseen)
            table.configs.extend(unseen)
            table.index.update(zip(map(id, unseen), range(start, stop)))  # last: now visible
            self._table = table
        if len(unseen) == len(configs):  # all new (the first call for a space): in order
            return table, np.arange(start, stop)
        return table, np.fromiter(map(table.index.__getitem__, map(id, configs)), np.intp, len(configs))


def read_columns(configs: Sequence[GemmConfig]) -> np.ndarray:
    """The fields of `configs` read afresh, as `ConfigColumns` returns them."""
    # pydantic attribute access costs ~50 ns a field; reading the instance dicts is several times faster
    dicts = [c.__dict__ for c in configs]
    out = np.empty((len(FIELDS), len(dicts)))
    for row, field in zip(out, FIELDS):
        row[:] = np.fromiter(map(operator.itemgetter(field), dicts), np.float64, len(dicts))
    return out
