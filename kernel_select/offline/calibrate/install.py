"""Where calibrate keeps its files, and how a trained model replaces the one in the device's folder.

  <models dir>/<device key>/                the model folder model/folders.py loads for the GPU:
      mlp.pt, mlp.json                      the performance model (its card records the GPU)
      aten.pt, aten.json                    the cuBLAS time head, where there were enough cuBLAS rows
      cublas_gate.pt, cublas_gate.json      the cuBLAS gate, likewise
      calibration.json                      what the last calibration measured, trained and scored
      calibration.parquet                   every row measured on this GPU (a re-run resumes it)
      calibration_plan.json                 the problems of the last plan (a shapes file)
      calibration_training/                 training's output while it runs, moved up when complete

The models dir is the user's (kernel_select.resources.user_models_dir: KERNEL_SELECT_MODELS_DIR,
else the per-user cache), searched before the shipped models.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from kernel_select.model.cublas import ATEN_STEM, GATE_STEM
from kernel_select.model.mlp import STEM

CHECKPOINTS = (STEM, ATEN_STEM, GATE_STEM)


@dataclass(frozen=True)
class CalibrationFiles:
    folder: Path  # the device's model folder

    @property
    def measurements(self) -> Path:
        return self.folder / "calibration.parquet"

    @property
    def plan(self) -> Path:
        return self.folder / "calibration_plan.json"

    @property
    def staging(self) -> Path:
        return self.folder / "calibration_training"

    @property
    def summary(self) -> Path:
        return self.folder / "calibration.json"


def install(staging: Path, folder: Path) -> list[str]:
    """Move the checkpoints trained into `staging` into `folder` (each file by an atomic rename);
    a checkpoint training did not produce this time (no gate: too few cuBLAS rows) is removed from
    `folder`, so the folder never mixes two trainings. The MLP moves last, so the head and gate it
    was trained with are in place when it is. Returns the stems installed."""
    installed = []
    for stem in (*CHECKPOINTS[1:], CHECKPOINTS[0]):
        for suffix in (".json", ".pt"):
            target = folder / f"{stem}{suffix}"
            source = staging / f"{stem}{suffix}"
            if source.is_file():
                os.replace(source, target)
            else:
                target.unlink(missing_ok=True)
        if (folder / f"{stem}.pt").is_file():
            installed.append(stem)
    shutil.rmtree(staging, ignore_errors=True)  # what is left: nothing a later run needs
    return installed
