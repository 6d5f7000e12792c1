"""The kernel lookup table: a versioned, hand-editable JSON file of configs pinned per problem."""

from kernel_select.lut.io import (
    BATCHED_OPS,
    MAX_DIM,
    SCHEMA_VERSION,
    BatchedLUTEntry,
    KernelLUT,
    LUTEntry,
    LUTRow,
    MRange,
    OpTables,
    dump_lut,
    empty_lut,
    json_schema,
    load_lut,
    migrate,
    parse_lut,
    save_lut,
)

__all__ = [
    "BATCHED_OPS", "MAX_DIM", "SCHEMA_VERSION", "BatchedLUTEntry", "KernelLUT", "LUTEntry", "LUTRow", "MRange",
    "OpTables", "dump_lut", "empty_lut", "json_schema", "load_lut", "migrate", "parse_lut", "save_lut",
]
