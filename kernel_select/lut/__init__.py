"""The kernel lookup table: a versioned, hand-editable JSON file of configs pinned per problem.

    schema      the document's models, schema version, lookup and merge
    entries     one entry (a problem key: m, n, k, m and k exact or ranges) and the no-overlap rule
    validation  raw document -> KernelLUT, with one-line errors that name the JSON location
    io          bounded reads, parse, migrate, canonical dump, atomic save, file digest
    hardware    whether a config can run on a device (shared memory, registers, threads)
    autotune_log, torch_table   converters from Inductor's AUTOTUNE log and lookup_table format
"""

from kernel_select.lut.entries import (ATEN, BATCHED_OPS, MAX_DIM, BatchedLUTEntry, LUTEntry, LUTHit, MRange,
                                      SizeRange)
from kernel_select.lut.hardware import check_fits, unfit_reason
from kernel_select.lut.bounded_read import MAX_LUT_BYTES
from kernel_select.lut.io import (
    dump_lut,
    load_lut,
    lut_digest,
    migrate,
    parse_lut,
    read_lut_bytes,
    save_lut,
)
from kernel_select.lut.schema import SCHEMA_VERSION, KernelLUT, LUTRow, OpTables, empty_lut, json_schema
from kernel_select.lut.validation import lut_from_rows, merge_luts

__all__ = [
    "ATEN", "BATCHED_OPS", "MAX_DIM", "MAX_LUT_BYTES", "SCHEMA_VERSION", "BatchedLUTEntry", "KernelLUT",
    "LUTEntry", "LUTHit", "LUTRow", "MRange", "OpTables", "SizeRange", "check_fits", "dump_lut", "empty_lut",
    "json_schema", "load_lut", "lut_digest", "lut_from_rows", "merge_luts", "migrate", "parse_lut",
    "read_lut_bytes", "save_lut",
    "unfit_reason",
]
