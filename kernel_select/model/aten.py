"""The cuBLAS time head: the ATen mm (cuBLAS) scored in milliseconds, like every Triton config.

Inductor always benchmarks ATen next to the Triton candidates. To decide Triton versus cuBLAS from
one calibrated prediction, the shipped model predicts cuBLAS's runtime in the same units as its
Triton predictions: a small network over problem-level features (the cuBLAS gate's: sizes,
alignment, rooflines; cuBLAS picks its own kernel, so no config enters) trained on the log of each
problem's measured cuBLAS row. `MLPModel.estimate_aten(problem)` returns it, and the handler offers
Triton configs only where the best predicted Triton time beats it by the `cublas_margin` knob.

Files: the checkpoint `aten` of `card.py` (aten.pt, aten.json) next to the MLP's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelError
from kernel_select.model.card import Architecture, ModelCard, training_versions, utc_now
from kernel_select.model.gate import GATE_FEATURE_NAMES, GATE_FEATURE_VERSION, table_features, verdict
from kernel_select.model.problem_net import ProblemNetCheckpoint, fit_problem_net
from kernel_select.problem import Problem, dtype_name

STEM = "aten"
ATEN_FILE = f"{STEM}.pt"
DEFAULT_ARCHITECTURE = Architecture(inputs=len(GATE_FEATURE_NAMES), hidden_widths=[64, 64], activation="silu")


@dataclass(frozen=True)
class CublasRule:
    """The two-sided Triton-versus-cuBLAS decision for one GEMM, from one model's predictions:
    offer Triton only where its best predicted time beats predicted cuBLAS by `margin`. Inductor's
    own benchmark then decides only where Triton is predicted clearly faster; everywhere else
    ATen is taken without compiling Triton, so a compiled GEMM is not slower than eager when
    Inductor's warm, launch-inclusive benchmark is fooled by a near-tie."""

    problem: Problem
    predicted_aten_ms: float
    predicted_triton_ms: float  # the best predicted Triton config
    margin: float
    #: the launch of a pointwise kernel cuBLAS leaves unfused (gate.epilogue_charge_ms), else 0
    epilogue_ms: float = 0.0

    @property
    def predicted_ratio(self) -> float:
        """predicted cuBLAS time / best predicted Triton time (< 1: cuBLAS predicted faster)."""
        return self.predicted_aten_ms / self.predicted_triton_ms

    @property
    def charged_epilogue(self) -> bool:
        """Whether cuBLAS was charged for an unfused epilogue kernel."""
        return self.epilogue_ms > 0

    @property
    def prefers_cublas(self) -> bool:
        cublas_ms = self.predicted_aten_ms + self.epilogue_ms
        return not self.predicted_triton_ms <= (1.0 - self.margin) * cublas_ms

    def describe(self) -> str:
        epilogue = f" + {self.epilogue_ms * 1e3:.1f} us unfused epilogue" if self.charged_epilogue else ""
        return (f"cuBLAS rule: predicted cuBLAS {self.predicted_aten_ms * 1e3:.1f} us{epilogue}, best Triton "
                f"{self.predicted_triton_ms * 1e3:.1f} us (margin {self.margin:.2f}): "
                f"{verdict(self.prefers_cublas)}")


class AtenHead(ProblemNetCheckpoint):
    """Predicted cuBLAS (ATen mm) milliseconds per problem, for the dtypes it was trained on."""

    STEM = STEM
    WHAT = "cuBLAS time head"

    def supports(self, problem: Problem) -> bool:
        """Single GEMMs (batch 1) of a trained dtype: `mm`, what the cuBLAS rows measured, and
        `addmm`, which the handler hands cuBLAS as `bias_addmm` (inductor/bias_epilogue.py): the
        same GEMM with the bias added in cuBLASLt's epilogue, N more elements read."""
        return problem.op in ("mm", "addmm") and problem.batch == 1 and problem.dtype in self.card.dtypes

    def predict_ms(self, problems: Sequence[Problem]) -> np.ndarray:
        """float64 ms per problem (callers check `supports` first)."""
        return np.exp(self._outputs(problems))


def problem_features(table: Any, device: DeviceSpec) -> np.ndarray:
    """Head features of a frame with m, n, k, dtype and (else all "nn") layout columns, one row per
    problem."""
    return table_features(table, device)


def fit_aten(train: Any, val: Any, device: DeviceSpec | str, *, seed: int = 0,
             epochs: int = 1500) -> AtenHead:
    """Fit on problem tables (m, n, k, dtype, aten_ms): `train` to fit, `val` to pick the epoch.

    Raises:
        ModelError: fewer than 10 train or 5 validation problems with a cuBLAS time.
    """
    spec = get_device(device)
    if len(train) < 10 or len(val) < 5:
        raise ModelError(f"cuBLAS time head: need >= 10 train and >= 5 validation problems with a cuBLAS "
                         f"row, got {len(train)} and {len(val)}")
    fitted = fit_problem_net(problem_features(train, spec), np.log(train["aten_ms"].to_numpy()),
                             problem_features(val, spec), np.log(val["aten_ms"].to_numpy()),
                             DEFAULT_ARCHITECTURE, seed=seed, epochs=epochs)
    card = ModelCard(
        model=STEM, device=spec.key, architecture=DEFAULT_ARCHITECTURE, feature_version=GATE_FEATURE_VERSION,
        feature_names=list(GATE_FEATURE_NAMES), feature_mean=fitted.mean.tolist(),
        feature_std=fitted.std.tolist(), dtypes=sorted({dtype_name(d) for d in train["dtype"]}),
        hyperparameters={"seed": seed, "epochs": epochs, "lr": 1e-2, "weight_decay": 1e-2},
        metrics={"train_problems": len(train), "val_problems": len(val), "best_epoch": fitted.best_epoch,
                 "val_rmse_log_ms": fitted.val_rmse},
        trained_at=utc_now(), versions=training_versions())
    return AtenHead(spec, fitted.net, card)
