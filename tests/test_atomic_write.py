"""The one atomic writer: it replaces the file a path names (through symlinks), keeps its mode,
refuses read-only, hard-linked and special targets, and names the path in every error."""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

import pytest

from kernel_select.atomic_write import STALE_TEMP_AGE_S, atomic_file, remove_stale_temps, write_atomic


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    write_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert real.read_text() == "new" and _leftovers(tmp_path) == []


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "sub" / "made.json")
    write_atomic(link, b"bytes")
    assert link.is_symlink() and (tmp_path / "sub" / "made.json").read_bytes() == b"bytes"


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o664, 0o755])
def test_the_files_mode_is_kept(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "f.json"
    path.write_text("old")
    path.chmod(mode)
    write_atomic(path, "new")
    assert stat.S_IMODE(path.stat().st_mode) == mode and path.read_text() == "new"


def test_a_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    umask = os.umask(0o027)
    try:
        write_atomic(tmp_path / "new.json", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640


@pytest.mark.parametrize("mode", [0o444, 0o400])
def test_a_read_only_file_is_refused_and_left_alone(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "ro.json"
    path.write_text("old")
    path.chmod(mode)
    with pytest.raises(PermissionError) as info:
        write_atomic(path, "new")
    assert info.value.filename == str(path)
    assert info.value.strerror == (f"is read-only (mode {mode:04o}); make it writable (chmod u+w) to "
                                   "replace it, or write elsewhere")
    assert path.read_text() == "old" and _leftovers(tmp_path) == []


def test_a_hard_linked_file_is_refused_and_both_names_keep_their_content(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("old")
    os.link(first, second)
    with pytest.raises(OSError) as info:
        write_atomic(second, "new")
    assert info.value.errno == errno.EMLINK and info.value.filename == str(second)
    assert "has 2 hard links" in info.value.strerror
    assert first.read_text() == second.read_text() == "old"
    assert first.stat().st_ino == second.stat().st_ino


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_a_fifo_is_refused_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="is a FIFO \\(named pipe\\), not a regular file") as info:
        write_atomic(fifo, "x")
    assert info.value.filename == str(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and _leftovers(tmp_path) == []


def test_a_failed_write_names_the_target_not_the_temporary_file(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk shows up at write, flush or fsync time; the message must say which file."""
    path = tmp_path / "schema.json"
    path.write_text("old")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError) as info:
        write_atomic(path, "new")
    assert (info.value.errno, info.value.filename) == (errno.ENOSPC, str(path))
    assert path.read_text() == "old" and _leftovers(tmp_path) == []


def test_an_exception_in_the_block_leaves_the_target(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(path) as handle:
        handle.write(b"half")
        raise RuntimeError("writer failed")
    assert path.read_bytes() == b"old" and _leftovers(tmp_path) == []


def test_stale_temps_of_a_links_target_are_found(tmp_path: Path) -> None:
    (tmp_path / "real.parquet").write_bytes(b"x")
    (tmp_path / "link.parquet").symlink_to("real.parquet")
    dead = tmp_path / ".real.parquet.999999999.abc.tmp"  # no such pid
    live = tmp_path / f".real.parquet.{os.getpid()}.abc.tmp"
    foreign = tmp_path / ".real.parquet.notapid.tmp"
    for temp in (dead, live, foreign):
        temp.write_bytes(b"")
    assert remove_stale_temps(tmp_path / "link.parquet") == [dead]
    assert live.exists() and foreign.exists()


def test_a_write_removes_the_temps_a_killed_writer_left(tmp_path: Path) -> None:
    # issue 43: an atomic writer killed between writing and renaming left .NAME.PID.*.tmp for good
    target = tmp_path / "lut.json"
    target.write_text("old")
    dead = tmp_path / ".lut.json.999999999.abc.tmp"  # no such pid
    dead_recent = tmp_path / ".lut.json.999999998.abc.tmp"  # maybe a live writer of another pid namespace
    live = tmp_path / f".lut.json.{os.getppid()}.abc.tmp"
    other_target = tmp_path / ".other.json.999999999.abc.tmp"
    for temp in (dead, dead_recent, live, other_target):
        temp.write_bytes(b"half")
    old = time.time() - 2 * STALE_TEMP_AGE_S
    for temp in (dead, live, other_target):
        os.utime(temp, (old, old))
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert not dead.exists()
    assert dead_recent.exists() and live.exists() and other_target.exists()
