"""Argument helpers shared by the command groups: argparse types that reject bad values at parse
time (so every command reports them the same way), and the few I/O helpers commands share.

Numbers on the command line are ASCII only: Python's int() and float() also take "64_0" (640) and
other scripts' digits ("٦٤"), which no user means. Every line that echoes a path or another
user-given text goes through `printable`, as error lines do: a file name must not move the cursor,
color the terminal or forge a second line.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernel_select.atomic_write import write_atomic
from kernel_select.text import printable

if TYPE_CHECKING:
    from kernel_select.lut.bounded_read import FileKind

#: Set to 1 to print the traceback behind a one-line error.
DEBUG_ENV = "KERNEL_SELECT_DEBUG"
#: Largest GEMM dimension the CLI accepts: Inductor's mm templates index with int32 by default,
#: and the model's features are computed in int64, where larger products would overflow.
MAX_DIMENSION = 2**31 - 1

Subparsers = Any  # argparse._SubParsersAction is private; its type carries nothing we check
Handler = Callable[[argparse.Namespace], int]


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, like every other kernel-select error.

    argparse prints the whole usage block before the error; on a command with a dozen options
    that buries the one line that matters, and scripts that read stderr get a different shape of
    error for a bad flag than for a bad file.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: Longest user text an error message repeats; the rest is cut (a 4,300-digit number is not read).
_ECHO_CHARS = 40


def echo(text: object) -> str:
    """`text` quoted, printable, and cut to _ECHO_CHARS characters, for repeating a bad value."""
    shown = f"'{printable(text)}'"
    return shown if len(shown) <= _ECHO_CHARS else shown[:_ECHO_CHARS - 4] + "...'"


def parse_integer(text: str) -> int | None:
    """The integer `text` spells in ASCII digits (an optional sign), else None."""
    return int(text) if _INTEGER.fullmatch(text) else None


def integer(text: str) -> int:
    """An argparse type: an integer in ASCII digits."""
    value = parse_integer(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected an integer, got {echo(text)}")
    return value


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= `low` (and <= `high`, when given)."""

    def parse(text: str) -> int:
        value = integer(text)
        if value < low or (high is not None and value > high):
            wanted = f">= {low}" if high is None else f"from {low} to {high:,}"
            raise argparse.ArgumentTypeError(f"expected an integer {wanted}, got {echo(value)}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def parse_number(text: str) -> float | None:
    """The number `text` spells in ASCII (digits, a point, an exponent), else None."""
    return float(text) if _NUMBER.fullmatch(text) else None


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = parse_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a number, got {echo(text)}")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {echo(text)}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0 (0 usually means "no limit")."""
    return 0.0 if parse_number(text) == 0 else positive_float(text)


def dimension(text: str) -> int:
    """An argparse type: a GEMM size from 1 to MAX_DIMENSION."""
    value = integer(text)
    if not 1 <= value <= MAX_DIMENSION:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer no larger than {MAX_DIMENSION}, got {echo(value)}")
    return value


def torch_version(text: str) -> str:
    """An argparse type: a torch version such as 2.11 or 2.13.0.dev20250101."""
    if not re.match(r"\d+\.\d+", text):
        raise argparse.ArgumentTypeError(f"expected a torch version such as 2.11, got {text!r}")
    return text


def add_problem_args(parser: argparse.ArgumentParser) -> None:
    from kernel_select.cli import flags
    from kernel_select.cli.devices import DEVICE_HELP

    parser.add_argument("--m", type=dimension, required=True, help="rows of A and C")
    parser.add_argument("--n", type=dimension, required=True, help="columns of B and C")
    parser.add_argument("--k", type=dimension, required=True, help="columns of A, rows of B")
    parser.add_argument("--dtype", type=flags.dtype, default="bfloat16",
                        help="float16 | bfloat16 | float32, or an alias: fp16, half, bf16, fp32, float "
                             "(default: %(default)s)")
    add_device_arg(parser, f"the GPU: {DEVICE_HELP} (default: the GPU this runs on; h100 without one)")


def add_device_arg(parser: argparse.ArgumentParser, help: str, *, default: str | None = None,
                   required: bool = False) -> None:
    """--device, read as the device's key (any case, an alias or torch's name)."""
    from kernel_select.cli import flags

    parser.add_argument("--device", type=flags.device, default=default, required=required, help=help)


def require_gpu(command: str) -> None:
    import torch

    from kernel_select.errors import DeviceError

    if not torch.cuda.is_available():
        raise DeviceError(f"{command}: needs a CUDA GPU (torch.cuda.is_available() is False); it times "
                          "kernels on the device")


def emit_text(text: str, out: str | None) -> None:
    """Print `text`, or write it to the file `out` (creating its folder) atomically: an
    interrupted write leaves the old file, never a truncated one. Either way a failed write (a
    full disk) raises an OSError naming the file, or <stdout>."""
    if out is None:
        try:
            sys.stdout.write(text)
        except OSError as exc:
            raise _stream_error(exc) from None
        flush_stdout()
        return
    write_atomic(out, text)


def say(line: str, *, stderr: bool = False) -> None:
    """Print one line; a failed write (`> /dev/full`) raises an OSError naming <stdout> (or
    <stderr>), where a bare print's names no file."""
    stream = sys.stderr if stderr else sys.stdout
    try:
        print(line, file=stream)
    except OSError as exc:
        raise _stream_error(exc, stream) from None


def say_lines(text: str) -> None:
    """Print a report of several lines, each escaped as `printable` does: a problem id or file name
    from the user's data must not move the cursor or forge a line."""
    for line in text.split("\n"):
        say(printable(line))


def flush_stdout() -> None:
    """Flush what was printed, so a failed write (`> /dev/full`) is an error naming <stdout> here
    rather than a traceback at exit."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        raise _stream_error(exc, sys.stdout) from None


def _stream_error(exc: OSError, stream: Any = None) -> OSError:
    """The error to raise for a failed write to `stream` (stdout unless stderr is named)."""
    if isinstance(exc, BrokenPipeError):  # the reader left (`| head`): the caller stops quietly
        return exc
    if stream is sys.stderr:
        return OSError(exc.errno or errno.EIO, exc.strerror or str(exc), "<stderr>")
    # What stdout still buffers cannot be written either; dropping it keeps the interpreter's final
    # flush from failing again after the one-line error ("Exception ignored", exit 120).
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- lives until the process exits
    return OSError(exc.errno or errno.EIO, exc.strerror or str(exc), "<stdout>")


def debug_requested(args: argparse.Namespace) -> bool:
    """Whether --debug or KERNEL_SELECT_DEBUG asks for the traceback behind an error, for commands
    that report errors themselves and go on (`lut validate` with several files)."""
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def readable_file(path: str, kind: FileKind) -> str:
    """`path`, once the package's bounded reader has read it whole (a regular file within
    `kind`'s size cap). For loaders that take a path and read it themselves (shapes files, the
    comparison suite): a FIFO, /dev/zero or an oversized file is refused, naming the path and the
    cap, before they open it."""
    from kernel_select.lut.bounded_read import read_bounded

    read_bounded(path, kind)
    return path


def readable_json(path: str, kind: FileKind) -> str:
    """`path`, once read as with `readable_file` and parsed as strict JSON nested at most
    MAX_JSON_DEPTH deep (deeper JSON is a RecursionError in a loader that parses it itself)."""
    from kernel_select.lut.bounded_read import read_json

    read_json(path, kind)
    return path


def load_lut_file(path: str) -> object:
    """A LUT loaded strictly; the error names the path and what is wrong with it (missing, a
    FIFO or directory, too large, invalid)."""
    from kernel_select.lut import load_lut

    return load_lut(path)
