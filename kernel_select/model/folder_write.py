"""Writing a model folder whole or not at all.

A model folder holds the checkpoints of one training (`MODEL_STEMS`: the MLP, its cuBLAS time
head, the cuBLAS gate) and may hold other files (calibrate's measurements, eval.json). Written one
file at a time, a kill or a full disk between two files left a new gate beside an old MLP, or a
folder holding only a gate, which then served (issue 43). So `write_model_folder`:

1. writes the new checkpoints into a hidden sibling folder, `.NAME.PID.RANDOM.tmp`;
2. carries the old folder's other files over (hard links, so a large dataset is not copied) and the
   checkpoints it was asked to keep; the others are left behind, so a folder never mixes trainings;
3. swaps the two folders in one atomic rename (Linux renameat2 RENAME_EXCHANGE; elsewhere the old
   folder is renamed aside first, and the folder is absent, never partial, for that moment); the
   old folder, now the sibling, is removed.

A writer killed before the swap leaves the old folder as it was and a hidden sibling, which the
next write to the folder removes (as atomic_write removes a dead writer's temporary file).
`check_model_folder` runs before any training, so a folder that cannot be written costs nothing;
a failure after training keeps the trained checkpoints in a visible sibling folder named in the
error.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kernel_select.atomic_write import file_kind, fsync_dir, remove_stale_temps_quietly, resolve_target
from kernel_select.errors import ModelError
from kernel_select.model.card import ModelCard
from kernel_select.model.checkpoint import save_card, save_checkpoint
from kernel_select.model.folders import MODEL_STEMS

#: Free space a model folder needs before training starts: a checkpoint set is well under 1 MB
#: (the shipped H100 MLP is 120 kB); the margin leaves room for a larger ensemble.
MIN_FREE_BYTES = 16 * 1024 * 1024

#: A checkpoint to write: (stem, state dict, card).
Checkpoint = tuple[str, dict[str, Any], ModelCard]


def check_model_folder(out_dir: str | os.PathLike[str]) -> None:
    """Refuse, before any training, a model folder that cannot be written whole: a path that is
    not a folder, a read-only folder or checkpoint (a chmod that protects it is not undone), a
    parent folder that refuses new entries, or a disk with less than MIN_FREE_BYTES free.

    Raises:
        ModelError: naming the path and the fix.
    """
    shown = os.fspath(out_dir)
    target = resolve_target(out_dir)
    if target.exists() and not target.is_dir():
        mode = os.stat(target).st_mode
        what = "a file" if stat.S_ISREG(mode) else file_kind(mode)
        raise ModelError(f"{shown}: is {what}, not a folder; pass a folder for the model (--out)")
    for path in (target, *(target / name for name in _checkpoint_files(MODEL_STEMS))):
        if path.exists() and _read_only(path):
            mode = stat.S_IMODE(path.stat().st_mode)
            raise ModelError(f"{path}: is read-only (mode {mode:04o}); make it writable (chmod u+w) to "
                             "replace the model, or pass another --out")
    parent = _nearest_folder(target.parent)
    try:
        probe = tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=parent)
        os.rmdir(probe)
    except OSError as exc:
        raise ModelError(f"{shown}: cannot write the model folder in {parent} ({exc.strerror or exc}); "
                         "pass a writable --out") from None
    free = shutil.disk_usage(parent).free
    if free < MIN_FREE_BYTES:
        raise ModelError(f"{shown}: only {free:,} bytes free on its disk, and a model needs up to "
                         f"{MIN_FREE_BYTES:,} (kernel_select.model.folder_write.MIN_FREE_BYTES); free some "
                         "space or pass another --out")


def write_model_folder(out_dir: str | os.PathLike[str], checkpoints: Sequence[Checkpoint], *,
                       keep: Sequence[str] = (), cards: Sequence[tuple[str, ModelCard]] = ()) -> Path:
    """Replace the model folder `out_dir` (created if needed) with one holding `checkpoints`, the
    old folder's checkpoints named in `keep` and its files that are not checkpoints, in one step
    (module docstring). `cards`: (stem, card) of kept checkpoints whose card is rewritten in the same
    step, their weights kept (a card that names a checkpoint written beside it). Returns the folder.

    Raises:
        ModelError: the folder cannot be written (check_model_folder), or writing failed; when the
            checkpoints were written but not moved into place, the message names the folder
            that holds them.
    """
    if any(stem not in keep for stem, _ in cards):
        raise ValueError(f"a rewritten card's checkpoint must be kept: cards {[s for s, _ in cards]}, "
                         f"keep {list(keep)}")

    def write(staging: Path) -> None:
        for stem, state_dict, card in checkpoints:
            save_checkpoint(staging, stem, state_dict, card)
        for stem, card in cards:  # the kept weights are carried over beside it (_carry_over)
            save_card(staging / f"{stem}.json", card)

    return _replace_folder(out_dir, write, keep)


def install_model_folder(trained: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[str]:
    """Replace the checkpoints of the model folder `out_dir` with those of the folder `trained`
    (which `write_model_folder` wrote: calibrate trains beside the folder it replaces), in one step
    like `write_model_folder`, keeping `out_dir`'s other files; `trained` is removed. Returns the
    stems installed.

    Raises:
        ModelError: as write_model_folder.
    """
    source = Path(trained)
    names = [name for name in _checkpoint_files(MODEL_STEMS) if (source / name).is_file()]

    def move(staging: Path) -> None:
        for name in names:
            os.replace(source / name, staging / name)

    _replace_folder(out_dir, move, keep=())
    shutil.rmtree(source, ignore_errors=True)
    return [stem for stem in MODEL_STEMS if f"{stem}.pt" in names]


def _replace_folder(out_dir: str | os.PathLike[str], write: Callable[[Path], None],
                    keep: Sequence[str]) -> Path:
    """Fill a hidden sibling of `out_dir` with `write`, carry over what is kept, swap it in."""
    shown = os.fspath(out_dir)
    target = resolve_target(out_dir)
    check_model_folder(out_dir)
    _remove_stale_staging(target)
    staging = _hidden_sibling(target)
    try:
        write(staging)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ModelError(f"{shown}: cannot write the model ({exc.strerror or exc}); nothing was "
                         "changed") from None
    try:
        if target.is_dir():
            left = set(_checkpoint_files(stem for stem in MODEL_STEMS if stem not in keep))
            _carry_over(target, staging, left_behind=left)
        _swap_into_place(staging, target)
    except OSError as exc:
        kept = _keep_for_user(staging, target)
        raise ModelError(f"{shown}: the model was trained but could not replace the folder "
                         f"({exc.strerror or exc}); it is kept in {kept}: move it there by hand") from None
    return Path(out_dir)


def _checkpoint_files(stems: Iterable[str]) -> list[str]:
    return [f"{stem}{suffix}" for stem in stems for suffix in (".pt", ".json")]


def _hidden_sibling(target: Path) -> Path:
    """A new empty folder beside `target`, named as atomic_write names its temporary files, so
    that a dead writer's is removed by the next write (remove_stale_temps)."""
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent))


def _read_only(path: Path) -> bool:
    return not path.stat().st_mode & 0o222 or not os.access(path, os.W_OK)


def _nearest_folder(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (the folder a new model folder is made in)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _remove_stale_staging(target: Path) -> None:
    # A writer killed before its swap left `.NAME.PID.*.tmp`; an old folder it had swapped out
    # has the same name.
    remove_stale_temps_quietly(target)
    target.parent.mkdir(parents=True, exist_ok=True)


def _carry_over(old: Path, new: Path, *, left_behind: set[str]) -> None:
    """Link (or copy, across file systems) every entry of `old` that `new` lacks into `new`, but
    the names in `left_behind`."""
    for entry in old.iterdir():
        destination = new / entry.name
        if entry.name in left_behind or destination.exists() or destination.is_symlink():
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry), destination)
        elif entry.is_dir():
            shutil.copytree(entry, destination, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, destination)


def _link_or_copy(source: str | Path, destination: str | Path) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _swap_into_place(staging: Path, target: Path) -> None:
    """Put `staging` where `target` is, in one rename where the system can, and remove the old folder."""
    if not target.exists():
        os.rename(staging, target)
    elif _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # now the old folder
    else:
        aside = _hidden_sibling(target)
        os.rename(target, aside / "old")
        os.rename(staging, target)
        shutil.rmtree(aside, ignore_errors=True)
    fsync_dir(target.parent)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 with RENAME_EXCHANGE); False where the C
    library or the file system cannot, so the caller renames in two steps."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(second))


def _keep_for_user(staging: Path, target: Path) -> Path:
    """The trained checkpoints, moved from the hidden staging folder to a visible sibling of the
    target where the folder allows it."""
    kept = target.with_name(f"{target.name}.unsaved-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        os.rename(staging, kept)
    except OSError:
        return staging
    return kept

