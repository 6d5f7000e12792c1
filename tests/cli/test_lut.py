"""`kernel-select lut ...` end to end: exit codes, output, and files written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_select.cli import main
from kernel_select.lut import dump_lut, json_schema, load_lut, parse_lut

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "luts" / "h100_seed.json"
LOG = Path(__file__).resolve().parents[1] / "data" / "autotune_h100.log"


@pytest.fixture
def seed_copy(tmp_path: Path) -> Path:
    return Path(shutil.copy(SEED, tmp_path / "seed.json"))


def test_validate_reports_each_file(capsys, seed_copy, tmp_path):
    assert main(["lut", "validate", str(seed_copy)]) == 0
    assert capsys.readouterr().out == f"{seed_copy}: ok, 3 entries (h100)\n"
    bad = tmp_path / "bad.json"
    bad.write_text(SEED.read_text().replace('"block_k": 32', '"block_k": 48'))
    assert main(["lut", "validate", str(seed_copy), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == f"{seed_copy}: ok, 3 entries (h100)\n"
    assert err == (f"kernel-select: error: {bad}: devices.h100.mm.bfloat16[2].configs[0].block_k: must be a "
                   "power of two from 16 to 1024, got 48\n")


def test_validate_checks_each_table_against_the_device_it_is_keyed_by(capsys, seed_copy):
    doc = json.loads(seed_copy.read_text())
    entry = doc["devices"]["h100"]["mm"]["bfloat16"][0]
    entry["configs"][0].update(block_m=1024, block_n=1024, block_k=1024, num_stages=8, num_warps=32)
    seed_copy.write_text(json.dumps(doc))
    assert main(["lut", "validate", str(seed_copy)]) == 2  # no --device needed: the key is the device
    err = capsys.readouterr().err
    assert "cannot run on h100" in err and "33,554,560 B" in err and "232,448 B" in err


def test_fmt_rewrites_in_place_and_check_reports(capsys, seed_copy):
    messy = json.loads(seed_copy.read_text())
    messy["devices"]["NVIDIA H100 80GB HBM3"] = messy["devices"].pop("h100")
    seed_copy.write_text(json.dumps(messy))
    assert main(["lut", "fmt", "--check", str(seed_copy)]) == 1
    assert capsys.readouterr().out == f"would reformat {seed_copy}\n"
    assert main(["lut", "fmt", str(seed_copy)]) == 0
    assert capsys.readouterr().out == f"reformatted {seed_copy}\n"
    assert seed_copy.read_text() == SEED.read_text()
    assert main(["lut", "fmt", "--check", str(seed_copy)]) == 0
    assert main(["lut", "fmt", str(seed_copy)]) == 0
    assert capsys.readouterr().out == ""


def test_bad_input_exits_2_with_one_line(capsys, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1, "devices": {"h100": {"mm": {"bfloat16": [}}}}')
    for argv in (["lut", "fmt", str(broken)], ["lut", "show", str(broken)],
                 ["lut", "show", str(tmp_path / "missing.json")], ["lut", "to-inductor", str(broken)],
                 ["lut", "from-inductor", str(broken), "--device", "h100"],
                 ["lut", "from-log", str(tmp_path / "missing.log")]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("kernel-select: error: ") and err.count("\n") == 1, err


def test_show_prints_a_table_or_json(capsys):
    assert main(["lut", "show", str(SEED)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:8] == ["device", "op", "dtype", "m", "n", "k", "batch", "layout"]
    assert lines[1].split()[:10] == ["h100", "mm", "bfloat16", "560", "1280", "3420", "-", "any", "64x128x64",
                                     "s5"]
    assert len(lines) == 4
    assert main(["lut", "show", str(SEED), "--json"]) == 0
    assert capsys.readouterr().out == SEED.read_text()
    assert main(["lut", "show", str(SEED), "--device", "a100"]) == 0
    assert capsys.readouterr().out == f"{SEED}: no entries\n"


def test_show_prints_k_ranges_pins_and_layouts(capsys, tmp_path):
    path = tmp_path / "pins.json"
    path.write_text(json.dumps({"schema_version": 4, "devices": {"h100": {"mm": {"bfloat16": [
        {"m": 1280, "n": 3420, "k": {"min": 560, "max": 8192}, "layout": "tn", "pin": "aten",
         "note": "weight gradient"},
        {"m": {"min": 560, "max": 8192}, "n": 1280, "k": 3420,
         "pin": {"block_m": 64, "block_n": 128, "block_k": 64, "num_stages": 3, "num_warps": 4}}]}}}}))
    assert main(["lut", "show", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["h100", "mm", "bfloat16", "560..8192", "1280", "3420", "-", "any",
                                "pin:", "64x128x64", "s3", "w4"]
    assert lines[2].split() == ["h100", "mm", "bfloat16", "1280", "3420", "560..8192", "-", "tn",
                                "pin:", "aten", "weight", "gradient"]


def test_from_log_writes_a_valid_lut(capsys, tmp_path):
    out = tmp_path / "from_log.json"
    assert main(["lut", "from-log", str(LOG), "--gemm-topk", "2", "--device", "h100", "--out", str(out)]) == 0
    assert "3 LUT entries for h100 from 5 AUTOTUNE blocks" in capsys.readouterr().err
    lut = load_lut(out)
    assert lut.num_entries == 3
    assert main(["lut", "fmt", "--check", str(out)]) == 0
    assert main(["lut", "from-log", str(LOG)]) == 0  # to stdout, top 1 by default
    top1 = parse_lut(capsys.readouterr().out)
    assert all(len(row.entry.configs) == 1 for row in top1.entries())
    assert top1.num_entries == 3


def test_torch_format_round_trip_through_files(capsys, tmp_path):
    exported = tmp_path / "table.json"
    assert main(["lut", "to-inductor", str(SEED), "--device-name", "NVIDIA H100 80GB HBM3",
                 "--out", str(exported)]) == 0
    table = json.loads(exported.read_text())
    assert all(key.startswith("NVIDIA H100 80GB HBM3+((torch.bfloat16") for key in table)
    assert main(["lut", "from-inductor", str(exported), "--device", "h100"]) == 0
    back = capsys.readouterr().out
    assert [c for row in load_lut(SEED).entries() for c in row.entry.configs] == \
        [c for row in parse_lut(back).entries() for c in row.entry.configs]


def test_schema_command_prints_the_committed_schema(capsys):
    assert main(["lut", "schema"]) == 0
    assert capsys.readouterr().out == json_schema() == (ROOT / "luts/schema/lut.v4.schema.json").read_text()


@pytest.mark.parametrize("command", ["validate", "fmt", "show", "from-log", "to-inductor", "from-inductor",
                                     "schema"])
def test_every_lut_command_has_help(capsys, command):
    with pytest.raises(SystemExit) as info:
        main(["lut", command, "--help"])
    assert info.value.code == 0
    assert "usage: kernel-select lut " + command in capsys.readouterr().out


def test_module_entry_point_runs_in_a_subprocess():
    result = subprocess.run([sys.executable, "-m", "kernel_select.cli", "lut", "show", str(SEED), "--json"],
                            capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == dump_lut(load_lut(SEED))


def test_a_dtype_alias_is_read_and_written_back_canonically(capsys, seed_copy, tmp_path):
    doc = json.loads(seed_copy.read_text())
    doc["devices"]["h100"]["mm"] = {"BF16": doc["devices"]["h100"]["mm"]["bfloat16"]}
    alias = tmp_path / "alias.json"
    alias.write_text(json.dumps(doc))
    assert main(["lut", "validate", str(alias)]) == 0
    assert main(["lut", "fmt", str(alias)]) == 0
    capsys.readouterr()
    assert alias.read_text() == SEED.read_text()  # written under "bfloat16", in the canonical layout
    doc["devices"]["h100"]["mm"]["bfloat16"] = doc["devices"]["h100"]["mm"]["BF16"]
    alias.write_text(json.dumps(doc))
    assert main(["lut", "validate", str(alias)]) == 2
    assert "dtypes 'BF16' and 'bfloat16' both name bfloat16; merge their lists" in capsys.readouterr().err
