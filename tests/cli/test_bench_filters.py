"""`kernel-select bench --dtype/--layout/--limit`: which of a shapes file's problems a collection times,
checked on CPU with the harness and the GPU check replaced (the timing itself is tests/gpu's)."""

from __future__ import annotations

import json

import pytest

from kernel_select.cli import data as data_cmd
from kernel_select.cli import main
from kernel_select.device import get_device

SHAPES = [
    {"m": 64, "n": 128, "k": 256, "dtype": "bfloat16"},
    {"m": 64, "n": 128, "k": 256, "dtype": "bfloat16", "layout": "tn"},
    {"m": 32, "n": 64, "k": 128, "dtype": "float16", "layout": "tn"},
    {"m": 16, "n": 32, "k": 64, "dtype": "float32", "layout": "nt"},
]


@pytest.fixture
def asked(tmp_path, monkeypatch):
    """The problems the harness is handed, in order."""
    from kernel_select.offline.harness import sharding

    handed: list = []

    def fake_run_sharded(problems, out, device, gpus, options, origins=None):
        import pandas as pd

        handed.extend(problems)
        return pd.DataFrame({"problem_id": [], "runtime_ms": []})

    monkeypatch.setattr(data_cmd, "require_gpu", lambda command: None)
    monkeypatch.setattr(sharding, "run_sharded", fake_run_sharded)
    monkeypatch.setattr("kernel_select.device.detect", lambda: get_device("h100"))
    (tmp_path / "shapes.json").write_text(json.dumps(SHAPES))
    return handed


def bench(tmp_path, *extra: str) -> int:
    return main(["bench", "--shapes", str(tmp_path / "shapes.json"), "--out", str(tmp_path / "out.parquet"),
                 "--no-progress", *extra])


def test_no_filter_times_every_problem(tmp_path, asked):
    assert bench(tmp_path) == 0
    assert [(p.dtype, p.layout) for p in asked] == [
        ("bfloat16", "nn"), ("bfloat16", "tn"), ("float16", "tn"), ("float32", "nt")]


def test_layout_filter_keeps_those_layouts(tmp_path, asked):
    assert bench(tmp_path, "--layout", "TN,nt") == 0
    assert [(p.dtype, p.layout) for p in asked] == [("bfloat16", "tn"), ("float16", "tn"), ("float32", "nt")]


def test_layout_and_dtype_filters_combine(tmp_path, asked):
    assert bench(tmp_path, "--layout", "tn", "--dtype", "bf16,fp16", "--limit", "1") == 0
    assert [(p.dtype, p.layout) for p in asked] == [("bfloat16", "tn")]


def test_unknown_layout_is_a_usage_error(tmp_path, asked, capsys):
    with pytest.raises(SystemExit) as exc:
        bench(tmp_path, "--layout", "tn,xy")
    assert exc.value.code == 2
    assert "'xy'" in capsys.readouterr().err and not asked
