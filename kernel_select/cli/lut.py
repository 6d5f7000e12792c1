"""`kernel-select lut ...`: validate, format, show and convert kernel lookup tables."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import TYPE_CHECKING

from kernel_select.cli import flags
from kernel_select.cli.common import (
    Subparsers,
    add_device_arg,
    debug_requested,
    emit_text,
    flush_stdout,
    printable,
    say,
)
from kernel_select.cli.devices import DEVICE_HELP
from kernel_select.cli.outputs import output_file
from kernel_select.errors import KernelSelectError, LUTError

if TYPE_CHECKING:
    from kernel_select.lut import KernelLUT, LUTEntry


def register(sub: Subparsers) -> None:
    p = sub.add_parser("lut", help="validate, format, show and convert kernel lookup tables",
                       description="Work with kernel lookup tables (LUTs): JSON files of hand-picked "
                                   "configs per device, op, dtype and problem that are always "
                                   "benchmarked.")
    lut_sub = p.add_subparsers(dest="lut_command", metavar="LUT_COMMAND", required=True)
    _register_checks(lut_sub)
    _register_converters(lut_sub)


def _register_checks(lut_sub: Subparsers) -> None:
    q = lut_sub.add_parser("validate", help="check LUT files strictly",
                           description="Load each LUT strictly; print one line per file. Exits 2 if "
                                       "any file is invalid.")
    q.add_argument("paths", nargs="+", metavar="PATH")
    add_device_arg(q, "also warn when the LUT has no entries for this device (every table is always "
                      "checked against the device it is keyed by: shared memory, registers, threads)")
    q.set_defaults(handler=run_validate)

    q = lut_sub.add_parser("fmt", help="rewrite LUT files in the canonical layout",
                           description="Rewrite each LUT in place in the canonical layout (sorted, "
                                       "2-space indent, one config per line, trailing newline). A "
                                       "symlink is followed and the file's mode kept; a read-only or "
                                       "hard-linked file is refused (docs/guide.md#lookup-tables).")
    q.add_argument("paths", nargs="+", metavar="PATH")
    q.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if a file is not in canonical layout")
    q.set_defaults(handler=run_fmt)

    q = lut_sub.add_parser("show", help="print a LUT as a table",
                           description="Print the entries of a LUT, one line per entry.")
    q.add_argument("path", metavar="PATH")
    add_device_arg(q, "only this device (h100, 'NVIDIA H100 80GB HBM3', ...; any case)")
    flags.add_json(q, "the entries (canonical LUT JSON)")
    q.set_defaults(handler=run_show)


def _register_converters(lut_sub: Subparsers) -> None:
    q = lut_sub.add_parser("from-log", help="build a LUT from Inductor AUTOTUNE log output",
                           description="Read the AUTOTUNE blocks max-autotune prints to stderr and keep "
                                       "the fastest Triton configs of every mm/addmm/bmm/baddbmm.")
    q.add_argument("log", metavar="LOG", help="log file, or - for stdin")
    flags.add_gemm_topk(q, default="1", type=flags.gemm_topk_count, old=("--top",),
                        what="Triton configs to keep per problem, fastest first: a count")
    add_device_arg(q, f"device the log was taken on: {DEVICE_HELP} (default: the GPU this runs on; h100 "
                      "without one)")
    q.add_argument("--out", type=output_file, default=None, help="write the LUT here instead of printing it")
    q.set_defaults(handler=run_from_log)

    q = lut_sub.add_parser("to-inductor", help="convert a LUT to torch._inductor.lookup_table's format",
                           description="Print the LUT as a dict for torch._inductor.config.lookup_table."
                                       "table. Entries with an m range (and bmm entries without a "
                                       "batch) cannot be expressed there and are skipped with a warning.")
    q.add_argument("path", metavar="PATH")
    q.add_argument("--device-name", default=None,
                   help="device name as torch.cuda.get_device_name() reports it, for device-specific "
                        "keys (default: device-agnostic keys; the LUT must hold one device)")
    q.add_argument("--no-aten", action="store_true",
                   help="do not list the ATen choice, so a hit benchmarks only the LUT configs")
    q.add_argument("--out", type=output_file, default=None, help="write the JSON here instead of printing it")
    q.set_defaults(handler=run_to_inductor)

    q = lut_sub.add_parser("from-inductor", help="convert a torch._inductor.lookup_table JSON file to a LUT",
                           description="Read a JSON dict in torch._inductor.lookup_table's format. Only "
                                       "triton::mm/triton::bmm entries on contiguous operands are kept.")
    q.add_argument("path", metavar="PATH")
    add_device_arg(q, "device the LUT entries are for, e.g. h100 (any case)", required=True)
    q.add_argument("--out", type=output_file, default=None, help="write the LUT here instead of printing it")
    q.set_defaults(handler=run_from_inductor)

    q = lut_sub.add_parser("schema", help="print the JSON schema of the LUT format",
                           description="Print the JSON schema generated from the LUT models; it is "
                                       "committed as luts/schema/lut.v4.schema.json.")
    q.add_argument("--out", type=output_file, default=None,
                   help="write the schema here instead of printing it")
    q.set_defaults(handler=run_schema)


def run_validate(args: argparse.Namespace) -> int:
    from kernel_select.device import get_device
    from kernel_select.lut import check_fits, load_lut

    device = get_device(args.device) if args.device else None
    failed = 0
    for path in args.paths:
        try:
            lut = load_lut(path)
            if device is not None and not check_fits(lut, device, source=path):
                say(f"kernel-select: warning: {printable(path)}: no entries for {device.key}", stderr=True)
            # Each table is also checked against the device it is keyed by: a config that cannot
            # run there is an error whether or not --device names it.
            for key in sorted(lut.devices):
                check_fits(lut, get_device(key), source=path)
        except KernelSelectError as exc:
            # One bad file must not hide the verdict on the others: report it and go on.
            if debug_requested(args):
                traceback.print_exc()
            say(f"kernel-select: error: {printable(exc)}", stderr=True)
            failed += 1
            continue
        devices = ", ".join(sorted(lut.devices)) or "no devices"
        say(f"{printable(path)}: ok, {lut.num_entries} entries ({devices})")
    flush_stdout()
    return 2 if failed else 0


def run_fmt(args: argparse.Namespace) -> int:
    """Not locked: the canonical text is a function of the table, so two runs on one file write
    the same bytes, each atomically. What a lock could not stop either is an edit made while a
    run formats; `_replace_unless_edited` catches that instead."""
    from kernel_select.lut import dump_lut, parse_lut, read_lut_bytes

    unformatted = 0
    for path in args.paths:
        original = read_lut_bytes(path)
        lut = parse_lut(original, source=path)
        canonical = dump_lut(lut).encode("utf-8")
        if original == canonical:
            continue
        unformatted += 1
        if args.check:
            say(f"would reformat {printable(path)}")
        else:
            _replace_unless_edited(path, lut, original, canonical)
            say(f"reformatted {printable(path)}")
    flush_stdout()
    return 1 if args.check and unformatted else 0


def _replace_unless_edited(path: str, lut: KernelLUT, original: bytes, canonical: bytes) -> None:
    """Save `lut` over `path` if the file still holds `original` (or already `canonical`: another
    fmt run got there first). An edit saved since it was read is kept and reported."""
    from kernel_select.lut import read_lut_bytes, save_lut

    current = read_lut_bytes(path)
    if current == canonical:
        return
    if current != original:
        raise LUTError(printable(f"{path}: changed while it was being formatted; the new content is kept, "
                                 "run `kernel-select lut fmt` on it again"))
    save_lut(lut, path)  # atomic: a killed rewrite leaves the original


def run_show(args: argparse.Namespace) -> int:
    from kernel_select.device import get_device
    from kernel_select.lut import BATCHED_OPS, dump_lut, load_lut, lut_from_rows
    from kernel_select.lut.entries import describe_bounds

    lut = load_lut(args.path)
    rows = list(lut.entries())
    if args.device is not None:
        wanted = get_device(args.device).key
        rows = [row for row in rows if row.device == wanted]
    if args.json:
        emit_text(dump_lut(lut_from_rows(rows)), None)
        return 0
    if not rows:
        say(f"{printable(args.path)}: no entries")
        flush_stdout()
        return 0
    table = [("device", "op", "dtype", "m", "n", "k", "batch", "layout", "configs (in order)", "note")]
    for row in rows:
        batch = row.entry.batch_key
        table.append((row.device, row.op, row.dtype, describe_bounds(row.entry.m),
                      str(row.entry.n), describe_bounds(row.entry.k),
                      "-" if row.op not in BATCHED_OPS else "any" if batch is None else str(batch),
                      row.entry.layout or "any", _choices_text(row.entry), printable(row.entry.note or "")))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    for line in table:
        say("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1])
    flush_stdout()
    return 0


def _choices_text(entry: LUTEntry) -> str:
    """The configs of an entry, in order, or "pin: ..." for a pinned one (which has no configs)."""
    if entry.configs is None:
        return f"pin: {entry.pin if isinstance(entry.pin, str) else entry.pin.short()}"
    return ", ".join(config.short() for config in entry.configs)


def run_from_log(args: argparse.Namespace) -> int:
    from kernel_select.lut import dump_lut
    from kernel_select.lut.autotune_log import lut_from_autotune_log, parse_autotune_log
    from kernel_select.lut.bounded_read import AUTOTUNE_LOG_FILE, read_bounded, read_stream_bounded

    if args.log == "-":
        source, data = "<stdin>", read_stream_bounded(sys.stdin.buffer, AUTOTUNE_LOG_FILE)
    else:
        source, data = args.log, read_bounded(args.log, AUTOTUNE_LOG_FILE)
    text = data.decode("utf-8", errors="replace")  # a log may hold any bytes; its blocks are ASCII
    from kernel_select.cli.devices import device_text, serving_device

    spec, origin = serving_device(args.device)
    lut = lut_from_autotune_log(text, spec.key, top=args.gemm_topk, source=source)
    emit_text(dump_lut(lut), args.out)
    say(f"{printable(source)}: {lut.num_entries} LUT entries for {device_text(spec, origin)} from "
        f"{len(parse_autotune_log(text))} AUTOTUNE blocks"
        + (f", written to {printable(args.out)}" if args.out else ""), stderr=True)
    return 0


def run_to_inductor(args: argparse.Namespace) -> int:
    from kernel_select.lut import load_lut
    from kernel_select.lut.torch_table import to_inductor_table

    table = to_inductor_table(load_lut(args.path), args.device_name, keep_aten=not args.no_aten)
    emit_text(json.dumps(table, indent=2) + "\n", args.out)
    return 0


def run_from_inductor(args: argparse.Namespace) -> int:
    from kernel_select.lut import dump_lut
    from kernel_select.lut.bounded_read import INDUCTOR_TABLE_FILE, read_json
    from kernel_select.lut.torch_table import from_inductor_table

    lut = from_inductor_table(read_json(args.path, INDUCTOR_TABLE_FILE), args.device, source=args.path)
    emit_text(dump_lut(lut), args.out)
    return 0


def run_schema(args: argparse.Namespace) -> int:
    from kernel_select.lut import json_schema

    emit_text(json_schema(), args.out)
    return 0
