"""One way to replace a file: a crash, a kill -9 or a full disk leaves the old file or the new one,
never a truncated one, and concurrent writers never share a temporary file.

The new content goes to a uniquely named temporary file beside the target, `.NAME.PID.RANDOM.tmp`
(same file system, so the rename is atomic on POSIX; the pid lets a later writer tell a temp left
by a killed writer from a live one's, see `remove_stale_temps`), is flushed and fsynced, gets the
target's permissions (or those of an ordinary new file: mkstemp creates 0600), is renamed over the
target, and the folder is fsynced so the rename itself survives a power loss. Used for LUTs, model
checkpoints and cards, datasets and result files. A writer killed between the two (kill -9, power
loss) leaves its temporary file; the next write to the same target removes it, once its writer is
dead and it is older than STALE_TEMP_AGE_S.

What is replaced is the file a path names, not the path:

* A symlink is followed: the file it points to is replaced and the link stays a link.
* The target's mode is kept (a 0600 file stays 0600), and its owner and group where the writer
  may set them.
* A read-only target (no write permission bit, or not writable by this user) is refused with
  PermissionError: replacing it would silently undo the chmod that protects it.
* A target with several hard links is refused: a rename gives one name the new content and leaves
  the other names on the old file, and writing in place instead would give up the guarantee above
  (a crash mid-write would leave every name on a torn file). Break the link first
  (`cp FILE FILE.new && mv FILE.new FILE`) or write to another path.
* Anything but a regular file (a directory, FIFO or device) is refused: renaming over /dev/null
  would replace the device node.

Every OSError names the path the caller passed (never the temporary file), so "No space left on
device" says which write failed.

Check before work: `check_writable` raises, without writing anything, the error a write would meet
(the refusals above, and a folder on the way that is not a writable folder, is on a read-only file
system or is nearly full), so a command that measures, trains or compiles before it writes refuses
an output it could not write before the work: a late failure loses the work (`bench --out` on a
read-only file once measured for 96 s and then refused to write the rows).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from kernel_select.text import printable

#: How old (seconds since its last write) a dead writer's temporary file must be before a write to
#: the same target removes it. Without a lock, a pid that is dead here may be a live writer in another
#: pid namespace sharing the folder (a container); one that wrote nothing for this long is not.
STALE_TEMP_AGE_S = 600.0

#: Free space an output's file system must have before the work starts: less than this is a disk
#: that is (nearly) full, where the write at the end would fail.
MIN_FREE_BYTES = 16 * 1024 * 1024


def resolve_target(path: str | os.PathLike[str]) -> Path:
    """The file a write to `path` replaces: the end of its chain of symlinks (which may not exist
    yet), as an absolute path."""
    return Path(os.path.realpath(path))


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file that replaces the file `path` names when the block ends without an
    exception (see the module docstring for symlinks, modes, read-only files and hard links).

    `mode` is "wb" or "w" (text is UTF-8 with "\\n" line ends). The target's folder is created.
    On an exception the temporary file is removed and the target is left as it was.

    Raises:
        OSError: naming `path`: the target cannot be replaced (read-only, hard-linked, not a
            regular file) or the write failed (no space, no permission on the folder).
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_file: mode must be 'wb' or 'w', got {mode!r}")
    shown = os.fspath(path)
    target = resolve_target(path)
    existing = _replaceable(target, shown)
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps_quietly(target)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp",
                                        dir=target.parent)
        tmp = Path(tmp_name)
        _copy_permissions(fd, existing)
        text = {"encoding": "utf-8", "newline": "\n"} if mode == "w" else {}
        with os.fdopen(fd, mode, **text) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except BaseException as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None and _names_a_temp(exc.filename, target):
            # The temporary name means nothing to the caller; the target does.
            raise OSError(exc.errno, exc.strerror, shown) from None
        raise


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace the file `path` names with `data` (bytes, or text written as UTF-8), atomically and
    durably; see `atomic_file` for what is refused."""
    with atomic_file(path, "w" if isinstance(data, str) else "wb") as handle:
        handle.write(data)


def remove_stale_temps(path: str | os.PathLike[str], *, min_age_s: float = 0.0) -> list[Path]:
    """Delete the temporary files of `path`'s target left by writers that died (their pid is no
    longer alive) and last written at least `min_age_s` seconds ago; returns what was removed.
    With no age, call it while holding a lock on the target, so no live writer of another pid
    namespace is mistaken for a dead one."""
    target = resolve_target(path)
    removed = []
    now = time.time()
    for tmp in target.parent.glob(f".{target.name}.*.tmp"):
        pid = tmp.name[len(target.name) + 2:].split(".")[0]
        if pid.isascii() and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            if min_age_s and now - tmp.lstat().st_mtime < min_age_s:
                continue
            if tmp.is_dir() and not tmp.is_symlink():  # a model folder's staging (model/folder_write.py)
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise, naming `path` and without writing anything, the OSError a write of the file `path`
    names would meet: the folder it goes in cannot take it (`check_folder_writable`; first, so a
    path under a regular file says so) or the target is refused by `atomic_file`
    (`check_replaceable`). A missing folder is fine: the writer creates it.
    """
    shown = os.fspath(path)
    target = resolve_target(path)
    check_folder_writable(target.parent, shown)
    check_replaceable(target, shown)


def check_replaceable(path: str | os.PathLike[str], shown: str | None = None) -> None:
    """Raise the OSError `atomic_file` would raise for replacing the file `path` names (a
    directory, a read-only or hard-linked file), naming `shown` (default: `path`), without writing."""
    _replaceable(resolve_target(path), os.fspath(path) if shown is None else shown)


def check_folder_writable(folder: str | os.PathLike[str], shown: str) -> None:
    """Raise an OSError naming `shown` unless the nearest existing folder at or above `folder` (the
    one a missing `folder` would be created in) is a folder, writable, on a file system mounted
    read-write, with at least MIN_FREE_BYTES free."""
    existing = Path(folder)
    while not os.path.lexists(existing):
        existing = existing.parent
    try:
        info = os.stat(existing)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, shown) from None
    if not stat.S_ISDIR(info.st_mode):
        kind = "a regular file" if stat.S_ISREG(info.st_mode) else file_kind(info.st_mode)
        raise OSError(errno.ENOTDIR, f"cannot be created: {printable(existing)} is {kind}, not a folder",
                      shown)
    fs = os.statvfs(existing)
    if fs.f_flag & os.ST_RDONLY:
        raise OSError(errno.EROFS, f"cannot be written: {printable(existing)} is on a read-only file "
                                   "system", shown)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"cannot be written: the folder {printable(existing)} is not "
                                            "writable", shown)
    free = fs.f_bavail * fs.f_frsize
    if free < MIN_FREE_BYTES:
        raise OSError(errno.ENOSPC, f"cannot be written: {free // 1024:,} KiB free on the file system of "
                                    f"{printable(existing)}", shown)


def remove_stale_temps_quietly(target: Path) -> None:
    """`remove_stale_temps` of what is older than STALE_TEMP_AGE_S, for a writer holding no lock;
    tidying up never fails a write (a temp that vanished meanwhile or cannot be removed stays)."""
    try:
        remove_stale_temps(target, min_age_s=STALE_TEMP_AGE_S)
    except OSError:
        pass


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, from its st_mode: "a FIFO (named pipe)", ..."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _replaceable(target: Path, shown: str) -> os.stat_result | None:
    """The target's stat when it exists and may be replaced, None when it does not exist."""
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, shown) from None
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, f"is {file_kind(info.st_mode)}, not a regular file; name a file "
                                    "to write", shown)
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        mode = stat.S_IMODE(info.st_mode)
        raise PermissionError(errno.EACCES, f"is read-only (mode {mode:04o}); make it writable (chmod u+w) "
                                            "to replace it, or write elsewhere", shown)
    if info.st_nlink > 1:
        raise OSError(errno.EMLINK, f"has {info.st_nlink} hard links, and replacing it would split them; "
                                    "break the link first (cp FILE FILE.new && mv FILE.new FILE) or write "
                                    "elsewhere", shown)
    return info


def _names_a_temp(filename: Any, target: Path) -> bool:
    """Whether an OSError's filename is none or one of `target`'s temporary files."""
    if filename is None:
        return True
    name = Path(os.fsdecode(filename))
    return name.parent == target.parent and name.name.startswith(f".{target.name}.")


def _copy_permissions(fd: int, existing: os.stat_result | None) -> None:
    if existing is None:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        return
    os.fchmod(fd, stat.S_IMODE(existing.st_mode))
    try:
        os.fchown(fd, existing.st_uid, existing.st_gid)
    except PermissionError:  # only root may give a file away (or a member, to its group)
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` survive a power loss, where the system allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a folder that cannot be opened for reading: the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder
    finally:
        os.close(fd)
