"""Read Inductor's AUTOTUNE log output, and turn it into a kernel lookup table.

With max-autotune, Inductor prints one block per tuned GEMM to stderr:

    AUTOTUNE mm(560x3420, 3420x1280)
    strides: [3420, 1], [1280, 1]
    dtypes: torch.bfloat16, torch.bfloat16
      triton_mm_11 0.0303 ms 100.0% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=64, ...
      mm 0.0534 ms 88.3%
    SingleProcess AUTOTUNE benchmarking takes 0.4721 seconds and ...

Sizes are the input nodes' shapes: mm(MxK, KxN), addmm(bias, MxK, KxN), bmm(BxMxK, BxKxN),
baddbmm(bias, BxMxK, BxKxN); strides are theirs in the same order, and tell the operand layout
(kernel_select.layouts: above, A = 560x3420 row-major, B = 3420x1280 row-major, "nn"). An entry
names the layout where the strides prove one and serves every layout where they do not. Choices
are sorted fastest first; ATen choices have no description.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

from pydantic import ValidationError

from kernel_select.configs import GemmConfig, config_from_description, parse_inductor_description
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import KernelSelectError, LUTError, ProblemError
from kernel_select.layouts import DEFAULT_LAYOUT, layout_from_strides
from kernel_select.lut import BATCHED_OPS, BatchedLUTEntry, KernelLUT, lut_from_rows, LUTEntry, LUTRow
from kernel_select.problem import SUPPORTED_OPS, Problem, dtype_name
from kernel_select.space import unfit_reason

log = logging.getLogger(__name__)

# A "[rank0]:" prefix appears when torch.distributed tags stderr lines.
_PREFIX = r"^(?:\[rank\d+\]:)?"
_HEADER = re.compile(_PREFIX + r"AUTOTUNE (\w+)\(([^)]*)\)\s*$")
_STRIDES = re.compile(_PREFIX + r"strides: (.*)$")
_DTYPES = re.compile(_PREFIX + r"dtypes: (.*)$")
_CHOICE = re.compile(_PREFIX + r"\s+(\S+) (\S+) ms (\S+%|<DIVIDED BY ZERO ERROR>) ?(.*)$")
# Only Inductor's own mm/bmm templates: persistent-TMA, decompose-k and others use other kernels.
_GEMM_TEMPLATE_CHOICE = re.compile(r"^triton_(?:mm|bmm)_\d+$")


@dataclass(frozen=True)
class AutotuneChoice:
    """One benchmarked choice of an AUTOTUNE block."""

    name: str  # "triton_mm_11", or "mm"/"addmm"/"bmm" for ATen
    time_ms: float  # inf when the choice failed
    description: str  # template kwargs for Triton choices, "" for ATen

    def gemm_config(self) -> GemmConfig | None:
        """The config of an Inductor mm/bmm template choice; None for any other choice."""
        if not _GEMM_TEMPLATE_CHOICE.match(self.name) or not self.description:
            return None
        try:
            return config_from_description(self.description)
        except KernelSelectError as exc:
            log.debug("Cannot read a config from choice %s: %s", self.name, exc)
            return None

    def allow_tf32(self) -> bool:
        """Whether this is an mm/bmm template choice whose kernel ran with ALLOW_TF32=True."""
        if not _GEMM_TEMPLATE_CHOICE.match(self.name):
            return False
        try:
            return parse_inductor_description(self.description).get("ALLOW_TF32") is True
        except Exception:  # noqa: BLE001 -- an unreadable description names no precision
            return False


@dataclass(frozen=True)
class AutotuneBlock:
    """One `AUTOTUNE op(sizes)` block: the problem and its choices, fastest first."""

    op: str
    sizes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    choices: tuple[AutotuneChoice, ...]
    line: int  # 1-based line number of the header
    strides: tuple[tuple[int, ...], ...] = ()  # per input node; () when missing or symbolic

    def layout(self) -> str | None:
        """The operand layout the strides prove, or None (no strides line, symbolic strides, or
        an operand that is neither row-major nor a transposed view)."""
        if len(self.strides) != len(self.sizes) or len(self.sizes) < 2:
            return None
        a, b = zip(self.sizes[-2:], self.strides[-2:])
        return layout_from_strides(a, b)

    def problem(self) -> Problem:
        """The GEMM of this block.

        Raises:
            ProblemError: for an op other than mm/addmm/bmm/baddbmm, or shapes that do not chain.
        """
        if self.op not in SUPPORTED_OPS:
            raise ProblemError(f"op {self.op!r} is not a GEMM kernel_select handles")
        rank = 3 if self.op in BATCHED_OPS else 2
        if len(self.sizes) < 2 or any(len(size) != rank for size in self.sizes[-2:]):
            raise ProblemError(f"unexpected operand shapes {self.sizes} for {self.op}")
        a, b = self.sizes[-2:]  # the bias of addmm/baddbmm comes first
        if a[-1] != b[-2] or a[:-2] != b[:-2]:
            raise ProblemError(f"operand shapes {self.sizes} do not form a GEMM")
        if not self.dtypes:
            raise ProblemError("no dtypes line after the AUTOTUNE header")
        dtype = dtype_name(self.dtypes[-2])
        # A float32 GEMM whose template kernels ran with ALLOW_TF32 is a TF32 problem (its "tf32" list).
        tf32 = dtype == "float32" and any(choice.allow_tf32() for choice in self.choices)
        return Problem(m=a[-2], n=b[-1], k=a[-1], dtype=dtype, batch=a[0] if rank == 3 else 1, op=self.op,
                       layout=self.layout() or DEFAULT_LAYOUT, tf32=tf32)

    def best_configs(self, top: int) -> list[GemmConfig]:
        """The `top` fastest distinct mm/bmm template configs that ran, in log order."""
        out: list[GemmConfig] = []
        for choice in self.choices:
            config = choice.gemm_config() if math.isfinite(choice.time_ms) else None
            if config is not None and config not in out:
                out.append(config)
                if len(out) == top:
                    break
        return out


def parse_autotune_log(text: str) -> list[AutotuneBlock]:
    """Every AUTOTUNE block in `text`, in order. Unrelated lines are ignored."""
    blocks: list[AutotuneBlock] = []
    header: tuple[str, str, int] | None = None
    dtypes: tuple[str, ...] = ()
    strides: tuple[tuple[int, ...], ...] = ()
    choices: list[AutotuneChoice] = []

    def close() -> None:
        if header is not None:
            op, sizes, line = header
            blocks.append(AutotuneBlock(op, _sizes(sizes), dtypes, tuple(choices), line, strides))

    for number, line in enumerate(text.splitlines(), start=1):
        if match := _HEADER.match(line):
            close()
            header, dtypes, strides, choices = (match.group(1), match.group(2), number), (), (), []
        elif header is None:
            continue
        elif match := _STRIDES.match(line):
            strides = _strides(match.group(1))
        elif match := _DTYPES.match(line):
            dtypes = tuple(part.strip() for part in match.group(1).split(","))
        elif match := _CHOICE.match(line):
            choices.append(AutotuneChoice(match.group(1), _time(match.group(2)), match.group(4).strip()))
        else:  # the "... AUTOTUNE benchmarking takes ..." summary, or anything else, ends a block
            close()
            header = None
    close()
    return blocks


def _sizes(text: str) -> tuple[tuple[int, ...], ...]:
    try:
        return tuple(tuple(int(dim) for dim in part.strip().split("x")) for part in text.split(","))
    except ValueError:  # symbolic sizes: the block is reported as unusable by problem()
        return ()


def _strides(text: str) -> tuple[tuple[int, ...], ...]:
    """"[1, 1280], [3420, 1]" -> ((1, 1280), (3420, 1)); () when a stride is symbolic."""
    try:
        return tuple(tuple(int(part) for part in group.split(",") if part.strip())
                     for group in re.findall(r"\[([^\]]*)\]", text))
    except ValueError:
        return ()


def _time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.inf


def lut_from_autotune_log(text: str, device: str | DeviceSpec, *, top: int = 1,
                          source: str = "<log>") -> KernelLUT:
    """A LUT holding the `top` fastest Triton configs of every GEMM autotuned in `text`.

    The first block wins when a problem was tuned more than once. An entry names the operand
    layout its block's strides prove (none where they prove none; such a block is skipped when
    its shape was read with a layout, or the reverse, since the two entries would overlap).
    Blocks that are not GEMMs or have no usable Triton choice are skipped with a log message.
    The table is one `lut validate` accepts: a config that cannot run on `device` (shared memory,
    registers, threads: `space.unfit_reason`) is left out, and a GEMM the table cannot hold
    (m = 0, a size over 2^31 - 1) is skipped, each with a warning naming `source`, the block's
    line and the reason.

    Raises:
        LUTError: if `top` < 1 or the text has no usable AUTOTUNE block.
        DeviceError: if `device` is unknown.
    """
    if top < 1:
        raise LUTError(f"top: keep at least one config per problem, got {top}")
    device_spec = get_device(device)
    rows: dict[tuple[str, str, int, int, int, int], dict[str | None, LUTRow]] = {}
    blocks = parse_autotune_log(text)
    for block in blocks:
        where = f"{source}:{block.line}"
        try:
            problem = block.problem()
        except KernelSelectError as exc:
            # Another op (a convolution, flex attention) is expected; a GEMM that is no problem
            # (m = 0) is not, and is told.
            report = log.info if block.op not in SUPPORTED_OPS else log.warning
            report("%s: skipping AUTOTUNE %s block: %s", where, block.op, exc)
            continue
        configs = _fitting(block.best_configs(len(block.choices) or 1), problem, device_spec, where)[:top]
        layout = block.layout()
        shape = (problem.op, problem.precision, problem.batch, problem.m, problem.n, problem.k)
        read = rows.setdefault(shape, {})  # layout (None: unknown) -> row
        if not configs or layout in read or (read and None in (layout, *read)):
            reason = ("no Triton mm choice ran that fits the device" if not configs
                      else "problem already read from an earlier block")
            log.info("%s: skipping AUTOTUNE block for %s: %s", where, problem, reason)
            continue
        note = (f"Inductor AUTOTUNE log {where}: top {len(configs)} Triton of "
                f"{len(block.choices)} shown choices")
        try:
            read[layout] = LUTRow(device_spec.key, problem.op, problem.precision,
                                  _entry(problem, layout, configs, note))
        except ValidationError as exc:  # a size the table cannot hold (m > 2^31 - 1)
            log.warning("%s: skipping AUTOTUNE block for %s: not a LUT entry: %s", where, problem,
                        entry_error(exc))
    if not any(rows.values()):
        raise LUTError(f"{source}: no usable AUTOTUNE mm/addmm/bmm/baddbmm block with Triton choices "
                       f"({len(blocks)} blocks found); run with max-autotune and stderr captured")
    return lut_from_rows((row for read in rows.values() for row in read.values()), source=source)


def _fitting(configs: list[GemmConfig], problem: Problem, device: DeviceSpec, where: str) -> list[GemmConfig]:
    """The configs that can run on `device` (`lut validate` refuses a table holding another); each
    one left out is told, with the figure and the limit."""
    kept = []
    for config in configs:
        reason = unfit_reason(config, problem.dtype, device)
        if reason is None:
            kept.append(config)
        else:
            log.warning("%s: leaving out %s for %s: cannot run on %s: %s", where, config.short(), problem,
                        device.key, reason)
    return kept


def entry_error(exc: ValidationError) -> str:
    """pydantic's first error as "field: message", the one line a skipped entry is told with."""
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"] if part not in ("exact", "range"))
    return f"{field}: {error['msg']}" if field else error["msg"]


def _entry(problem: Problem, layout: str | None, configs: list[GemmConfig], note: str) -> LUTEntry:
    fields = {"m": problem.m, "n": problem.n, "k": problem.k, "layout": layout, "configs": configs,
              "note": note}
    if problem.op in BATCHED_OPS:
        return BatchedLUTEntry(batch=problem.batch, **fields)
    return LUTEntry(**fields)
