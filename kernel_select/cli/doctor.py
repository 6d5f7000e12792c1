"""`kernel-select doctor`: what would serve a compile here, and why.

It prints the GPU (detected, or none), the device a command ranks for, the model and cuBLAS gate that
would serve it (folder, where it comes from, the card's versions and the domain it was trained on),
the lookup table the kernel_lut_path knob names (checked), torch, triton and kernel_select versions,
the directories searched, and the knobs and kernel_select variables set in the environment. It
never fails on what it finds: a model or LUT that does not load is reported as such, and it exits 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
from typing import Any

from kernel_select.cli import flags
from kernel_select.cli.common import Subparsers, add_device_arg, say, say_lines
from kernel_select.cli.devices import DEVICE_HELP, model_source, serving_device
from kernel_select.errors import KernelSelectError

#: Environment variables of kernel_select itself (beyond the knobs' TORCHINDUCTOR_ ones).
_OWN_ENV_PREFIX = "KERNEL_SELECT_"


def register(sub: Subparsers) -> None:
    p = sub.add_parser("doctor",
                       help="print the GPU, model, LUT, versions and settings that would serve here",
                       description="Print what kernel_select would use on this machine: the GPU key "
                                   "(detected or none), the model and cuBLAS gate that serve it and the "
                                   "lookup table of the kernel_lut_path knob (paths, versions, the card's "
                                   "domain), torch, triton and kernel_select versions, the model "
                                   "directories, and the knobs set in the environment. Exits 0.")
    add_device_arg(p, f"report for this device instead of the detected GPU: {DEVICE_HELP}")
    flags.add_json(p, "the report")
    p.set_defaults(handler=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    report = diagnose(args.device)
    if args.json:
        say(json.dumps(report, indent=1))
    else:
        say_lines("\n".join(format_report(report)))
    return 0


def diagnose(device_key: str | None) -> dict[str, Any]:
    """The report as a dict (what --json prints)."""
    from kernel_select import runtime

    try:
        detected = runtime.current_device()
    except KernelSelectError as exc:  # a driver that answers but cannot be read
        detected, detect_error = None, str(exc)
    else:
        detect_error = None
    spec, origin = serving_device(device_key)
    return {
        "gpu": None if detected is None else {"key": detected.key, "name": detected.name,
                                              "architecture": detected.architecture},
        "gpu_error": detect_error,
        "device": spec.key,
        "device_from": {"given": "--device", "detected": "detected",
                        "fallback": "no GPU: the default"}[origin],
        "model": _checkpoint(spec, "mlp"),
        "cublas_gate": {**_checkpoint(spec, "cublas_gate"), "margin": _margin()},
        "lut": _lut(),
        "versions": {name: _version(name) for name in ("kernel_select", "torch", "triton")},
        "directories": _directories(),
        "environment": {name: value for name, value in sorted(os.environ.items())
                        if name in _knob_env_names() or name.startswith(_OWN_ENV_PREFIX)},
    }


def _checkpoint(spec: Any, stem: str) -> dict[str, Any]:
    """Where checkpoint `stem` serving `spec` comes from, and whether it loads."""
    from kernel_select import runtime

    try:
        source = model_source(spec, stem)
    except KernelSelectError as exc:
        return {"error": str(exc)}
    if source is None:
        return {"found": False}
    kind, folder, trained_for = source
    found: dict[str, Any] = {"found": True, "kind": kind, "folder": str(folder), "trained_for": trained_for}
    try:
        loaded = runtime.model(None, spec) if stem == "mlp" else runtime.gate(spec)
    except KernelSelectError as exc:
        return {**found, "loads": False, "error": str(exc)}
    card = getattr(loaded, "card", None)
    if card is not None:
        found.update(loads=True, card_device=card.device, trained_at=card.trained_at,
                     versions=dict(card.versions), domain=_domain(card))
    if stem != "mlp":  # whether batched GEMMs get a decision too, or a benchmark of cuBLAS beside the picks
        found["batched_gemms"] = getattr(loaded, "batched", None) is not None
    return found


def _margin() -> float | None:
    """The gemm_cublas_margin knob's value (None: the cuBLAS decision is off)."""
    from kernel_select import knobs

    return knobs.gemm_cublas_margin


def _domain(card: Any) -> dict[str, Any] | None:
    """The card's training domain in brief: dtypes, layouts and the size ranges."""
    domain = card.domain
    summary: dict[str, Any] = {"dtypes": list(card.dtypes), "layouts": list(card.layouts)}
    if domain is not None:
        summary.update(m=list(domain.m), n=list(domain.n), k=list(domain.k), batch=list(domain.batch))
    return summary


def _lut() -> dict[str, Any]:
    """The kernel_lut_path knob's table (environment or default), checked as a compile would."""
    from kernel_select import options

    raw = os.environ.get(options.env_name("kernel_lut_path"), "")
    try:
        path = options.parse_lut_path(raw or None, source=options.env_name("kernel_lut_path"))
    except KernelSelectError as exc:
        return {"path": raw, "error": str(exc)}
    if path is None:
        return {"path": None}
    from kernel_select.lut import load_lut

    try:
        lut = load_lut(path)
    except KernelSelectError as exc:
        return {"path": path, "valid": False, "error": str(exc)}
    return {"path": path, "valid": True, "entries": lut.num_entries, "devices": sorted(lut.devices)}


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        if distribution == "kernel_select":
            from kernel_select._version import __version__

            return __version__
        return None


def _directories() -> dict[str, Any]:
    from kernel_select.resources import MODELS_DIR_ENV, model_roots, shipped_dir, user_models_dir

    return {"user_models": str(user_models_dir()), MODELS_DIR_ENV: os.environ.get(MODELS_DIR_ENV) or None,
            "model_search_order": [str(root) for root in model_roots()],
            "shipped_models": str(shipped_dir("models")), "shipped_luts": str(shipped_dir("luts")),
            "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR") or None}


def _knob_env_names() -> set[str]:
    from kernel_select import options

    return {options.env_name(knob) for knob in options.KNOBS}


def format_report(report: dict[str, Any]) -> list[str]:
    """The report as lines of text."""
    gpu = report["gpu"]
    lines = [f"gpu: {gpu['key']} ({gpu['name']}, {gpu['architecture']})" if gpu else
             f"gpu: none{' (' + report['gpu_error'] + ')' if report['gpu_error'] else ''}",
             f"device: {report['device']} ({report['device_from']})"]
    for label, entry in (("model", report["model"]), ("cuBLAS gate", report["cublas_gate"])):
        margin = f"; margin {entry['margin']}" if "margin" in entry else ""
        batched = {True: "; batched GEMMs too", False: "; single GEMMs only"}.get(entry.get("batched_gemms"),
                                                                                 "")
        lines.append(f"{label}: {_checkpoint_text(entry)}{margin}{batched}")
        domain = entry.get("domain")
        if domain:
            sizes = ", ".join(f"{dim} {domain[dim][0]}..{domain[dim][1]}" for dim in ("m", "n", "k", "batch")
                              if dim in domain)
            lines.append(f"  trained on: {', '.join(domain['dtypes']) or 'any dtype'}; layouts "
                         f"{', '.join(domain['layouts'])}" + (f"; {sizes}" if sizes else ""))
    lut = report["lut"]
    if lut.get("path") is None and "error" not in lut:
        lines.append("lut: none (set kernel_lut_path, e.g. TORCHINDUCTOR_KERNEL_LUT_PATH)")
    elif "error" in lut:
        lines.append(f"lut: {lut['path']}: does not load: {lut['error']}")
    else:
        devices = ", ".join(lut["devices"]) or "no devices"
        lines.append(f"lut: {lut['path']}: {lut['entries']} entries ({devices})")
    lines.append("versions: " + ", ".join(f"{name} {version or 'not installed'}"
                                         for name, version in report["versions"].items()))
    lines += [f"{name}: {value}" for name, value in report["directories"].items()
              if name != "model_search_order"]
    lines.append("model search order: " + " then ".join(report["directories"]["model_search_order"]))
    environment = report["environment"]
    lines.append("environment: " + ("; ".join(f"{name}={value}" for name, value in environment.items())
                                    if environment else "no knob set"))
    return lines


def _checkpoint_text(entry: dict[str, Any]) -> str:
    if "found" not in entry:
        return f"error: {entry['error']}"
    if not entry["found"]:
        return "none trained for this device"
    stand_in = "" if entry.get("card_device", entry["trained_for"]) == entry["trained_for"] else ""
    text = f"{entry['trained_for']} ({entry['kind']}{stand_in}, {entry['folder']})"
    if entry.get("loads") is False:
        return f"{text}: does not load: {entry['error']}"
    versions = entry.get("versions") or {}
    built = f", trained with kernel_select {versions['kernel_select']}" if "kernel_select" in versions else ""
    return f"{text}{built}" + (f", {entry['trained_at']}" if entry.get("trained_at") else "")
