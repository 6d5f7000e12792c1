"""Argument helpers shared by the command groups: argparse types that reject bad values at parse
time (so every command reports them the same way), and the few I/O helpers commands share."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_select.atomic_write import write_atomic

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


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `low`."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0 (0 usually means "no limit")."""
    return 0.0 if text.strip() in ("0", "0.0") else positive_float(text)


def dimension(text: str) -> int:
    """An argparse type: a GEMM size from 1 to MAX_DIMENSION."""
    value = _integer(text)
    if not 1 <= value <= MAX_DIMENSION:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer no larger than {MAX_DIMENSION}, got {value}")
    return value


def torch_version(text: str) -> str:
    """An argparse type: a torch version such as 2.11 or 2.13.0.dev20250101."""
    if not re.match(r"\d+\.\d+", text):
        raise argparse.ArgumentTypeError(f"expected a torch version such as 2.11, got {text!r}")
    return text


def output_file(text: str) -> str:
    """An argparse type: a path to write a file to, which must not be a directory."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give the path of a file to write")
    return text


def add_problem_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--m", type=dimension, required=True, help="rows of A and C")
    parser.add_argument("--n", type=dimension, required=True, help="columns of B and C")
    parser.add_argument("--k", type=dimension, required=True, help="columns of A, rows of B")
    parser.add_argument("--dtype", default="bfloat16",
                        help="float16 | bfloat16 | float32 (default: %(default)s)")
    parser.add_argument("--device", default="h100",
                        help="device spec: h100, h100-pcie, h200, a100 (default: %(default)s)")


class _DeprecatedK(argparse.Action):
    """`-k COUNT`, the spelling before 1.0: still read, with a warning on stderr."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: warning: -k is deprecated; use --gemm-topk", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_topk_arg(parser: argparse.ArgumentParser) -> None:
    """--gemm-topk: the knob's one spelling (-k still works, deprecated)."""
    parser.add_argument("--gemm-topk", dest="gemm_topk", default="4", metavar="COUNT",
                        help="how many configs: a count (4), a fraction of the candidates (0.01), DEFAULT "
                             "(as many as Inductor's own list) or auto (default: %(default)s)")
    parser.add_argument("-k", dest="gemm_topk", action=_DeprecatedK, help=argparse.SUPPRESS)


def parse_topk(text: str) -> int | float | str:
    """--gemm-topk's value: an int count, a float fraction, "DEFAULT" or "auto"; `select` checks the
    range."""
    from kernel_select.errors import ConfigError

    word = text.strip()
    if word.lower() == "auto":
        return "auto"
    if word.upper() == "DEFAULT":
        return "DEFAULT"
    try:
        return int(word)
    except ValueError:
        pass
    try:
        return float(word)
    except ValueError:
        raise ConfigError(f"--gemm-topk: expected a count such as 4, a fraction such as 0.01, DEFAULT or "
                          f"auto, got {text!r}") from None


def require_gpu(command: str) -> None:
    import torch

    from kernel_select.errors import DeviceError

    if not torch.cuda.is_available():
        raise DeviceError(f"{command}: needs a CUDA GPU (torch.cuda.is_available() is False); it times "
                          "kernels on the device")


def emit_text(text: str, out: str | None) -> None:
    """Print `text`, or write it to the file `out` (creating its folder) atomically: an
    interrupted write leaves the old file, never a truncated one."""
    if out is None:
        sys.stdout.write(text)
        return
    write_atomic(out, text)


def read_json(path: str) -> object:
    """A JSON file's content; a LUTError naming the file when it cannot be read or parsed."""
    from kernel_select.errors import LUTError

    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise LUTError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise LUTError(f"{path}: not valid JSON: {exc}") from None


def load_lut_file(path: str) -> object:
    """A LUT loaded strictly; a missing file is named as such rather than as a parse error."""
    from kernel_select.errors import LUTError

    if not Path(path).is_file():
        raise LUTError(f"{path}: no such lookup table file")
    from kernel_select.lut import load_lut

    return load_lut(path)
