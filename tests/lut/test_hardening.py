"""Hostile paths and values: nothing blocks, nothing exhausts memory, every failure is a LUTError."""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import logging
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernel_select.configs import GemmConfig
from kernel_select.device import KNOWN_DEVICES
from kernel_select.errors import LUTError
from kernel_select.lut import (
    MAX_LUT_BYTES,
    KernelLUT,
    LUTEntry,
    LUTRow,
    check_fits,
    dump_lut,
    empty_lut,
    load_lut,
    lut_digest,
    parse_lut,
    read_lut_bytes,
    save_lut,
)
from kernel_select.lut import bounded_read, io as lut_io
from kernel_select.lut import lut_from_rows, schema as lut_schema
from kernel_select.offline import json_files
from kernel_select.offline.data import dataset
from kernel_select.problem import Problem
from tests.subprocess_env import package_env

H100 = KNOWN_DEVICES["h100"]
SMALL = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
HUGE = GemmConfig(block_m=1024, block_n=1024, block_k=1024, num_stages=8, num_warps=32)
unix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


def _table(*configs: GemmConfig, device: str = "h100") -> KernelLUT:
    entry = LUTEntry(m=64, n=64, k=64, configs=list(configs))
    return lut_from_rows([LUTRow(device, "mm", "bfloat16", entry)])


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "lut.fifo"
    os.mkfifo(path)
    return path


@contextmanager
def unread() -> Iterator[None]:
    """Inside, the bounded reader reading any content fails the test, and so does a FIFO opened to wait
    for a writer (no_waiting_on_fifos): a path refused for what it is (a FIFO, a device, a folder, a file
    over its cap: fstat tells) is refused before a byte of it is read."""
    def read(fd: int, size: int) -> bytes:
        pytest.fail(f"read up to {size:,} bytes of a file that its type or size should have refused")

    with no_waiting_on_fifos(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(bounded_read, "_read_at_most", read)
        yield


@contextmanager
def no_waiting_on_fifos() -> Iterator[None]:
    """Inside, os.open of a FIFO without O_NONBLOCK fails the test: such an open waits for a writer,
    which would hang the test instead of failing it."""
    real_open = os.open

    def open_without_waiting(path: str | os.PathLike[str], flags: int, *args: int,
                             **kwargs: int | None) -> int:
        if not flags & os.O_NONBLOCK and _is_fifo(path):
            pytest.fail(f"{path}: a FIFO opened without O_NONBLOCK, which waits for a writer")
        return real_open(path, flags, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", open_without_waiting)
        yield


def _is_fifo(path: object) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)  # type: ignore[arg-type]
    except (OSError, ValueError, TypeError):
        return False


# -- only regular files, never more than MAX_LUT_BYTES ------------------------------------------

@unix_only
def test_a_fifo_is_refused_at_once_naming_the_path(fifo: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(LUTError, match=f"^{fifo}: is a FIFO .*not a regular file"), unread():
        load_lut(fifo)
    with unread():
        assert load_lut(fifo, strict=False) == empty_lut()
        assert lut_digest(fifo).startswith("unreadable:")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_dev_zero_is_a_lut_error_not_a_memory_error() -> None:
    with pytest.raises(LUTError, match="^/dev/zero: is a character device"), unread():
        load_lut("/dev/zero")
    with unread():
        assert lut_digest("/dev/zero").startswith("unreadable:")


def test_a_directory_is_a_lut_error(tmp_path: Path) -> None:
    with pytest.raises(LUTError, match="is a directory"):
        load_lut(tmp_path)


def test_size_is_checked_before_reading(tmp_path: Path) -> None:
    sparse = tmp_path / "huge.json"
    with open(sparse, "wb") as handle:  # a hole: the size is there, the bytes are not
        handle.truncate(MAX_LUT_BYTES + 1)
    with pytest.raises(LUTError, match=r"67,108,865 bytes or more is over the LUT size limit of "
                                       r"67,108,864 bytes \(kernel_select.lut.MAX_LUT_BYTES\)"), unread():
        load_lut(sparse)
    small = tmp_path / "small.json"
    small.write_text(dump_lut(_table(SMALL)))
    with pytest.raises(LUTError, match="over the LUT size limit of 100 bytes"):
        read_lut_bytes(small, limit=100)
    assert read_lut_bytes(small) == small.read_bytes()


def test_text_over_the_limit_is_refused_before_parsing() -> None:
    with pytest.raises(LUTError, match="over the LUT size limit"):
        parse_lut(b" " * (MAX_LUT_BYTES + 1))


# Every kind of file the package reads goes through the same reader, with its own cap and error.
KINDS = [bounded_read.LUT_FILE, bounded_read.INDUCTOR_TABLE_FILE, bounded_read.AUTOTUNE_LOG_FILE,
         json_files.SHAPES_FILE, json_files.RESULTS_FILE, dataset.DATASET_FILE]


@unix_only
@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_every_kind_of_file_refuses_fifos_devices_and_folders_at_once(fifo: Path, tmp_path: Path,
                                                                      kind: bounded_read.FileKind) -> None:
    for path, what in ((fifo, "a FIFO (named pipe)"), (Path("/dev/zero"), "a character device"),
                       (tmp_path, "a directory")):
        with pytest.raises(kind.error, match=f"^{path}: is {re.escape(what)}, not a regular file; "
                                             f"pass the path of {re.escape(kind.noun)}$"), unread():
            bounded_read.read_bounded(path, kind)
    with pytest.raises(kind.error, match=f"^{tmp_path}/nope: no such {kind.name} file; check the path$"):
        bounded_read.read_bounded(tmp_path / "nope", kind)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_every_kind_of_file_has_a_size_cap_named_in_the_error(tmp_path: Path,
                                                            kind: bounded_read.FileKind) -> None:
    sparse = tmp_path / "huge"
    with open(sparse, "wb") as handle:  # a hole: the size is there, the bytes are not
        handle.truncate(kind.limit + 1)
    expected = (f"^{sparse}: {kind.limit + 1:,} bytes or more is over the {kind.name} size limit of "
                f"{kind.limit:,} bytes \\({re.escape(kind.limit_name)}\\)")
    with pytest.raises(kind.error, match=expected), unread():
        bounded_read.read_bounded(sparse, kind)
    stream = io.BytesIO(b"x" * 101)
    with pytest.raises(kind.error, match="^<stdin>: 101 bytes or more is over .* size limit of 100 bytes"):
        bounded_read.read_stream_bounded(stream, dataclasses.replace(kind, limit=100))
    small = dataclasses.replace(kind, limit=100)
    assert bounded_read.read_stream_bounded(io.BytesIO(b"x" * 100), small) == b"x" * 100


def test_the_size_caps_are_the_documented_constants() -> None:
    assert [kind.limit for kind in KINDS] == [64 << 20, 64 << 20, 256 << 20, 64 << 20, 64 << 20, 256 << 20]
    for kind in KINDS:
        module, _, name = kind.limit_name.rpartition(".")
        assert getattr(importlib.import_module(module), name) == kind.limit


def test_json_deeper_than_the_bound_is_refused_even_on_a_deep_stack() -> None:
    """Inside torch.compile the stack is already hundreds of frames deep; the parser's own guard
    then trips at a shallower document, and that too must be a LUTError."""
    def at_depth(frames: int) -> object:
        return at_depth(frames - 1) if frames else parse_lut("[" * 500 + "]" * 500, source="deep.json")

    with pytest.raises(LUTError, match="^deep.json: invalid JSON: nested more than 64 levels deep"):
        at_depth(sys.getrecursionlimit() - 200)
    with pytest.raises(LUTError, match="nested more than 64 levels"):
        bounded_read.parse_json("[" * 65 + "]" * 65, bounded_read.LUT_FILE, "x.json")
    deepest: list = []
    for _ in range(63):
        deepest = [deepest]
    # 64 deep is read
    assert bounded_read.parse_json("[" * 64 + "]" * 64, bounded_read.LUT_FILE, "x.json") == deepest


def test_a_nul_byte_in_the_path_is_a_lut_error() -> None:
    with pytest.raises(LUTError, match="cannot open"):
        load_lut("bad\0path.json")


# -- digests for cache keys ---------------------------------------------------------------------

def test_digest_follows_the_bytes_and_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "lut.json"
    save_lut(_table(SMALL), path)
    first = lut_digest(path)
    assert first == lut_digest(path) and first.startswith("sha256:")
    save_lut(_table(SMALL, device="a100"), path)
    assert lut_digest(path) != first
    assert lut_digest(tmp_path / "missing.json").startswith("unreadable:")
    assert lut_digest(tmp_path / "lut.json", limit=10).startswith("unreadable:")


def test_a_tables_digest_is_computed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler's uuid() asks for the digest of the loaded table on every compile; dumping and
    hashing a 40 MB table took seconds per call when it was recomputed."""
    from kernel_select import runtime

    path = tmp_path / "lut.json"
    save_lut(_table(SMALL, HUGE), path)
    dumps: list[KernelLUT] = []
    real_tree = lut_schema._tree
    monkeypatch.setattr(lut_schema, "_tree", lambda table: dumps.append(table) or real_tree(table))
    keys = {runtime.lut_fingerprint(str(path)) for _ in range(5)}
    assert keys == {f"{path}:{_table(SMALL, HUGE).digest()}"}
    assert len(dumps) == 2  # the loaded table's digest once, the fresh table's above once
    table = load_lut(path)
    assert [table.digest() for _ in range(3)] == [table.digest()] * 3 and len(dumps) == 3


# -- messages are safe to print -----------------------------------------------------------------

@pytest.mark.parametrize("key", ["\x1b[31mred", "line\nbreak", "\u202eevil", "bell\x07"])
def test_control_characters_in_keys_and_values_are_escaped(key: str) -> None:
    document = {"schema_version": 1, "devices": {"h100": {"mm": {"bfloat16": [
        {"m": 1, "n": 1, "k": 1, "configs": [SMALL.model_dump()], key: 1}]}}}}
    with pytest.raises(LUTError) as info:
        parse_lut(json.dumps(document), source="evil\x1b.json")
    message = str(info.value)
    assert message.isprintable(), message
    assert repr(key)[1:-1] in message and "evil\\x1b.json: " in message
    with pytest.raises(LUTError) as info:
        parse_lut(json.dumps({"schema_version": 1, "devices": {key: {}}}))
    assert str(info.value).isprintable()


# -- devices ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["not-an-h100-at-all", "h100x", "my a100", "NVIDIA H100 80GB HBM3 (fake)"])
def test_device_keys_match_exactly_not_by_substring(name: str) -> None:
    with pytest.raises(LUTError, match="unknown device"):
        parse_lut(dump_lut(_table(SMALL)).replace('"h100"', json.dumps(name)))


@pytest.mark.parametrize("name, key", [("h100", "h100"), (" H100 ", "h100"),
                                       ("NVIDIA H100 80GB HBM3", "h100"), ("h100_pcie", "h100-pcie"),
                                       ("nvidia h200", "h200")])
def test_device_keys_forgive_case_space_and_underscores(name: str, key: str) -> None:
    parsed = parse_lut(dump_lut(_table(SMALL)).replace('"h100"', json.dumps(name)))
    assert parsed == _table(SMALL, device=key)
    entry = LUTEntry(m=64, n=64, k=64, configs=[SMALL])
    assert list(parsed.entries()) == [LUTRow(key, "mm", "bfloat16", entry)]


def test_a_table_for_another_device_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    lut = _table(SMALL, device="a100")
    with caplog.at_level(logging.WARNING, logger="kernel_select.lut"):
        for m in (64, 128, 64):
            assert lut.lookup(Problem(m, 64, 64, "bfloat16"), "h100") == []
    assert len(caplog.records) == 1
    assert "entries for a100 only, none for h100" in caplog.records[0].getMessage()
    caplog.clear()
    assert empty_lut().lookup(Problem(64, 64, 64, "bfloat16"), "h100") == []
    assert lut.lookup(Problem(64, 64, 64, "bfloat16"), "a100") == [SMALL]
    assert caplog.records == []


# -- hardware validity --------------------------------------------------------------------------

def test_a_config_that_cannot_fit_is_rejected_with_figure_and_limit() -> None:
    with pytest.raises(LUTError, match=r"1024x1024x1024 s8 w32 needs 33,554,560 B of shared memory per "
                                       r"block for bfloat16; h100 allows 232,448 B"):
        check_fits(_table(SMALL, HUGE), H100, source="big.json")
    assert check_fits(_table(SMALL), H100) == 1
    assert check_fits(_table(HUGE, device="a100"), H100) == 0  # only h100's tables are checked


@pytest.mark.parametrize("config,figure", [
    (GemmConfig(block_m=256, block_n=256, block_k=16, num_stages=1, num_warps=4),
     "512 accumulator registers per thread; a thread may use 255"),
    (GemmConfig(block_m=512, block_n=256, block_k=16, num_stages=1, num_warps=32),
     "131,072 accumulator registers per block"),
])
def test_register_limits_are_checked(config: GemmConfig, figure: str) -> None:
    with pytest.raises(LUTError, match=figure):
        check_fits(_table(config), H100)


def test_lookup_skips_configs_that_cannot_run_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    lut = _table(HUGE, SMALL)
    with caplog.at_level(logging.WARNING, logger="kernel_select.lut"):
        for _ in range(3):
            assert lut.lookup(Problem(64, 64, 64, "bfloat16"), H100) == [SMALL]
    assert len(caplog.records) == 1
    assert "33,554,560 B" in caplog.records[0].getMessage() and "232,448 B" in caplog.records[0].getMessage()


def test_the_seed_table_fits_its_device() -> None:
    seed = load_lut(Path(__file__).resolve().parents[2] / "luts" / "h100_seed.json")
    assert check_fits(seed, H100) == seed.num_entries


# -- atomic saves -------------------------------------------------------------------------------

def test_save_is_fsynced_and_a_failed_rename_keeps_the_old_file(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lut.json"
    save_lut(_table(SMALL), path)
    before = path.read_bytes()
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(lut_io.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))

    def crash(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(lut_io.os, "replace", crash)
    with pytest.raises(LUTError, match="cannot write: No space left on device"):
        save_lut(_table(SMALL, device="a100"), path)
    assert synced and path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["lut.json"]


def test_save_into_a_directory_is_a_lut_error(tmp_path: Path) -> None:
    with pytest.raises(LUTError, match="is a directory"):
        save_lut(_table(SMALL), tmp_path)


def test_cli_validate_with_device_rejects_an_impossible_config(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    save_lut(_table(SMALL, HUGE), path)
    run = subprocess.run([sys.executable, "-m", "kernel_select.cli", "lut", "validate", "--device", "h100",
                          str(path)], capture_output=True, text=True, env=package_env(), timeout=60)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "232,448 B" in run.stderr and "33,554,560 B" in run.stderr
