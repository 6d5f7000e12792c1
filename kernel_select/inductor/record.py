"""Turn a user's own max-autotune run into a LUT: `kernel_select.record()`.

    with kernel_select.record("luts/mine.json"):
        compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
        compiled(*example_inputs)          # compiles, and Inductor benchmarks every GEMM

Inductor calls feedback savers (torch._inductor.select_algorithm.add_feedback_saver) with the
timings of every GEMM it really benchmarks. A warm cache benchmarks nothing, so the block runs
with `torch.compiler.config.force_disable_caches` on (restored afterwards). Each autotuned GEMM
becomes a pinned entry (its fastest pinnable choice: a Triton GEMM config or ATen), or with
`pin=False` an entry of its fastest Triton configs to benchmark; an entry names the operand
layout its input nodes' strides prove (none where they prove none). Inductor does not catch
exceptions raised in a feedback saver, so the saver here never raises.

The conversion from feedback to a LUT (`lut_from_feedback`) is pure and runs on the CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kernel_select import runtime
from kernel_select.atomic_write import check_writable
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import DeviceError, first_line, LUTError
from kernel_select.inductor import inputs
from kernel_select.inductor.probe import ChoiceTiming, choice_timing, feedback_saver
from kernel_select.layouts import DEFAULT_LAYOUT
from kernel_select.lut import (
    ATEN,
    BatchedLUTEntry,
    KernelLUT,
    load_lut,
    lut_from_rows,
    LUTEntry,
    LUTRow,
    merge_luts,
    MRange,
    save_lut,
)
from kernel_select.problem import Problem, dtype_name

log = logging.getLogger(__name__)

RECORDED_OPS = ("mm", "addmm", "bmm", "baddbmm")


@dataclasses.dataclass(frozen=True)
class Feedback:
    """What Inductor measured for one GEMM: the problem (hinted sizes), the m range a symbolic M
    was declared with (None for a static M), every choice's time, and the operand layout the
    strides prove (None where they prove none: the problem says "nn", the entry names none)."""

    problem: Problem
    m_range: tuple[int, int] | None
    timings: tuple[ChoiceTiming, ...]
    layout: str | None = None


@dataclasses.dataclass
class Recording:
    """What `record()` collected; `lut` is set when the block ends."""

    feedback: list[Feedback] = dataclasses.field(default_factory=list)
    skipped: int = 0  # feedback calls that could not be read (not a GEMM we model, odd inputs)
    lut: KernelLUT | None = None


def lut_from_feedback(feedback: Sequence[Feedback], device: DeviceSpec | str, *, pin: bool = True,
                      top: int = 4, source: str = "kernel_select.record") -> KernelLUT:
    """A LUT with one entry per recorded GEMM (the last recording of a problem wins).

    pin=True: the entry pins the fastest choice that a LUT can name (a Triton GEMM config or
    ATen); pin=False: it lists the `top` fastest Triton configs, to be benchmarked. GEMMs with no
    finite timing of a nameable choice are left out.
    """
    spec = device if isinstance(device, DeviceSpec) else get_device(device)
    rows: dict[tuple[Any, ...], LUTRow] = {}
    for item in feedback:
        entry = _entry(item, pin, top, source)
        if entry is None:
            log.info("kernel_select.record: %s: no Triton or ATen choice ran; left out", item.problem)
            continue
        key = (item.problem.op, item.problem.precision, entry.n, entry.k, entry.m_bounds, entry.layout)
        rows[key] = LUTRow(spec.key, item.problem.op, item.problem.precision, entry)
    return lut_from_rows(rows.values(), source="<recorded>")


def _entry(item: Feedback, pin: bool, top: int, source: str) -> LUTEntry | None:
    ran = sorted((t for t in item.timings if t.ms < float("inf")), key=lambda t: t.ms)
    nameable = [t for t in ran if t.kind == "extern" or (t.kind == "triton" and t.config is not None)]
    triton = list(dict.fromkeys(t.config for t in nameable if t.kind == "triton"))
    if not nameable or (not pin and not triton):
        return None
    problem = item.problem
    m: int | MRange = problem.m if item.m_range is None else MRange(min=item.m_range[0], max=item.m_range[1])
    best = nameable[0]
    fields: dict[str, Any] = {"m": m, "n": problem.n, "k": problem.k, "layout": item.layout}
    if problem.op in ("bmm", "baddbmm"):
        fields["batch"] = problem.batch
    if pin:
        fields["pin"] = ATEN if best.kind == "extern" else best.config
        what = f"pinned {best.label()} ({best.ms:.4f} ms, fastest of {len(ran)} at m={problem.m})"
    else:
        fields["configs"] = triton[:top]
        what = f"top {len(fields['configs'])} Triton of {len(ran)} at m={problem.m}"
    fields["note"] = f"{source}: {what}"
    return BatchedLUTEntry(**fields) if "batch" in fields else LUTEntry(**fields)


# -- the feedback saver (inside torch.compile) ------------------------------------------------------

def feedback_of(name: str, input_nodes: Sequence[Any], timings: dict[Any, float]) -> Feedback | None:
    """Feedback for one autotuned op, or None when it is not a GEMM kernel_select records."""
    from torch._inductor import select_algorithm
    from torch._inductor.virtualized import V

    if name not in RECORDED_OPS or len(input_nodes) < 2:
        return None
    mat1, mat2 = input_nodes[-2], input_nodes[-1]  # addmm/baddbmm put the bias first
    sizes1, sizes2 = list(mat1.get_size()), list(mat2.get_size())
    sizevars = V.graph.sizevars
    hint = [int(sizevars.size_hint(s)) for s in sizes1]
    n = int(sizevars.size_hint(sizes2[-1]))
    batch = hint[0] if name in ("bmm", "baddbmm") and len(hint) == 3 else 1
    layout = inputs.proven_layout(mat1, mat2)
    problem = Problem(hint[-2], n, hint[-1], dtype_name(mat1.get_dtype()), batch=batch, op=name,
                      layout=layout or DEFAULT_LAYOUT)
    if problem.dtype == "float32" and inputs.runs_tf32(_Sizes(sizes1[-2], sizes2[-1], sizes1[-1])):
        problem = dataclasses.replace(problem, tf32=True)  # its entry goes to the "tf32" list
    m_range = _declared(sizes1[-2])
    choices = tuple(choice_timing(select_algorithm, c, ms) for c, ms in timings.items())
    return Feedback(problem, m_range, choices, layout)


def _declared(m_expr: Any) -> tuple[int, int] | None:
    return inputs.declared_range(m_expr) if inputs.symbolic_m(_Sizes(m_expr)) is not None else None


class _Sizes:
    """Adapts size expressions to what `inputs.symbolic_m` and `inputs.runs_tf32` read."""

    def __init__(self, m: Any, n: Any = None, k: Any = None) -> None:
        self._mnk = (m, n, k)

    def mnk_symbolic(self) -> tuple[Any, Any, Any]:
        return self._mnk


@contextlib.contextmanager
def record(path: str | os.PathLike[str] | None = None, *, device: str | None = None, pin: bool = True,
           top: int = 4) -> Iterator[Recording]:
    """Record the GEMMs Inductor autotunes inside the block into a LUT (see the module doc).

    Args:
        path: where to write the LUT; entries already in the file are kept unless recorded again.
            None: only `recording.lut` is set.
        device: the device key the entries are for; default the GPU in use.
        pin: pinned entries (serve without autotuning) or benchmarked top-`top` entries.

    Raises:
        LUTError: when `path` holds an invalid LUT (checked before the block runs) or cannot be written.
        DeviceError: when no device is given and no GPU is found.
    """
    import torch

    target = Path(path) if path is not None else None
    existing = load_lut(target) if target is not None and target.exists() else None
    if target is not None:
        check_output(target)
    recording = Recording()

    def saver(timings: dict[Any, float], name: str, input_nodes: list[Any], *_: Any) -> None:
        recording.skipped += 1  # until the feedback is read (a failure leaves it counted here)
        item = feedback_of(name, input_nodes, timings)
        if item is not None:
            recording.skipped -= 1
            recording.feedback.append(item)

    with feedback_saver(saver), torch.compiler.config.patch(force_disable_caches=True):
        yield recording
    recording.lut = lut_from_feedback(recording.feedback, _device(device), pin=pin, top=top)
    if target is not None:
        save_recorded(recording.lut, existing, target)
        log.info("kernel_select.record: wrote %d entries to %s", recording.lut.num_entries, target)


def check_output(target: Path) -> None:
    """Refuse, before the compile, a LUT file the recording could not be written to (read-only,
    hard-linked, a directory, a folder that is not writable, a full or read-only file system), as
    every command checks its output (atomic_write.check_writable); nothing is written.

    Raises:
        LUTError: one line naming the file and why.
    """
    try:
        check_writable(target)
    except OSError as exc:
        raise LUTError(f"{target}: cannot write the recorded LUT there ({exc.strerror}); nothing was "
                       "compiled") from None


def save_recorded(recorded: KernelLUT, existing: KernelLUT | None, target: Path) -> None:
    """Write `recorded` merged into `existing` at `target`. When they cannot merge (a recorded
    entry overlaps an entry of the file without having its key) or the write fails, the recorded
    entries are kept in a sibling file, named in the error: the compile's measurements survive.

    Raises:
        LUTError: naming `target`, the reason and the sibling file.
    """
    try:
        save_lut(merge_luts(existing, recorded) if existing is not None else recorded, target)
    except (LUTError, OSError) as exc:
        kept = target.with_name(f"{target.stem}.recorded{target.suffix or '.json'}")
        try:
            save_lut(recorded, kept)
        except (LUTError, OSError) as also:
            raise LUTError(f"{target}: {first_line(exc)}; the {recorded.num_entries} recorded entries "
                           f"could not be kept in {kept} either ({first_line(also)})") from None
        raise LUTError(f"{target}: {first_line(exc)}; the {recorded.num_entries} recorded entries are kept "
                       f"in {kept}: merge them by hand, or record into another file") from None


def _device(name: str | None) -> DeviceSpec:
    if name is not None:
        return get_device(name)
    spec = runtime.current_device()
    if spec is None:
        raise DeviceError("kernel_select.record: no CUDA device found; pass device=\"h100\" (or another key)")
    return spec

