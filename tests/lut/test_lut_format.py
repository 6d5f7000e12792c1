"""The LUT format: what a hand-edited file may contain, what errors say, lookup and merge."""

from __future__ import annotations

import copy
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_select.lut import io as lut_module, lut_from_rows, merge_luts
from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.errors import DeviceError, LUTError
from kernel_select.lut import (
    BatchedLUTEntry,
    LUTEntry,
    LUTRow,
    MRange,
    dump_lut,
    empty_lut,
    json_schema,
    load_lut,
    parse_lut,
    save_lut,
)
from kernel_select.problem import Problem

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "luts" / "h100_seed.json"
SCHEMA = ROOT / "luts" / "schema" / "lut.v4.schema.json"


def cfg(bm: int, bn: int, bk: int, stages: int, warps: int, group_m: int = 8) -> GemmConfig:
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_stages=stages, num_warps=warps, group_m=group_m)


def doc(*entries: dict, op: str = "mm", dtype: str = "bfloat16", device: str = "h100") -> dict:
    return {"schema_version": 4, "devices": {device: {op: {dtype: list(entries)}}}}


def entry(m: object = 560, n: int = 1280, k: int = 3420, **extra: object) -> dict:
    configs = [{"block_m": 64, "block_n": 128, "block_k": 64, "num_stages": 3, "num_warps": 4}]
    return {"m": m, "n": n, "k": k, "configs": configs, **extra}


# -- the seed table ------------------------------------------------------------------------------

def test_seed_lut_holds_the_measured_best_and_is_canonical():
    from kernel_select.offline.data import dataset, problem_ids

    seed = load_lut(SEED)
    assert SEED.read_text() == dump_lut(seed)
    data = dataset.read(ROOT / "data" / "h100.parquet")
    for m in (560, 1024, 2048):
        rows = data[(data.problem_id == problem_ids.problem_id(m, 1280, 3420, "bfloat16"))
                    & (data.backend == "triton")].sort_values("runtime_ms")
        measured = [cfg(*(int(v) for v in r)) for r in
                    rows[["block_m", "block_n", "block_k", "num_stages", "num_warps"]].head(2).to_numpy()]
        assert seed.lookup(Problem(m, 1280, 3420, "bfloat16"), "h100") == measured
    assert seed.lookup(Problem(561, 1280, 3420, "bfloat16"), "h100") == []
    assert seed.lookup(Problem(560, 1280, 3420, "float16"), "h100") == []
    assert seed.lookup(Problem(560, 1280, 3420, "bfloat16", op="addmm"), "h100") == []
    assert all("measured best two" in row.entry.note for row in seed.entries())


def test_committed_schema_matches_the_models():
    # Regenerate with: kernel-select lut schema --out luts/schema/lut.v4.schema.json
    assert SCHEMA.read_text() == json_schema()


# -- devices and lookup --------------------------------------------------------------------------

def test_device_names_are_normalized_in_files_and_lookups():
    table = parse_lut(json.dumps(doc(entry(), device="NVIDIA H100 80GB HBM3")))
    assert list(table.devices) == ["h100"]
    problem = Problem(560, 1280, 3420)
    expected = [cfg(64, 128, 64, 3, 4)]
    assert table.lookup(problem, "h100") == expected
    assert table.lookup(problem, "NVIDIA H100 80GB HBM3") == expected
    assert table.lookup(problem, get_device("h100")) == expected
    assert table.lookup(problem, "h200") == []
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        table.lookup(problem, "tpu")


def test_m_range_serves_every_m_inside_it_inclusive():
    table = parse_lut(json.dumps(doc(entry(m={"min": 1, "max": 512}), entry(m=513))))
    assert table.lookup(Problem(1, 1280, 3420), "h100") == [cfg(64, 128, 64, 3, 4)]
    assert table.lookup(Problem(512, 1280, 3420), "h100") == [cfg(64, 128, 64, 3, 4)]
    assert table.lookup(Problem(513, 1280, 3420), "h100") == [cfg(64, 128, 64, 3, 4)]
    assert table.lookup(Problem(514, 1280, 3420), "h100") == []


def test_configs_keep_their_order_and_group_m_defaults_to_8():
    configs = [{"block_m": 128, "block_n": 64, "block_k": 32, "num_stages": 2, "num_warps": 8},
               {"block_m": 16, "block_n": 32, "block_k": 64, "num_stages": 5, "num_warps": 2, "group_m": 4}]
    table = parse_lut(json.dumps(doc({"m": 7, "n": 8, "k": 9, "configs": configs})))
    expected = [cfg(128, 64, 32, 2, 8), cfg(16, 32, 64, 5, 2, group_m=4)]
    assert table.lookup(Problem(7, 8, 9), "h100") == expected


def test_bmm_entries_match_their_batch_or_any_batch():
    text = json.dumps(doc(entry(m=64, batch=4), entry(m=64, n=1, batch=8), entry(m=64, n=1280, batch=2),
                          op="bmm"))
    table = parse_lut(text)
    assert table.lookup(Problem(64, 1280, 3420, batch=4, op="bmm"), "h100")
    assert table.lookup(Problem(64, 1280, 3420, batch=2, op="bmm"), "h100")
    assert table.lookup(Problem(64, 1280, 3420, batch=3, op="bmm"), "h100") == []
    any_batch = parse_lut(json.dumps(doc(entry(m=64), op="baddbmm")))
    assert any_batch.lookup(Problem(64, 1280, 3420, batch=17, op="baddbmm"), "h100")


# -- strict errors name file, location and fix ---------------------------------------------------

def _set(path: tuple, value: object):
    def mutate(d: dict) -> None:
        target = d
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return mutate


E0 = ("devices", "h100", "mm", "bfloat16", 0)
BAD_DOCUMENTS = [
    (_set(E0 + ("configs", 0, "block_m"), 96),
     "devices.h100.mm.bfloat16[0].configs[0].block_m: must be a power of two"),
    (_set(E0 + ("configs", 0, "num_warp"), 4),
     "configs[0].num_warp: Extra inputs are not permitted (unknown field 'num_warp'; allowed: block_m"),
    (_set(E0 + ("n",), 0),
     "devices.h100.mm.bfloat16[0].n: Input should be greater than or equal to 1, got 0"),
    (_set(E0 + ("k",), -5), "[0].k: Input should be greater than or equal to 1, got -5"),
    (_set(E0 + ("k",), 10**40), "[0].k: Input should be less than or equal to 2147483647"),
    (_set(E0 + ("m",), "560"), "[0].m: Input should be a valid integer, got '560'"),
    (_set(E0 + ("m",), 560.0), "[0].m: Input should be a valid integer, got 560.0"),
    (_set(E0 + ("m",), True), "[0].m: Input should be a valid integer, got True"),
    (_set(E0 + ("m",), {"min": 9, "max": 3}), "[0].m: min (9) is larger than max (3); swap them"),
    (_set(E0 + ("m",), {"min": 1}), "[0].m.max: Field required (add it)"),
    (_set(E0 + ("configs",), []), "[0].configs: List should have at least 1 item"),
    (_set(E0 + ("batch",), 2), "[0].batch: Extra inputs are not permitted (unknown field 'batch'"),
    (_set(("devices", "h100", "mm", "int8"), []),
     "devices.h100.mm.int8 (the key): Input should be 'float16', 'bfloat16', 'float32' or 'tf32'"),
    (_set(("devices", "h100", "matmul"), {}),
     "devices.h100.matmul: Extra inputs are not permitted "
     "(unknown field 'matmul'; allowed: mm, addmm, bmm, baddbmm"),
    (_set(("devices", "tpu-v5"), {}),
     "devices.tpu-v5 (the key): unknown device 'tpu-v5'; use one of h100, h100-pcie, h200, a100"),
    (_set(("devices", "NVIDIA H100 80GB HBM3"), {}),
     "devices: 'h100' and 'NVIDIA H100 80GB HBM3' both name device 'h100'"),
    (_set(("schema_version",), 5), "schema_version: 5 was written by a newer kernel_select"),
    (_set(("schema_version",), 0), "schema_version: unknown version 0"),
    (_set(("schema_version",), "1"), "schema_version: expected an integer, got '1'"),
    (lambda d: d.pop("schema_version"), 'schema_version: missing; add "schema_version": 4'),
    (_set(("comment",), "x"),
     "comment: Extra inputs are not permitted (unknown field 'comment'; allowed: schema_version, devices"),
]


@pytest.mark.parametrize("mutate,message", BAD_DOCUMENTS)
def test_invalid_documents_name_the_location_and_fix(mutate, message):
    bad = doc(entry())
    mutate(bad)
    with pytest.raises(LUTError) as info:
        parse_lut(json.dumps(bad), source="luts/mine.json")
    assert str(info.value).startswith("luts/mine.json: ")
    assert message in str(info.value)


def test_overlapping_problem_keys_are_rejected_but_neighbours_are_not():
    with pytest.raises(LUTError, match=r"devices\.h100\.mm\.bfloat16: entries \[0\] \(m=1\.\.600 n=1280 "
                                       r"k=3420\) and \[1\] \(m=560 n=1280 k=3420\) overlap"):
        parse_lut(json.dumps(doc(entry(m={"min": 1, "max": 600}), entry(m=560))))
    with pytest.raises(LUTError, match="overlap"):
        parse_lut(json.dumps(doc(entry(m=560), entry(m=560))))
    with pytest.raises(LUTError, match="batch=4.*overlap|overlap"):
        parse_lut(json.dumps(doc(entry(m=5), entry(m=5, batch=4), op="bmm")))
    # Adjacent ranges, other (n, k), other batches and other dtypes do not collide.
    parse_lut(json.dumps(doc(entry(m={"min": 1, "max": 559}), entry(m=560), entry(m=560, n=1))))
    parse_lut(json.dumps(doc(entry(m=5, batch=2), entry(m=5, batch=4), op="bmm")))


def test_duplicate_configs_in_one_entry_are_rejected():
    twice = entry()
    twice["configs"] = twice["configs"] * 2
    with pytest.raises(LUTError,
                       match=r"\[0\]\.configs: configs \[0\] and \[1\] are the same \(64x128x64 s3 w4\)"):
        parse_lut(json.dumps(doc(twice)))


@pytest.mark.parametrize("text,message", [
    ('{"schema_version": 1, "schema_version": 1, "devices": {}}',
     "<top level>: duplicate key 'schema_version'"),
    ('{"schema_version": 1, "devices": {"h100": {"mm": {"bfloat16": [{"m": 1, "m": 2}]}}}}',
     "devices.h100.mm.bfloat16[0]: duplicate key 'm'"),
    ('{"schema_version": 1, "devices": {', "line 1 column 35: invalid JSON"),
    (b'{"schema_version": 1, "devices": {"\xff": {}}}', "byte 35: not valid UTF-8"),
    ('{"schema_version": NaN, "devices": {}}', "NaN is not a number JSON allows"),
    ('{"schema_version": 1, "devices": {}, "x": ' + "9" * 5000 + "}", "a number has too many digits"),
    ("[" * 50000 + "]" * 50000, "invalid JSON"),
    ("[]", "expected a JSON object"),
    ('{"((torch.bfloat16, [1, 2], [2, 1]), (torch.bfloat16, [2, 3], [3, 1]))+mm": []}',
     "looks like a torch._inductor lookup_table"),
])
def test_unreadable_text_is_a_lut_error(text, message):
    with pytest.raises(LUTError, match="^x.json: ") as info:
        parse_lut(text, source="x.json")
    assert message in str(info.value)


def test_utf8_bom_and_unicode_notes_are_accepted():
    text = json.dumps(doc(entry(note="gemessen auf H100 – schneller")), ensure_ascii=False)
    table = parse_lut(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert "– schneller" in dump_lut(table)


# -- strict and lenient loading ------------------------------------------------------------------

def test_missing_file_strict_names_the_path(tmp_path):
    with pytest.raises(LUTError, match=f"^{tmp_path}/nope.json: no such LUT file"):
        load_lut(tmp_path / "nope.json")
    with pytest.raises(LUTError, match="is a directory, not a regular file"):
        load_lut(tmp_path)


@pytest.mark.parametrize("content", [None, b"{", b'{"schema_version": 5, "devices": {}}', b"\xff\xfe"])
def test_lenient_loading_logs_one_warning_and_returns_an_empty_table(tmp_path, caplog, content):
    path = tmp_path / "lut.json"
    if content is not None:
        path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="kernel_select.lut"):
        table = load_lut(path, strict=False)
    assert table == empty_lut()
    assert table.lookup(Problem(560, 1280, 3420), "h100") == []
    assert len(caplog.records) == 1
    assert str(path) in caplog.records[0].getMessage()


@pytest.mark.parametrize("path", [None, 3.5, b"lut.json"])
def test_a_value_that_is_not_a_path_is_a_lut_error_or_in_lenient_mode_an_empty_table(caplog, path):
    # issue 43: load_lut(None, strict=False) raised TypeError though documented never to raise
    with pytest.raises(LUTError, match="not a path; pass the path of a LUT JSON file"):
        load_lut(path)
    with caplog.at_level(logging.WARNING, logger="kernel_select.lut"):
        assert load_lut(path, strict=False) == empty_lut()
    assert len(caplog.records) == 1


def test_lenient_loading_of_a_valid_file_is_silent(caplog):
    with caplog.at_level(logging.WARNING):
        assert load_lut(SEED, strict=False) == load_lut(SEED)
    assert caplog.records == []


# -- building, merging, writing ------------------------------------------------------------------

def _mm_row(m: object, configs: list[GemmConfig], note: str | None = None) -> LUTRow:
    return LUTRow("h100", "mm", "bfloat16", LUTEntry(m=m, n=1280, k=3420, configs=configs, note=note))


def test_merge_lets_the_other_table_win_on_equal_keys():
    base = lut_from_rows([_mm_row(560, [cfg(64, 64, 32, 2, 4)]),
                                _mm_row(1024, [cfg(32, 32, 32, 2, 4)])])
    mine = lut_from_rows([_mm_row(560, [cfg(128, 128, 64, 3, 8)], "measured")])
    merged = merge_luts(base, mine)
    assert merged.lookup(Problem(560, 1280, 3420), "h100") == [cfg(128, 128, 64, 3, 8)]
    assert merged.lookup(Problem(1024, 1280, 3420), "h100") == [cfg(32, 32, 32, 2, 4)]
    assert merged.num_entries == 2
    overlapping = lut_from_rows([_mm_row(MRange(min=1, max=600), [cfg(16, 16, 16, 1, 1)])])
    with pytest.raises(LUTError, match="<merged table>: .*overlap"):
        merge_luts(base, overlapping)


def test_from_rows_rejects_batch_on_mm_and_accepts_plain_entries_for_bmm():
    batched = BatchedLUTEntry(m=4, n=4, k=4, batch=2, configs=[cfg(16, 16, 16, 1, 1)])
    with pytest.raises(LUTError, match=r"devices\.h100\.mm\.float16\[0\]\.batch"):
        lut_from_rows([LUTRow("h100", "mm", "float16", batched)])
    plain = LUTEntry(m=4, n=4, k=4, configs=[cfg(16, 16, 16, 1, 1)])
    table = lut_from_rows([LUTRow("NVIDIA H100 80GB HBM3", "bmm", "float16", plain)])
    assert table.lookup(Problem(4, 4, 4, "float16", batch=9, op="bmm"), "h100") == [cfg(16, 16, 16, 1, 1)]


def test_digest_follows_content_not_spelling(tmp_path):
    seed = load_lut(SEED)
    respelled = json.loads(SEED.read_text())
    respelled["devices"]["NVIDIA H100 80GB HBM3"] = respelled["devices"].pop("h100")
    respelled["devices"]["NVIDIA H100 80GB HBM3"]["mm"]["bfloat16"].reverse()
    assert parse_lut(json.dumps(respelled)).digest() == seed.digest()
    changed = copy.deepcopy(respelled)
    changed["devices"]["NVIDIA H100 80GB HBM3"]["mm"]["bfloat16"][0]["configs"][0]["num_warps"] = 8
    assert parse_lut(json.dumps(changed)).digest() != seed.digest()
    assert len(seed.digest()) == 64


def test_save_writes_the_canonical_text(tmp_path):
    target = tmp_path / "sub" / "lut.json"
    save_lut(load_lut(SEED), target)
    assert target.read_text() == SEED.read_text()
    assert [p.name for p in target.parent.iterdir()] == ["lut.json"]  # no temporary file left


def test_canonical_layout_puts_one_config_per_line():
    text = dump_lut(load_lut(SEED))
    assert ('              {"block_m": 64, "block_n": 128, "block_k": 64, "num_stages": 5, '
            '"num_warps": 8, "group_m": 8},\n') in text
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert dump_lut(empty_lut()) == '{\n  "schema_version": 4,\n  "devices": {}\n}\n'


# -- migrations ----------------------------------------------------------------------------------

def test_migrations_run_one_version_at_a_time(monkeypatch):
    def rename_tables(raw: dict) -> dict:  # an imagined v0 that called "devices" "tables"
        return {"schema_version": 1, "devices": raw["tables"]}

    monkeypatch.setitem(lut_module.MIGRATIONS, 0, rename_tables)
    old = {"schema_version": 0, "tables": doc(entry())["devices"]}
    assert parse_lut(json.dumps(old)) == parse_lut(json.dumps(doc(entry())))

    monkeypatch.setitem(lut_module.MIGRATIONS, 0, lambda raw: raw)
    with pytest.raises(LUTError, match="failed to migrate from schema_version 0 to 1"):
        parse_lut(json.dumps(old))


def test_importing_the_lut_modules_stays_away_from_triton_and_inductor():
    code = ("import sys, kernel_select.lut, kernel_select.lut.torch_table, kernel_select.lut.autotune_log; "
            "bad = [m for m in sys.modules if m == 'triton' or m.startswith('torch._inductor')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# -- a GPU outside the device table ------------------------------------------------------------

def test_a_gpu_outside_the_table_has_luts_on_that_gpu_and_nowhere_else(monkeypatch: pytest.MonkeyPatch):
    """`pretune` on an L4 writes a LUT keyed "l4": it loads in a process that detected the L4 (the
    handler and pretune detect the GPU they run on), while elsewhere the key stays unknown."""
    import dataclasses

    from kernel_select import device as device_module

    monkeypatch.setattr(device_module, "_DETECTED", {})
    with pytest.raises(LUTError, match="unknown device 'l4'.*another GPU's key is known on that GPU"):
        parse_lut(json.dumps(doc(entry(), device="l4")))
    l4 = dataclasses.replace(get_device("h100"), key="l4", name="NVIDIA L4")
    monkeypatch.setitem(device_module._DETECTED, "l4", l4)
    for name in ("l4", "NVIDIA L4", " nvidia l4 "):
        table = parse_lut(json.dumps(doc(entry(), device=name)))
        assert list(table.devices) == ["l4"]
        assert table.lookup(Problem(560, 1280, 3420, "bfloat16"), l4) == [cfg(64, 128, 64, 3, 4)]
        assert parse_lut(dump_lut(table)) == table
    written = lut_from_rows([LUTRow(l4, "mm", "bfloat16", LUTEntry.model_validate(entry()))])
    assert written.digest() == parse_lut(json.dumps(doc(entry(), device="l4"))).digest()
    both = {"schema_version": 4, "devices": {"l4": {"mm": {"bfloat16": [entry()]}},
                                             "NVIDIA L4": {"mm": {"bfloat16": [entry(m=1024)]}}}}
    with pytest.raises(LUTError, match="both name device 'l4'"):
        parse_lut(json.dumps(both))
    with pytest.raises(LUTError, match="unknown device 'l4x'"):
        parse_lut(json.dumps(doc(entry(), device="l4x")))
