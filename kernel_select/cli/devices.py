"""Which GPU a command ranks for, and which model serves it, said in one line.

Without `--device`, a command that ranks uses the GPU it runs on (kernel_select.runtime.current_device),
so on an H200 with a calibrated model `topk` ranks with that model, not the H100's. On a machine
without a CUDA GPU it ranks for FALLBACK_DEVICE and says so. A command that reads measurements (`train`,
`train-gate`, `eval`, `gate-rules`) uses the device the rows were measured on (`data_device`). The
serving model is named in the output (`model: h200 (calibrated, /root/.cache/kernel_select/models/h200)`),
as `kernel-select doctor` names it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_select.text import printable

if TYPE_CHECKING:
    import pandas as pd

    from kernel_select.device import DeviceSpec

#: The device a command ranks for on a machine without a CUDA GPU: the one the shipped LUT and the
#: first shipped model are for.
FALLBACK_DEVICE = "h100"

#: Devices with a datasheet row but no shipped model: named by --device for `lut` files and `train`,
#: ranked only after `kernel-select calibrate` or `train` has written a model for them.
DEVICE_HELP = ("h100, h100-pcie (the H100 model serves it), h200; a100 has a datasheet but no shipped model "
               "(calibrate one on an A100); another GPU by its key once calibrated (any case)")


def device_key(text: str) -> str:
    """The key of the device `text` names (key, alias or torch's name, any case); the GPU this
    process runs on is known by its key too, calibrated or not. ArgumentTypeError for anything else."""
    from kernel_select import runtime
    from kernel_select.device import get_device
    from kernel_select.errors import DeviceError

    try:
        return get_device(text).key
    except DeviceError as exc:
        try:
            here = runtime.current_device()  # remembers an unlisted GPU (an L4) under its key
        except Exception:  # noqa: BLE001 -- no usable driver: the device is just unknown
            here = None
        if here is not None and text.strip().lower() in (here.key, here.name.lower()):
            return here.key
        raise argparse.ArgumentTypeError(str(exc).removeprefix("device: ")) from None


def serving_device(key: str | None) -> tuple[DeviceSpec, str]:
    """The device a command ranks for, with where it comes from: `key` when given ("given"), else
    the GPU it runs on ("detected"), else FALLBACK_DEVICE ("fallback")."""
    from kernel_select import runtime
    from kernel_select.device import get_device

    if key is not None:
        return get_device(key), "given"
    here = runtime.current_device()
    if here is not None:
        return here, "detected"
    return get_device(FALLBACK_DEVICE), "fallback"


def data_device(paths: Sequence[Path], rows: pd.DataFrame | None = None) -> DeviceSpec:
    """The device the rows of dataset files were measured on, by the one rule of `train` and `eval`
    (offline/data/device_rows.py: one device, else it must be named), from `rows` (the files read)
    or else the files' `device_name` column alone. A GPU outside KNOWN_DEVICES (an L4 calibrated
    here) is known by its key where this process runs on it.

    Raises:
        DatasetError: a file without a readable device_name column, rows of several devices, or none.
    """
    import pandas as pd
    import pyarrow.parquet as pq

    from kernel_select import runtime
    from kernel_select.errors import DatasetError
    from kernel_select.offline.data.device_rows import dataset_device

    try:
        runtime.current_device()  # detect() remembers an unlisted GPU under its key for get_device
    except Exception:  # noqa: BLE001 -- no usable driver: the rows must name a known device
        pass
    if rows is None:
        names = []
        for path in paths:
            try:
                names.append(pq.read_table(path, columns=["device_name"]).to_pandas())
            except Exception as exc:  # pyarrow raises several unrelated types for a bad file or column
                raise DatasetError(f"{path}: no readable device_name column ({exc})") from None
        rows = pd.concat(names, ignore_index=True)
    return dataset_device(rows, list(paths))


def data_device_text(spec: DeviceSpec, given: bool) -> str:
    """`device: h200`, or where it came from the rows `device: h200 (the dataset's rows were measured
    on it)`."""
    return f"device: {spec.key}" + ("" if given else " (the dataset's rows were measured on it)")


def device_text(spec: DeviceSpec, origin: str) -> str:
    """`h100`, `h200 (detected)` or `h100 (no CUDA GPU here: the default; pass --device to choose)`."""
    if origin == "detected":
        return f"{spec.key} (detected)"
    if origin == "fallback":
        return f"{spec.key} (no CUDA GPU here: the default; pass --device to choose)"
    return spec.key


def model_source(spec: DeviceSpec, stem: str = "mlp") -> tuple[str, Path, str] | None:
    """(kind, folder, trained-for key) of the checkpoint `stem` that serves `spec`: kind is "calibrated"
    (the user model directory), "shipped" or "other folder" (KERNEL_SELECT_MODELS_DIR's); None
    where none does."""
    from kernel_select.model.folders import find_checkpoint
    from kernel_select.resources import shipped_dir, user_models_dir

    found = find_checkpoint(spec, stem)
    if found is None:
        return None
    folder, trained_for = found
    if folder.parent == shipped_dir("models"):
        kind = "shipped"
    elif folder.parent == user_models_dir():
        kind = "calibrated"
    else:
        kind = "other folder"
    return kind, folder, trained_for.key


def model_line(spec: DeviceSpec, name: str | None = None) -> str:
    """`model: h200 (calibrated, /path)`: the model a command ranks `spec` with."""
    if name is not None:
        return f"model: {printable(name)} (by name, for {spec.key})"
    source = model_source(spec)
    if source is None:
        return f"model: none trained for {spec.key}"
    kind, folder, trained_for = source
    stand_in = "" if trained_for == spec.key else f", trained on {trained_for}: same architecture"
    return f"model: {trained_for} ({kind}{stand_in}, {printable(folder)})"


def mlp_dir_line(mlp_dir: str | Path, spec: DeviceSpec, own_gate: bool) -> str:
    """`model: DIR (--mlp-dir, for h200; its own cuBLAS gate)`: the saved MLP a command scores instead of
    the shipped one, and whether the cuBLAS gate is the folder's own or the one serving the device."""
    gate = "its own cuBLAS gate" if own_gate else "the serving cuBLAS gate"
    return f"model: {printable(mlp_dir)} (--mlp-dir, for {spec.key}; {gate})"


def torch_device_model_line(torch_device: str, name: str | None = None) -> str | None:
    """`model_line` for the CUDA device `torch_device` ("cuda", "cuda:N") names, as the workers of
    `compare` and `compare-models` will see it; None for "cpu" or where no CUDA GPU is present."""
    import torch

    from kernel_select import runtime

    kind, _, index = torch_device.partition(":")
    if kind != "cuda" or not torch.cuda.is_available():
        return None
    return model_line(runtime.detected_device(int(index or 0)), name)
