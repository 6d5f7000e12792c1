"""Shapes files, as `bench` / `compare` and `pretune` read them and `shapes --out` writes them: every
field checked with one line naming the file, the entry and the field; the write is atomic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernel_select.errors import KernelSelectError, ProblemError
from kernel_select.offline.data import shapes
from kernel_select.offline.serving import discovery

GOOD = {"m": 560, "n": 1280, "k": 3420}
BAD_FIELDS = [  # (entry, what the one line must name)
    ({**GOOD, "m": True}, r"m: expected an integer from 1 to 2147483647, got True"),
    ({**GOOD, "m": 2**40}, r"m: expected an integer from 1 to 2147483647, got 1099511627776"),
    ({**GOOD, "n": 12.5}, r"n: expected an integer"),
    ({**GOOD, "k": "3420"}, r"k: expected an integer"),
    ({**GOOD, "layuot": "nt"}, r"unknown key 'layuot' \(did you mean 'layout'\?\)"),
    ({**GOOD, "dtype": 16}, r"dtype: expected a string"),
    ({"n": 1280, "k": 3420}, r"m: missing"),
    ([560, 1280, 3420], r"expected an object"),
]


@pytest.mark.parametrize(("item", "named"), BAD_FIELDS)
def test_a_bench_shapes_file_refuses_a_bad_field_naming_file_entry_and_field(tmp_path, item, named):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([GOOD, item]))
    with pytest.raises(ProblemError, match=rf"^{path}\[1\]: {named}") as error:
        shapes.load(path)
    assert "\n" not in str(error.value)


PRETUNE_ONLY = [({**GOOD, "m": {"min": 1, "mx": 8}}, r"unknown key 'mx' \(did you mean 'max'\?\)"),
                ({**GOOD, "m": {"min": 1, "max": 2**31}}, r"max: expected")]


@pytest.mark.parametrize(("item", "named"), [*BAD_FIELDS[:5], *PRETUNE_ONLY])
def test_a_pretune_shapes_file_refuses_a_bad_field_naming_file_entry_and_field(tmp_path: Path, item, named):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([GOOD, item]))
    with pytest.raises(KernelSelectError, match=rf"^{path} entry \[1\]: {named}") as error:
        discovery.load_shapes(path)
    assert "\n" not in str(error.value)


def test_shapes_files_with_a_bom_or_nested_without_end_give_one_line(tmp_path: Path):
    path = tmp_path / "shapes.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([GOOD]).encode())
    assert shapes.load(path)[0].m == 560 and discovery.load_shapes(path)[0].problem.m == 560
    path.write_text("[" * 100_000)
    with pytest.raises(ProblemError, match="cannot read shapes file"):
        shapes.load(path)
    with pytest.raises(KernelSelectError, match="not a shapes file"):
        discovery.load_shapes(path)


def test_shapes_out_replaces_the_file_atomically_and_refuses_what_other_writers_refuse(tmp_path: Path,
                                                                                        monkeypatch):
    import kernel_select.atomic_write as atomic_write

    path = tmp_path / "shapes.json"
    shapes.save(shapes.seed_shapes(), path)
    before = path.read_bytes()

    def killed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 -- the writer dies before the rename
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_write.os, "replace", killed)
    with pytest.raises(ProblemError, match=rf"^{path}: cannot write shapes file \(No space left"):
        shapes.save(shapes.seed_shapes("float16"), path)
    monkeypatch.undo()
    assert path.read_bytes() == before  # the old file, not a truncated one
    assert [p.name for p in tmp_path.iterdir()] == ["shapes.json"]  # no temporary file left
    path.chmod(0o444)
    with pytest.raises(ProblemError, match="is read-only"):
        shapes.save(shapes.seed_shapes("float16"), path)
    path.chmod(0o644)
    os.link(path, tmp_path / "other.json")
    with pytest.raises(ProblemError, match="hard links"):
        shapes.save(shapes.seed_shapes("float16"), path)
    assert path.read_bytes() == before
