"""The comparison's inputs: the problems of a suite (from a JSON or CSV shapes file) and the
methods that compile them (eager, stock max-autotune, the top-k handler at each k)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel_select import options
from kernel_select.errors import OptionError, ProblemError
from kernel_select.problem import Problem

DEFAULT_TOPKS = (1, 2, 4, 8)


@dataclasses.dataclass(frozen=True)
class Case:
    """One problem of a suite, with a human label."""

    problem: Problem
    label: str


def default_suite_path() -> Path:
    return Path(__file__).resolve().parents[2] / "data" / "compare_suite.json"


def load_cases(path: str | Path | None = None) -> list[Case]:
    """Problems from a JSON or CSV shapes file (default: the bundled suite).

    JSON: a list, or {"problems": [...]}, of {"m", "n", "k"[, "dtype"][, "label"]} objects or
    [m, n, k(, dtype)] lists. CSV: columns m,n,k[,dtype][,label], with or without a header row.
    dtype defaults to bfloat16.

    Raises:
        ProblemError: naming the file and entry that is malformed.
    """
    path = Path(path) if path is not None else default_suite_path()
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read the shapes file ({exc.strerror})") from None
    entries = _json_entries(text, path) if path.suffix.lower() == ".json" else _csv_entries(text, path)
    cases = [_case(entry, f"{path}: {where}") for where, entry in entries]
    if not cases:
        raise ProblemError(f"{path}: no problems in the shapes file")
    return cases


def _json_entries(text: str, path: Path) -> list[tuple[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProblemError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    if isinstance(data, dict):
        data = data.get("problems")
    if not isinstance(data, list):
        raise ProblemError(f"{path}: expected a list of problems or {{\"problems\": [...]}}")
    return [(f"entry {i}", entry) for i, entry in enumerate(data)]


def _csv_entries(text: str, path: Path) -> list[tuple[str, Any]]:
    rows = [(i + 1, row) for i, row in enumerate(csv.reader(io.StringIO(text)))
            if row and any(cell.strip() for cell in row) and not row[0].lstrip().startswith("#")]
    if not rows:
        return []
    header = [cell.strip().lower() for cell in rows[0][1]]
    if not header[0].lstrip("-").isdigit():
        missing = {"m", "n", "k"} - set(header)
        if missing:
            raise ProblemError(f"{path}: line {rows[0][0]}: header lacks column(s) "
                               f"{', '.join(sorted(missing))}")
        return [(f"line {line}", dict(zip(header, (cell.strip() for cell in row)))) for line, row in rows[1:]]
    return [(f"line {line}", [cell.strip() for cell in row]) for line, row in rows]


def _case(entry: Any, where: str) -> Case:
    if isinstance(entry, (list, tuple)):
        if not 3 <= len(entry) <= 4:
            raise ProblemError(f"{where}: expected [m, n, k] or [m, n, k, dtype], got {entry!r}")
        entry = dict(zip(("m", "n", "k", "dtype"), entry))
    if not isinstance(entry, dict):
        raise ProblemError(f"{where}: expected an object with m, n, k, got {entry!r}")
    unknown = set(entry) - {"m", "n", "k", "dtype", "label"}
    if unknown:
        raise ProblemError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        problem = Problem(_int(entry.get("m")), _int(entry.get("n")), _int(entry.get("k")),
                          entry.get("dtype") or "bfloat16")
    except ProblemError as exc:
        raise ProblemError(f"{where}: {exc}") from None
    label = str(entry.get("label") or f"{problem.m}x{problem.n}x{problem.k}-{problem.dtype}")
    return Case(problem, label)


def _int(value: Any) -> Any:
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


@dataclasses.dataclass(frozen=True)
class Method:
    """How one measurement compiles the matmul."""

    name: str
    kind: str  # "eager", "stock" or "topk"
    search_space: str = "DEFAULT"
    topk: int | str | None = None
    cublas_margin: str | None = None  # "off" turns the cuBLAS gate off; None keeps the knob's value
    gemm_only: bool = False  # gemm_autotune_options() in place of max-autotune's options


def parse_topks(text: str) -> list[int | str]:
    """"1,2,4,8" -> [1, 2, 4, 8] ("DEFAULT" is allowed; "SAME" is what "stock" measures)."""
    values = [options.parse_topk(part, source="--gemm-topk") for part in text.split(",") if part.strip()]
    if not values or options.SAME in values:
        raise OptionError(f"--gemm-topk: expected comma-separated positive integers (or DEFAULT), got "
                          f"{text!r}")
    return list(dict.fromkeys(values))


def methods_for(topks: Sequence[int | str], exhaustive: bool = False,
                nogate_topks: Sequence[int | str] = (), gemm_only: bool = False) -> list[Method]:
    """eager, stock[, stock-exhaustive], topk-K per k, and topk-K-nogate (cuBLAS gate off) per k
    of `nogate_topks`; with `gemm_only`, every compiled method uses GEMM-only options."""
    methods = [Method("stock", "stock")]
    if exhaustive:
        methods.append(Method("stock-exhaustive", "stock", search_space="EXHAUSTIVE"))
    methods += [Method(f"topk-{k}", "topk", topk=k) for k in topks]
    methods += [Method(f"topk-{k}-nogate", "topk", topk=k, cublas_margin="off") for k in nogate_topks]
    return [Method("eager", "eager")] + [dataclasses.replace(m, gemm_only=gemm_only) for m in methods]
