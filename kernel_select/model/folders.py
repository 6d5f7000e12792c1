"""Which trained model serves a device: one policy for the performance model and the cuBLAS gate.

The first folder of `model_folders(device)` that holds a checkpoint serves it: the user's model
directory (`kernel-select calibrate` and `train --out` write there) before the shipped models, the
device's own folder before a same-architecture stand-in (announced with one warning). The cuBLAS
gate and time head serve only from a folder that holds the MLP too: a folder holding a gate alone is
what an interrupted write once left (model/folder_write.py writes folders whole now), and it is
passed over with one warning, so the model that serves does so with its own gate. A checkpoint
that is there but does not load is an error, never a silent fallback; no checkpoint anywhere is a
NoTrainedModelError, after which the Inductor handler leaves Inductor its own candidates. The
untrained analytical model is only used when asked for by name.
"""

from __future__ import annotations

import logging
from pathlib import Path

from kernel_select import warn
from kernel_select.device import DeviceSpec, same_architecture
from kernel_select.errors import NoTrainedModelError
from kernel_select.model.cublas import ATEN_STEM, BATCHED_GATE_STEM, GATE_STEM, CublasGate
from kernel_select.resources import model_roots, shipped_dir, shipped_hidden

log = logging.getLogger(__name__)

#: The performance model's checkpoint: a model folder is one that holds it.
MLP_STEM = "mlp"
#: The checkpoints of one training, written together (model/folder_write.py).
MODEL_STEMS = (MLP_STEM, ATEN_STEM, GATE_STEM, BATCHED_GATE_STEM)


def model_folders(spec: DeviceSpec) -> list[tuple[Path, DeviceSpec]]:
    """Folders that may hold a model for `spec`, in the order they are tried, each with the device its
    models were trained for: every model root (kernel_select.resources.model_roots: the user's
    models first, then the shipped ones) for the device itself, then for devices of the same SM
    architecture (an H100 model for an H100 PCIe): their kernels and relative speeds carry over.
    Shipped folders of devices named in KERNEL_SELECT_HIDE_SHIPPED are left out."""
    roots = model_roots()
    shipped = shipped_dir("models")
    return [(root / other.key, other) for other in (spec, *same_architecture(spec)) for root in roots
            if not (root == shipped and shipped_hidden(other.key))]


def find_checkpoint(spec: DeviceSpec, stem: str, *,
                    stand_in_by_design: bool = False) -> tuple[Path, DeviceSpec] | None:
    """The first of `model_folders(spec)` holding checkpoint `stem` (its `.pt` or its `.json`), with
    the device it was trained for; None when none does. A stand-in of another device is announced
    once per process: with a warning, or at INFO where it serves the architecture by design
    (`stand_in_by_design`)."""
    for folder, trained_for in model_folders(spec):
        if (folder / f"{stem}.pt").exists() or (folder / f"{stem}.json").exists():
            if stem != MLP_STEM and not holds_checkpoint(folder, MLP_STEM):
                warn.warn_once(("partial folder", str(folder)), log,
                               "kernel_select: ignoring %s: it holds a %s checkpoint but no MLP (mlp.pt), "
                               "as an interrupted training leaves; the next folder with a model serves, with "
                               "its own gate. Train a whole model into it (`kernel-select train --out`) or "
                               "delete it", folder, stem)
                continue
            if trained_for != spec:
                warn.warn_once(("stand-in", spec.key, stem), log,
                               "kernel_select: no %s model trained on %s; using %s (trained on %s, same "
                               "architecture %s)%s", stem, spec.key, folder, trained_for.key,
                               spec.architecture, "" if stand_in_by_design else
                               "; `kernel-select calibrate` trains one for this GPU",
                               level=logging.INFO if stand_in_by_design else logging.WARNING)
            return folder, trained_for
    return None


def holds_checkpoint(folder: Path, stem: str) -> bool:
    """Whether `folder` holds checkpoint `stem` whole: its weights (.pt) and its card (.json)."""
    return (folder / f"{stem}.pt").exists() and (folder / f"{stem}.json").exists()


def gate_in(folder: str | Path, spec: DeviceSpec) -> CublasGate | None:
    """The cuBLAS gate saved in the model folder `folder` (a device of `spec`'s architecture), or None
    where the folder holds none."""
    if not holds_checkpoint(Path(folder), GATE_STEM):
        return None
    return CublasGate.load(folder, spec, allow_same_architecture=True)


def no_trained_model(spec: DeviceSpec) -> NoTrainedModelError:
    """The error for a device without a trained model, with the fix."""
    return NoTrainedModelError(
        f"no trained model for {spec.key} ({spec.name}); `kernel-select calibrate` trains one on this GPU "
        f"in about 15 minutes, and the untrained analytical model is available as model='analytical'")
