"""The text tables of a `compare-models` results file (model_report.py computes what they show):
the summary, a line per method over every model, and the per-model table, a line per (model, method).
Ratios below 1 are better, except speedups; "-" where a figure cannot be computed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kernel_select.errors import first_line
from kernel_select.offline.compare.summary import counted
from kernel_select.offline.e2e.model_report import (
    COMPILE_REFERENCES, MethodRow, Summary, compiled_methods, gemms_autotuned, model_metrics, references_of,
)


def _num(value: float | None, width: int, fmt: str = ".3f") -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"


@dataclasses.dataclass(frozen=True)
class _Column:
    """One column of the summary table: its title and how a row's cell is written."""

    title: str
    cell: Callable[[MethodRow], str]

    @property
    def width(self) -> int:
        return max(len(self.title) + 2, 8)


def _numbers(title: str, value: Callable[[MethodRow], float | None], fmt: str = ".3f") -> _Column:
    width = max(len(title) + 2, 8)
    return _Column(title, lambda row: _num(value(row), width, fmt))


def format_summary(summary: Summary) -> str:
    """A plain-text table (ratios < 1 are better, except speedups): per method its total compile
    and autotuning time (compile minus default's), its compile time and step time over each
    reference's, its speedup over eager, and the spreads; the GPU's device time against the first
    compiled reference, with how many models had one."""
    compiled = [r for r in summary.references if r in COMPILE_REFERENCES]
    columns = [_numbers("compile [s]", lambda row: row.compile_s, ".1f")]
    if "default" in summary.references:
        columns.append(_numbers("autotune [s]", lambda row: row.autotune_s, ".1f"))
    for i, ref in enumerate(compiled):
        columns.append(_numbers(f"compile/{ref}", lambda row, r=ref: row.compile_vs.get(r)))
        if i == 0:
            columns.append(_numbers("worst", lambda row, r=ref: row.worst_compile_vs.get(r), ".2f"))
    columns += [_numbers(f"step/{ref}", lambda row, r=ref: row.step_vs.get(r)) for ref in summary.references]
    columns += [_Column("vs eager", lambda row: f"{row.speedup_vs_eager:>9.3f}x"),
                _Column("slower", lambda row: f"{row.slower_than_eager:>8d}"),
                _numbers("spread", lambda row: row.max_step_spread, ".1%"),
                _numbers("host spread", lambda row: row.max_host_spread, ".1%")]
    if compiled:
        columns += [_device_column(compiled[0]),
                    _numbers("dev spread", lambda row: row.max_device_spread, ".1%")]
    width = max([14, *(len(row.method) + 1 for row in summary.rows)])
    header = f"{'method':<{width}}{'models':>7}" + "".join(f"{c.title:>{c.width}}" for c in columns)
    why = f"{' or '.join(summary.references)} failed or not run" if summary.references else \
        "no compiled method succeeded"
    lines = [counted(len(summary.models_used), "models", summary.models_excluded, why),
             header, "-" * len(header)]
    for row in summary.rows:
        lines.append(f"{row.method:<{width}}{row.models:>7d}" + "".join(c.cell(row) for c in columns))
    return "\n".join(lines)


def _device_column(reference: str) -> _Column:
    """The device-time ratio and, in parentheses, over how many models it was measured."""
    title = f"device/{reference}"
    width = len(title) + 2

    def cell(row: MethodRow) -> str:
        value = row.device_vs.get(reference)
        if value is None:
            return _num(None, width)
        count = f" ({row.device_models[reference]})"
        return f"{value:>{width - len(count)}.3f}{count}"

    return _Column(title, cell)


def format_models(results: dict[str, Any]) -> str:
    """`table` as plain text, a line per (model, method): compile and autotuning seconds, step ms,
    step against each reference's, speedup over eager, GEMMs autotuned / lowered ("-" where it cannot
    be computed); a failed method's line gives its error's first line."""
    methods = compiled_methods(results)
    references = references_of(results)
    metrics = [("compile [s]", "compile_s", ".1f"), ("autotune [s]", "autotune_s", ".1f"),
               ("step [ms]", "step_ms", ".3f")]
    metrics += [(f"step/{r}", f"step/{r}", ".3f") for r in references]
    width = max([24, *(len(e["name"]) + 2 for e in results["models"])])
    method_width = max([12, *(len(m) + 2 for m in methods)])
    header = (f"{'model':<{width}}{'method':<{method_width}}"
              + "".join(f"{title:>{len(title) + 2}}" for title, _, _ in metrics) + f"{'vs eager':>10}"
              + f"{'GEMMs autotuned/lowered':>25}")
    lines = [header, "-" * len(header)]
    for entry in results["models"]:
        values = model_metrics(entry, methods)
        name = entry["name"]
        for method in (m for m in methods if m in entry["results"]):
            start = f"{name:<{width}}{method:<{method_width}}"
            name = ""  # the model's name only on its first line
            if method not in values:
                lines.append(start + first_line(entry["results"][method].get("error") or "no result"))
                continue
            row = values[method]
            cells = "".join(_num(row.get(key), len(title) + 2, fmt) for title, key, fmt in metrics)
            autotuned, lowered = gemms_autotuned(entry["results"][method])
            counts = f"{autotuned}/{'-' if lowered is None else lowered}"
            lines.append(f"{start}{cells}{row['vs eager']:>9.3f}x{counts:>25}")
    return "\n".join(lines)
