"""`kernel-select` command line: assembles the command groups' parsers and turns errors into exit codes.

Every command exits 0 on success and 2 with one line, `kernel-select: error: ...`, on bad input:
a bad flag, a bad file, a bad value, or a library of an extra that is not installed (the line
names the extra to install). The traceback behind such an error is printed only with `--debug` or
KERNEL_SELECT_DEBUG=1; anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from kernel_select.cli import (average_models, calibrate, compare, compare_models, data, doctor, gate_rules,
                               lut, model, select_cmds, serving, shapes, space)
from kernel_select.cli.common import DEBUG_ENV, OneLineParser, Subparsers, flush_stdout
from kernel_select._version import __version__
from kernel_select.errors import KernelSelectError
from kernel_select.text import printable


#: The top-level modules of pyproject.toml's optional dependencies -> the extra that installs them.
#: The core install (torch, pydantic, numpy) ranks configs; a command that imports one of these
#: without it installed names the extra instead of tracing back.
EXTRA_OF_MODULE: dict[str, str] = {
    "pandas": "offline", "pyarrow": "offline", "scipy": "offline", "tqdm": "offline", "matplotlib": "offline",
    "filelock": "offline",
    "transformers": "models",
    "nvMatmulHeuristics": "baselines",
    "lightgbm": "train",
}

#: Subcommands in the order `kernel-select --help` lists them.
_REGISTER: tuple[Callable[[Subparsers], None], ...] = (
    space.register, select_cmds.register_topk, select_cmds.register_demo, shapes.register_shapes,
    data.register_bench, data.register_audit, data.register_fidelity, lut.register, compare.register,
    compare_models.register,
    model.register_train, model.register_train_gate, average_models.register,
    model.register_eval, gate_rules.register_gate_rules,
    calibrate.register,
    serving.register, doctor.register,
)


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="kernel-select",
        description="Rank Triton GEMM configs with a performance model and a hand-editable lookup "
                    "table, so max-autotune benchmarks only the top-k.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help=f"print the traceback behind an error (or set {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _REGISTER:
        register(sub)
    return parser


def one_line(exc: BaseException) -> str:
    """The error's message on one line, control characters escaped (a file name or JSON key from
    the input must not move the cursor or ring the terminal)."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc) or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return printable("; ".join(lines))


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra whose library `exc` failed to import, if that library is not installed (None for
    any other module, and for an installed library that failed on a missing submodule: a bug or a
    broken install, whose traceback is the useful report)."""
    top = (exc.name or "").partition(".")[0]
    if top not in EXTRA_OF_MODULE or importlib.util.find_spec(top) is not None:
        return None
    return EXTRA_OF_MODULE[top]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        code = args.handler(args)
        flush_stdout()  # a full stdout (`> /dev/full`) is an error naming <stdout> here, not at exit
        return code
    except KeyboardInterrupt:
        parser.exit(130, "kernel-select: interrupted\n")
    except BrokenPipeError:
        # `kernel-select demo | head`: the reader left; stop quietly, as Unix tools do.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- keeps the interpreter's final flush silent
        return 141
    except (KernelSelectError, OSError, ValueError) as exc:
        # Bad input (a file, a value): the user needs the one line that names it, not our stack.
        if debug:
            traceback.print_exc()
        parser.exit(2, f"kernel-select: error: {one_line(exc)}\n")
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc)
        if extra is None:
            raise
        if debug:
            traceback.print_exc()
        parser.exit(2, f"kernel-select: error: {args.command!r} needs the {extra} extra: "
                       f"pip install 'kernel_select[{extra}]'\n")
    return 0
