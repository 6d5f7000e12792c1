"""Conversion between a KernelLUT and the table format of `torch._inductor.lookup_table`.

Inductor's `LookupTableChoices` reads `torch._inductor.config.lookup_table.table`, a dict from a
string key to a list of template-kwarg dicts. A key spells the exact input layouts:

    "((torch.bfloat16, [560, 3420], [3420, 1]), (torch.bfloat16, [3420, 1280], [1280, 1]))+mm"

optionally prefixed with the device name ("NVIDIA H100 80GB HBM3+...") and, for addmm/baddbmm,
with "+alpha=1&beta=1" before the op name. On torch 2.11 an entry must carry every template kwarg
(BLOCK_*, GROUP_M, num_stages, num_warps, EVEN_K, ACC_TYPE, USE_FAST_ACCUM); ALLOW_TF32 is left to
Inductor. Nothing here imports torch: the table is plain data.

Operand layouts: a key spells each operand's strides, so it names a layout. An entry with a
`layout` is exported under the strides of that layout (for "nt", B [K, N] as the transposed view
[1, K] of an [N, K] buffer, as W.t() in x @ W.t()); an entry without one under row-major strides
only, so in torch's table it serves "nn" operands and no others (Inductor then autotunes the
others as usual: a miss, never a wrong match). Reading back, a key whose operands are each
row-major or an exact transposed view gives an entry of that layout, "nn" included: a key never
serves another layout, so neither does its entry. Other strides (padded, sliced) are skipped.

Limits: torch's keys are exact shapes, so LUT entries with an m or k range (and bmm entries
without a batch) cannot be exported and are skipped with a warning: a range is not expanded, since
one covering a sequence length would become thousands of keys.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from pydantic import ValidationError

from kernel_select.configs import GemmConfig, mm_template_kwargs
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import KernelSelectError, LUTError
from kernel_select.layouts import DEFAULT_LAYOUT, layout_from_strides
from kernel_select.lut import (
    ATEN,
    BATCHED_OPS,
    BatchedLUTEntry,
    KernelLUT,
    lut_from_rows,
    LUTEntry,
    LUTRow,
    SizeRange,
)
from kernel_select.lut.autotune_log import entry_error
from kernel_select.problem import TF32, Problem, dtype_name
from kernel_select.space import unfit_reason

log = logging.getLogger(__name__)

InductorTable = dict[str, list[dict[str, Any]]]

# alpha/beta as Inductor spells them for the default addmm/baddbmm (sorted, "&"-joined).
_SCALARS = {"addmm": "alpha=1&beta=1", "baddbmm": "alpha=1&beta=1"}


def template_id(op: str) -> str:
    """The Triton template uid Inductor uses for `op`."""
    return "triton::bmm" if op in BATCHED_OPS else "triton::mm"


# -- export --------------------------------------------------------------------------------------

def to_inductor_table(lut: KernelLUT, device_name: str | None = None, *,
                      keep_aten: bool = True) -> InductorTable:
    """Convert `lut` to a dict for `torch._inductor.config.lookup_table.table`.

    Args:
        lut: the table to export.
        device_name: the name torch reports for the GPU (`torch.cuda.get_device_name()`). With it,
            only that device's entries are exported, under device-specific keys; without it the
            keys are device-agnostic and the LUT must hold a single device.
        keep_aten: also list the ATen (cuBLAS) choice under each key. A lookup-table hit drops
            every template the entry does not name, so without it cuBLAS is never benchmarked.

    Raises:
        LUTError: if `device_name` is None and `lut` holds several devices.
        DeviceError: if `device_name` is not a known device.
    """
    rows = list(lut.entries())
    if device_name is not None:
        wanted = get_device(device_name).key
        rows = [row for row in rows if row.device == wanted]
    elif len({row.device for row in rows}) > 1:
        raise LUTError(f"the table holds entries for {', '.join(sorted(lut.devices))}; pass the "
                       "device name (e.g. 'NVIDIA H100 80GB HBM3') to export one device")
    table: InductorTable = {}
    for row in rows:
        problem = _exact_problem(row)
        if problem is None:
            continue
        entries = [_template_entry(config, problem) for config in row.entry.candidates]
        # A pinned entry exports exactly its one choice: aten alone, or the Triton config alone.
        if row.entry.pin == ATEN or (keep_aten and row.entry.pin is None):
            entries.append({"template_id": f"aten::{row.op}"})
        for key in _keys(problem, device_name, row.entry.layout or DEFAULT_LAYOUT):
            table[key] = [dict(entry) for entry in entries]
    return table


def _exact_problem(row: LUTRow) -> Problem | None:
    entry = row.entry
    where = f"{row.device}.{row.op}.{row.dtype} {entry.describe_key()}"
    if row.dtype == TF32:
        log.warning("Skipping LUT entry %s: torch's lookup_table keys cannot tell a GEMM run with TF32 "
                    "from one run in float32, so its entry would serve both", where)
        return None
    ranged = [name for name in ("m", "k") if isinstance(getattr(entry, name), SizeRange)]
    if ranged:
        log.warning("Skipping LUT entry %s: torch's lookup_table keys are exact shapes, so a range "
                    "of %s cannot be exported (it is not expanded)", where, " and ".join(ranged))
        return None
    if row.op in BATCHED_OPS and entry.batch_key is None:
        log.warning("Skipping LUT entry %s: torch's lookup_table keys need the batch size; add "
                    "\"batch\" to the entry to export it", where)
        return None
    return Problem(entry.m, entry.n, entry.k, row.dtype, batch=entry.batch_key or 1, op=row.op)


def _template_entry(config: GemmConfig, problem: Problem) -> dict[str, Any]:
    # ALLOW_TF32 is left out: Inductor derives it from the backend settings for each compile.
    return {"template_id": template_id(problem.op), **config.inductor_kwargs(problem),
            **mm_template_kwargs(problem)}


def _contiguous(shape: list[int]) -> list[int]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= size
    return strides[::-1]


def _view_strides(shape: list[int], transposed: bool) -> list[int]:
    """The strides of an operand of `shape`: row-major, or the transposed view of a row-major
    buffer with its last two dimensions swapped (as torch's .transpose(-2, -1) gives them)."""
    if not transposed:
        return _contiguous(shape)
    stored = _contiguous([*shape[:-2], shape[-1], shape[-2]])
    return [*stored[:-2], stored[-1], stored[-2]]


def _node(dtype: str, shape: list[int], stride: list[int]) -> str:
    # Matches str() of Inductor's (torch.dtype, list(shape), list(stride)) tuple.
    return f"(torch.{dtype}, {shape}, {stride})"


def _keys(problem: Problem, device_name: str | None, layout: str) -> list[str]:
    """Every key under which Inductor may look `problem` up with operands in `layout` (one per
    bias layout we export)."""
    m, n, k, b, dtype = problem.m, problem.n, problem.k, problem.batch, problem.dtype
    if problem.op in BATCHED_OPS:
        a_shape, b_shape, out_shape = [b, m, k], [b, k, n], [b, m, n]
        # A full bias, and a bias of shape [n] broadcast over batch and rows.
        bias_strides = [_contiguous(out_shape), [0, 0, 1]]
    else:
        a_shape, b_shape, out_shape = [m, k], [k, n], [m, n]
        # A full [m, n] bias, and nn.Linear's [n] bias broadcast over rows.
        bias_strides = [_contiguous(out_shape), [0, 1]]
    mats = [_node(dtype, shape, _view_strides(shape, letter == "t"))
            for shape, letter in zip((a_shape, b_shape), layout)]
    if problem.op in _SCALARS:
        inputs = [f"({_node(dtype, out_shape, stride)}, {', '.join(mats)})+{_SCALARS[problem.op]}"
                  for stride in bias_strides]
    else:
        inputs = [f"({', '.join(mats)})"]
    prefix = f"{device_name}+" if device_name is not None else ""
    return [f"{prefix}{part}+{problem.op}" for part in inputs]


# -- import --------------------------------------------------------------------------------------

_NODE = re.compile(r"\(torch\.(\w+), \[([\d, ]*)\], \[([\d, ]*)\]\)")
_KEY = re.compile(r"^(?:(?P<device>[^()]+?)\+)?(?P<inputs>\(.*\))(?:\+(?P<scalars>[\w.=&-]+))?\+(?P<op>\w+)$")


def from_inductor_table(table: dict[str, list[dict[str, Any]]], device: str | DeviceSpec, *,
                        source: str = "<inductor table>") -> KernelLUT:
    """Read a torch lookup_table dict back into a KernelLUT for `device`.

    Only Triton mm/bmm entries on contiguous row-major operands are read; other templates, layouts
    and keys for another device are skipped with a warning, ATen entries silently. Device-specific
    keys win over device-agnostic ones for the same problem. The table is one `lut validate`
    accepts: a config that cannot run on `device` (`space.unfit_reason`) is left out and a key the
    table cannot hold (a size of 0 or over 2^31 - 1) is skipped, each with a warning naming
    `source` (the file read), the key and the reason.

    Raises:
        LUTError: if `table` is not a dict of lists.
        DeviceError: if `device` is unknown.
    """
    if not isinstance(table, dict):
        raise LUTError(f"{source}: an Inductor lookup table is a JSON object of key -> [config, ...], got "
                       f"{type(table).__name__}")
    target = get_device(device)
    found: dict[tuple[str, int, int, int, int, str, str], tuple[str, list[GemmConfig]]] = {}
    # Device-specific keys first, so their configs lead when both spellings are present.
    for key in sorted(table, key=lambda key: not _has_device(key)):
        parsed = _parse_key(key, target.key)
        if parsed is None:
            continue
        configs = _configs(key, table[key], parsed[-2], source)
        _, slot = found.setdefault(parsed, (key, []))
        fitting = _fitting(key, configs, parsed[0], target, source)
        slot.extend(config for config in fitting if config not in slot)
    rows = []
    for (dtype, batch, m, n, k, op, layout), (key, configs) in found.items():
        if not configs:
            continue
        try:
            rows.append(LUTRow(target.key, op, dtype, _entry(op, batch, m, n, k, layout, configs)))
        except ValidationError as exc:  # m = 0, or a size over 2^31 - 1
            log.warning("%s: skipping Inductor lookup_table key %s: not a LUT entry: %s", source,
                        _shown(key), entry_error(exc))
    return lut_from_rows(rows, source=source)


def _fitting(key: str, configs: list[GemmConfig], dtype: str, device: DeviceSpec,
             source: str) -> list[GemmConfig]:
    """The configs that can run on `device`; each one left out is told with the figure and the limit."""
    kept = []
    for config in configs:
        reason = unfit_reason(config, dtype, device)
        if reason is None:
            kept.append(config)
        else:
            log.warning("%s: key %s: leaving out %s: cannot run on %s: %s", source, _shown(key),
                        config.short(), device.key, reason)
    return kept


def _shown(key: str) -> str:
    """A key as a message shows it: quoted, and cut short when long (a key may be megabytes)."""
    return repr(key) if len(key) <= 160 else repr(key[:160]) + "..."


def _entry(op: str, batch: int, m: int, n: int, k: int, layout: str, configs: list[GemmConfig]) -> LUTEntry:
    fields = {"m": m, "n": n, "k": k, "layout": layout, "configs": configs,
              "note": "from an Inductor lookup_table"}
    if op in BATCHED_OPS:
        return BatchedLUTEntry(batch=batch, **fields)
    return LUTEntry(**fields)


def _has_device(key: str) -> bool:
    match = _KEY.match(key)
    return bool(match and match.group("device"))


def _parse_key(key: str, target: str) -> tuple[str, int, int, int, int, str, str] | None:
    """(dtype, batch, m, n, k, op, layout) of a key on `target` whose operands are each row-major
    or a transposed view, else None."""
    match = _KEY.match(key)
    if match is None or match.group("op") not in ("mm", "addmm", "bmm", "baddbmm"):
        log.warning("Skipping Inductor lookup_table key %s: not an mm/addmm/bmm/baddbmm key", _shown(key))
        return None
    if match.group("device") is not None:
        try:
            on = get_device(match.group("device")).key
        except KernelSelectError:
            on = None
        if on != target:
            log.warning("Skipping Inductor lookup_table key %s: it is for device %r, not %s",
                        _shown(key), match.group("device"), target)
            return None
    op = match.group("op")
    try:
        nodes = [(dtype, _ints(shape), _ints(stride))
                 for dtype, shape, stride in _NODE.findall(match.group("inputs"))]
    except ValueError as exc:
        log.warning("Skipping Inductor lookup_table key %s: %s", _shown(key), exc)
        return None
    mats = nodes[-2:]
    rank = 3 if op in BATCHED_OPS else 2
    if len(nodes) != (3 if op in _SCALARS else 2) or any(len(shape) != rank for _, shape, _ in mats):
        log.warning("Skipping Inductor lookup_table key %s: unexpected inputs for %s", _shown(key), op)
        return None
    layout = layout_from_strides(*((shape, stride) for _, shape, stride in mats))
    if layout is None or any(stride != _view_strides(shape, letter == "t")
                             for (_, shape, stride), letter in zip(mats, layout)):
        log.warning("Skipping Inductor lookup_table key %s: only row-major operands and transposed "
                    "views of row-major buffers map to LUT entries", _shown(key))
        return None
    (a_dtype, a_shape, _), (b_dtype, b_shape, _) = mats
    try:
        dtype = dtype_name(a_dtype)
        if dtype_name(b_dtype) != dtype or a_shape[-1] != b_shape[-2] or a_shape[:-2] != b_shape[:-2]:
            raise ValueError("operands do not form a GEMM")
    except (KernelSelectError, ValueError) as exc:
        log.warning("Skipping Inductor lookup_table key %s: %s", _shown(key), exc)
        return None
    batch = a_shape[0] if rank == 3 else 1
    return (dtype, batch, a_shape[-2], b_shape[-1], a_shape[-1], op, layout)


def _ints(text: str) -> list[int]:
    """The sizes or strides of a key.

    Raises:
        ValueError: for a number of more than 19 digits (no GEMM has one, and Python refuses int()
            of thousands of digits with advice that is not the user's to follow).
    """
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if any(len(part) > 19 for part in parts):
        raise ValueError("a size or stride of more than 19 digits")
    return [int(part) for part in parts]


def _configs(key: str, entries: Any, op: str, source: str) -> list[GemmConfig]:
    if not isinstance(entries, list):
        raise LUTError(f"{source}: Inductor lookup table key {_shown(key)}: expected a list of configs, got "
                       f"{type(entries).__name__}")
    configs = []
    for entry in entries:
        tid = entry.get("template_id") if isinstance(entry, dict) else None
        if isinstance(tid, str) and tid.startswith("aten::"):
            continue
        if tid != template_id(op):
            log.warning("Skipping an entry of Inductor lookup_table key %s: template %r is not %s",
                        _shown(key), tid, template_id(op))
            continue
        try:
            configs.append(GemmConfig.from_inductor_kwargs(entry))
        except KernelSelectError as exc:
            log.warning("Skipping an entry of Inductor lookup_table key %s: %s", _shown(key), exc)
    return configs
