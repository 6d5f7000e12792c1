"""Where calibrate keeps its files, and how a trained model replaces the one in the device's folder.

  <models dir>/<device key>/                the model folder model/folders.py loads for the GPU:
      mlp.pt, mlp.json                      the performance model (its card records the GPU)
      aten.pt, aten.json                    the cuBLAS time head, where there were enough cuBLAS rows
      cublas_gate.pt, cublas_gate.json      the cuBLAS gate, likewise
      cublas_gate_bmm.pt, .json             its network for batched GEMMs, where there were enough
      calibration.json                      what the last calibration measured, trained and scored
      calibration.parquet                   every row measured on this GPU (a re-run resumes it)
      calibration_plan.json                 the problems of the last plan (a shapes file)
      calibration_training/                 training's output while it runs, swapped in when complete

The models dir is the user's (kernel_select.resources.user_models_dir: KERNEL_SELECT_MODELS_DIR,
else the per-user cache), searched before the shipped models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel_select.model.folder_write import install_model_folder


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
    """Replace the checkpoints in `folder` with those trained into `staging`, whole
    (model/folder_write.py: staged beside it and swapped in with one rename; the folder's measurements
    and plan are kept): a checkpoint training did not produce this time (no gate: too few cuBLAS rows)
    is not kept, so the folder never mixes two trainings. Returns the stems installed."""
    return install_model_folder(staging, folder)
