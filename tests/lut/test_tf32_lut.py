"""A LUT's "tf32" list: the entries of float32 GEMMs that run with TF32. A float32 entry never serves a
TF32 GEMM, nor a "tf32" entry one on CUDA cores; the list is read, written and checked like any dtype's.
(The property suite, tests/lut/test_properties.py, draws "tf32" lists and TF32 probes too.)"""

from __future__ import annotations

import json
import logging

import pytest

from kernel_select.errors import LUTError
from kernel_select.lut import check_fits, dump_lut, parse_lut
from kernel_select.device import get_device
from kernel_select.lut.torch_table import to_inductor_table
from kernel_select.problem import Problem

CONFIG = {"block_m": 64, "block_n": 128, "block_k": 32, "num_stages": 3, "num_warps": 4}
OTHER = {"block_m": 128, "block_n": 64, "block_k": 32, "num_stages": 4, "num_warps": 8}
FP32 = Problem(560, 1280, 3420, "float32")
TF32 = Problem(560, 1280, 3420, "float32", tf32=True)


def _table(lists: dict[str, list[dict]]) -> str:
    return json.dumps({"schema_version": 4, "devices": {"h100": {"mm": lists}}})


def _entry(config: dict, note: str) -> dict:
    return {"m": 560, "n": 1280, "k": 3420, "configs": [config], "note": note}


def test_a_float32_entry_serves_only_float32_and_a_tf32_entry_only_tf32():
    only_fp32 = parse_lut(_table({"float32": [_entry(CONFIG, "ieee")]}))
    assert only_fp32.lookup(FP32, "h100") != [] and only_fp32.lookup(TF32, "h100") == []
    only_tf32 = parse_lut(_table({"tf32": [_entry(CONFIG, "tf32")]}))
    assert only_tf32.lookup(TF32, "h100") != [] and only_tf32.lookup(FP32, "h100") == []
    both = parse_lut(_table({"float32": [_entry(CONFIG, "ieee")], "tf32": [_entry(OTHER, "tf32")]}))
    assert both.match(FP32, "h100").note == "ieee" and both.match(TF32, "h100").note == "tf32"


def test_the_tf32_key_is_read_in_any_case_and_written_as_tf32():
    lut = parse_lut(_table({" TF32": [_entry(CONFIG, "tf32")]}))
    assert [row.dtype for row in lut.entries()] == ["tf32"]
    assert '"tf32": [' in dump_lut(lut) and parse_lut(dump_lut(lut)) == lut


def test_two_keys_naming_the_tf32_list_are_refused():
    with pytest.raises(LUTError, match="both name tf32"):
        parse_lut(_table({"tf32": [_entry(CONFIG, "a")], "TF32": [_entry(OTHER, "b")]}))


def test_a_tf32_config_is_checked_with_float32_operands():
    # 128 x 128 x 64 at 4 stages: 131,200 B of shared memory in bf16 fits an H100 block (232,448 B); in
    # float32 it needs 262,272 B, which does not.
    big = {"block_m": 128, "block_n": 128, "block_k": 64, "num_stages": 4, "num_warps": 8}
    h100 = get_device("h100")
    assert check_fits(parse_lut(json.dumps({"schema_version": 4, "devices": {"h100": {"mm": {
        "bfloat16": [_entry(big, "")]}}}})), h100) == 1
    with pytest.raises(LUTError, match=r"devices\.h100\.mm\.tf32 .*shared memory .*float32"):
        check_fits(parse_lut(_table({"tf32": [_entry(big, "")]})), h100)


def test_the_torch_table_export_leaves_tf32_entries_out_with_a_warning(caplog: pytest.LogCaptureFixture):
    lut = parse_lut(_table({"float32": [_entry(CONFIG, "ieee")], "tf32": [_entry(OTHER, "tf32")]}))
    with caplog.at_level(logging.WARNING):
        table = to_inductor_table(lut, "NVIDIA H100 80GB HBM3")
    assert len(table) == 1  # the float32 entry's key only
    assert any("TF32" in record.getMessage() for record in caplog.records)
