"""The command line's vocabulary: one flag per concept across every command, and the old spellings
that still work for one release.

Every command spells a concept the same way (VOCABULARY); tests/cli/test_vocabulary.py walks every
parser and checks it. An old spelling (DEPRECATED) keeps working until 1.2 with one warning on
stderr, except `--k` where it meant a count elsewhere than gate-rules: `--k` is the K dimension of a
problem. Choices are case-insensitive (`NT`, `EXHAUSTIVE`, `BF16`, `H100`); a dtype is read under any
of its aliases and passed on under its canonical name.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: Concept -> the one flag that spells it, in every command that has the concept.
VOCABULARY: dict[str, str] = {
    "how many configs are benchmarked (the gemm_topk knob)": "--gemm-topk",
    "the GPU (a device key: h100, h200, or a detected GPU's)": "--device",
    "the performance model (a registered model name)": "--model",
    "the user's network (MODULE:FACTORY)": "--network",
    "the zoo's networks (compare-models)": "--networks",
    "where a process runs (a torch device: cuda, cuda:N, cpu)": "--torch-device",
    "machine-readable JSON on stdout instead of the table": "--json",
    "a JSON report written to a file": "--json-out",
    "no progress bar": "--no-progress",
    "the whole run's time budget, in seconds": "--max-seconds",
    "one worker process's time limit, in seconds": "--worker-max-seconds",
    "a saved MLP scored instead of the shipped one": "--mlp-dir",
}

#: Old spelling -> its replacement, in the commands that had it (they go in 1.2).
DEPRECATED: dict[str, str] = {
    "-k": "--gemm-topk", "--topk": "--gemm-topk", "--top": "--gemm-topk",
    "--nogate-topk": "--nogate-gemm-topk",
    "--k (gate-rules)": "--gemm-topk",
    "--model (pretune, record, compare-models)": "--network", "--models": "--networks",
    "--device (compare-models)": "--torch-device", "--device-index": "--torch-device",
    "--json FILE": "--json-out FILE", "--quiet": "--no-progress", "--minutes": "--max-seconds",
    "--timeout": "--worker-max-seconds",
}

#: The release that drops the deprecated spellings.
REMOVED_IN = "1.2"


class _Deprecated(argparse.Action):
    """An old spelling: warns on stderr, then does what the new flag's action does."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new: argparse.Action,
                 convert: Callable[[Any], Any] | None = None, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.convert = new, convert

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: warning: {option_string} is deprecated and goes in {REMOVED_IN}; use "
              f"{self.new.option_strings[0]}", file=sys.stderr)
        if self.convert is not None:
            values = self.convert(values)
        self.new(parser, namespace, values, self.new.option_strings[0])


def deprecate(container: Any, old: str, new: argparse.Action, *,
              convert: Callable[[Any], Any] | None = None, type: Callable[[str], Any] | None = None) -> None:
    """Let `old` (e.g. "-k") still set what the flag `new` sets, with a warning. `container` is the
    parser or group `new` was added to; `type` replaces `new`'s (with `convert`, for another unit)."""
    container.add_argument(old, dest=new.dest, action=_Deprecated, new=new, convert=convert,
                           nargs=new.nargs, const=new.const, type=type or new.type, metavar=new.metavar,
                           default=argparse.SUPPRESS, help=argparse.SUPPRESS)


# -- argparse types ---------------------------------------------------------------------------------

def word(text: str) -> str:
    """An argparse type for choices: the word in lower case, so `NT` and `EXHAUSTIVE` are accepted."""
    return text.strip().lower()


def dtype(text: str) -> str:
    """An argparse type: a dtype under any alias (bf16, half, float32, torch.float16), as its
    canonical name."""
    from kernel_select.errors import ProblemError
    from kernel_select.problem import dtype_name

    try:
        return dtype_name(text)
    except ProblemError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("dtype: ")) from None


def dtypes(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated dtypes, each as its canonical name."""
    return tuple(dict.fromkeys(dtype(part) for part in text.split(",") if part.strip())) or (dtype(text),)


def layouts(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated operand layouts (nn, nt, tn, tt; any case)."""
    from kernel_select.errors import ProblemError
    from kernel_select.layouts import check_layout

    try:
        return tuple(dict.fromkeys(check_layout(part.strip().lower()) for part in text.split(",")))
    except ProblemError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("layout: ")) from None


def widths(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated positive layer widths, e.g. 256,128,64."""
    try:
        out = tuple(int(part) for part in text.split(","))
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: widths are comma-separated positive integers, "
                                         "e.g. 96,64,32")
    return out


def gemm_topk(text: str) -> int | float | str:
    """An argparse type: what the gemm_topk knob accepts (kernel_select.options.parse_topk)."""
    from kernel_select import options
    from kernel_select.errors import OptionError

    try:
        return options.parse_topk(text, source="--gemm-topk")
    except OptionError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--gemm-topk: ")) from None


def gemm_topk_count(text: str) -> int:
    """An argparse type: a gemm_topk value that is a count, for commands that keep a number of
    configs per problem (pretune, lut from-log, record)."""
    from kernel_select import options
    from kernel_select.errors import OptionError

    try:
        value = options.parse_topk(text, source="--gemm-topk")
    except OptionError:
        value = None
    if not isinstance(value, int):
        raise argparse.ArgumentTypeError(f"this command keeps a number of configs: expected an integer >= 1, "
                                         f"got {text.strip()[:40]!r}")
    return value


def gemm_topk_list(text: str) -> list[int | str]:
    """An argparse type: comma-separated gemm_topk values (compare, gate-rules)."""
    values = [gemm_topk(part) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated gemm_topk values such as 1,4, got "
                                         f"{text!r}")
    return list(dict.fromkeys(values))


def device(text: str) -> str:
    """An argparse type: a device key, alias or the name torch reports (any case), as its key."""
    from kernel_select.cli.devices import device_key

    return device_key(text)


def torch_device(text: str) -> str:
    """An argparse type: where a process runs, `cuda`, `cuda:N` or `cpu` (any case), checked before
    any worker starts."""
    import re

    word = text.strip().lower()
    if not re.fullmatch(r"cuda(:[0-9]+)?|cpu", word):
        raise argparse.ArgumentTypeError(f"expected cuda, cuda:N or cpu, got {text!r}")
    return word


def minutes_as_seconds(minutes: float) -> float:
    """--minutes' value in --max-seconds' unit."""
    return minutes * 60.0


# -- the flags --------------------------------------------------------------------------------------

def add_gemm_topk(parser: argparse.ArgumentParser, *, default: str | None = "4",
                  type: Callable[[str], Any] = gemm_topk, old: Sequence[str] = (),
                  what: str | None = None) -> None:
    """--gemm-topk, with the command's old spellings (`old`) deprecated."""
    help_text = what or ("how many configs to benchmark per GEMM: what the gemm_topk knob takes, a count "
                         "(4), DEFAULT (as many as Inductor's own list), auto (as many as the model is "
                         "unsure about) or SAME (Inductor's list passes through)")
    new = parser.add_argument("--gemm-topk", dest="gemm_topk", type=type, default=default, metavar="TOPK",
                              help=help_text if default is None else f"{help_text} (default: %(default)s)")
    for spelling in old:
        deprecate(parser, spelling, new)


def add_tf32(parser: argparse.ArgumentParser) -> None:
    """--tf32: the float32 GEMM runs with TF32 (`Problem.tf32`); another dtype is refused when the
    problem is built, in one line."""
    parser.add_argument("--tf32", action="store_true",
                        help="the float32 GEMM multiplies in TF32 on tensor cores, as Inductor runs it under "
                             "torch.set_float32_matmul_precision('high') (a problem of its own: its LUT "
                             "list is 'tf32'; the shipped models were not trained on it)")


def add_mlp_dir(parser: argparse.ArgumentParser, verb: str) -> None:
    """--mlp-dir: a saved MLP folder used instead of the shipped model, with the cuBLAS gate saved beside
    it where there is one (`model.folders.gate_in`), else the gate serving the device."""
    parser.add_argument("--mlp-dir", default=None,
                        help=f"{verb} the MLP saved in this directory instead of the shipped one, and the "
                             "cuBLAS gate saved beside it where there is one (else the serving gate)")


def add_json(parser: argparse.ArgumentParser, what: str = "the result", *, file_form: bool = False) -> None:
    """--json: print `what` as JSON on stdout instead of the table. With `file_form`, --json-out FILE
    writes it to a file too, and the old `--json FILE` still does that, deprecated."""
    if not file_form:
        parser.add_argument("--json", action="store_true",
                            help=f"print {what} as JSON on stdout instead of the table")
        return
    from kernel_select.cli.outputs import output_file

    out = parser.add_argument("--json-out", type=output_file, default=None, metavar="FILE",
                              help=f"also write {what} as JSON to FILE")
    parser.add_argument("--json", nargs="?", const=True, default=False, action=_JsonFlag, out=out,
                        help=f"print {what} as JSON on stdout instead of the table")


class _JsonFlag(argparse.Action):
    """--json, and the old --json FILE (now --json-out FILE), deprecated."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, out: argparse.Action,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.out = out

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values is True:
            setattr(namespace, self.dest, True)
            return
        print(f"{parser.prog}: warning: --json FILE is deprecated and goes in {REMOVED_IN}; use --json-out "
              "FILE (--json now prints to stdout)", file=sys.stderr)
        try:
            setattr(namespace, self.out.dest, self.out.type(values))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None


def add_no_progress(parser: argparse.ArgumentParser, *, old_quiet: bool = False) -> None:
    """--no-progress (and the old --quiet, deprecated, where the command had it)."""
    new = parser.add_argument("--no-progress", action="store_true",
                              help="no progress bar (for logs: the run's lines stay readable)")
    if old_quiet:
        deprecate(parser, "--quiet", new)


def add_network(container: Any, *, required: bool = False, append: bool = False, help: str) -> None:
    """--network MODULE:FACTORY (the old --model, deprecated)."""
    new = container.add_argument("--network", dest="network", metavar="MODULE:FACTORY", required=required,
                                 action="append" if append else "store", default=[] if append else None,
                                 help=help)
    deprecate(container, "--model", new)
