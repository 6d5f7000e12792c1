"""The learned performance model: an MLP over `features.py` that predicts log runtime.

Architecture: standardized features -> [Linear -> ReLU] x len(hidden_widths) -> Linear = f(x), and

    log_runtime_ms = log(exp(f(x)) + kernel_overhead_ms)      (a logsumexp of two terms)

so a prediction never drops below the fixed cost of a launch, and the network only has to model
the part of the runtime that scales with the work (easier on a log scale). The overhead is a
learned parameter stored as its log. There is no batch normalization: inference has no batch
statistics, so a config scores the same alone or among 1400 others.

On disk, `models/<device>/` holds `mlp.pt` (a state_dict, loaded with `weights_only=True`) and
`model_card.json` (a `ModelCard`: everything learned besides the weights, and provenance).
"""

from __future__ import annotations

import hashlib

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from torch import nn

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelCardMismatchError, ModelError, ProblemError, UnsupportedProblemError
from kernel_select.model.features import FEATURE_NAMES, FEATURE_VERSION, featurize
from kernel_select.model import PerformanceModel, models_dir, register_model
from kernel_select.problem import dtype_name

log = logging.getLogger(__name__)

WEIGHTS_FILE = "mlp.pt"
CARD_FILE = "model_card.json"
CARD_SCHEMA_VERSION = 1
# fp16 and bf16 have the same size and tensor-core rate, so their features are identical: a model
# trained on one scores the other the same way.
_SAME_FEATURES = {"float16": "bfloat16", "bfloat16": "float16"}


class DataProvenance(BaseModel):
    """What the model was trained on."""

    model_config = ConfigDict(extra="forbid")

    file: str  # file name only; paths differ between machines
    sha256: str
    rows: int  # Triton rows used: train and val problems, usable runtimes
    problems: dict[str, int]  # split -> number of problems (train, val)
    device_names: list[str]
    torch_versions: list[str]
    triton_versions: list[str]


class ModelCard(BaseModel):
    """The JSON sidecar of `mlp.pt`: learned state other than weights, hyperparameters, provenance."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = CARD_SCHEMA_VERSION
    model: Literal["mlp"] = "mlp"
    device: str  # DeviceSpec.key the data was measured on
    feature_version: int
    feature_names: list[str]
    feature_mean: list[float]  # standardization statistics, from the training split
    feature_std: list[float]
    hidden_widths: list[int]
    kernel_overhead_ms: float  # learned; informative (the weights hold the exact value)
    dtypes: list[str]  # dtypes present in training; others are refused
    hyperparameters: dict[str, Any]
    data: DataProvenance | None = None
    metrics: dict[str, Any] = {}
    trained_at: str = ""
    trainer: dict[str, str] = {}  # versions of the training software

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> ModelCard:
        try:
            return cls.model_validate_json(path.read_text())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "card"
            raise ModelCardMismatchError(
                f"{path}: field {where!r}: {first['msg']}; {retrain_hint(path.parent)}") from None


def retrain_hint(model_dir: Path | str, device: str = "h100") -> str:
    return (f"retrain with `kernel-select train --data <dataset.parquet> --out {model_dir} "
            f"--device {device}`")


class RuntimeNet(nn.Module):
    """Standardized features (batch, n_features) -> log runtime in ms (batch,)."""

    def __init__(self, n_features: int, hidden_widths: Sequence[int],
                 kernel_overhead_ms: float = 0.005) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = n_features
        for hidden in hidden_widths:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, 1))
        self.body = nn.Sequential(*layers)
        self.log_overhead_ms = nn.Parameter(torch.tensor(math.log(kernel_overhead_ms)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logaddexp(self.body(x).squeeze(-1), self.log_overhead_ms)

    @property
    def kernel_overhead_ms(self) -> float:
        return float(self.log_overhead_ms.detach().exp())


class MLPModel(PerformanceModel):
    """The trained MLP for one device. Build with `MLPModel.load(dir)` or from training."""

    name = "mlp"

    def __init__(self, device: DeviceSpec | str, net: RuntimeNet, card: ModelCard) -> None:
        super().__init__(device)
        self.net = net.eval()
        self.card = card
        self._mean = np.asarray(card.feature_mean, dtype=np.float32)
        self._inv_std = (1.0 / np.asarray(card.feature_std, dtype=np.float64)).astype(np.float32)
        self._digest: str | None = None

    def estimate(self, m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig]) -> np.ndarray:
        try:
            dtype = dtype_name(dtype)
        except ProblemError as exc:
            raise UnsupportedProblemError(str(exc)) from None
        if dtype not in self.card.dtypes and _SAME_FEATURES.get(dtype) not in self.card.dtypes:
            raise UnsupportedProblemError(
                f"mlp model for {self.device.key}: trained on {self.card.dtypes}, not {dtype}; "
                f"collect {dtype} data and retrain, or use the analytical model")
        features = featurize(m, n, k, dtype, configs, self.device)
        features -= self._mean
        features *= self._inv_std
        with torch.inference_mode():
            log_ms = self.net(torch.from_numpy(features))
        return np.exp(log_ms.numpy().astype(np.float64))

    def digest(self) -> str:
        """sha256 of the weights and the model card. Inductor's cache keys include it (through the
        choices handler's uuid), so a retrained model never reuses choices made by the old one."""
        if self._digest is None:
            h = hashlib.sha256(self.card.model_dump_json().encode())
            for name, tensor in sorted(self.net.state_dict().items()):
                h.update(name.encode())
                h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
            self._digest = h.hexdigest()
        return self._digest

    def describe(self) -> str:
        data = self.card.data
        trained_on = f"{data.file} ({data.rows} rows)" if data else "no recorded data"
        return (f"mlp model for {self.device.key}, features v{self.card.feature_version}, "
                f"widths {self.card.hidden_widths}, trained on {trained_on}")

    # -- persistence ----------------------------------------------------------------------------

    def save(self, model_dir: str | Path) -> Path:
        """Write `mlp.pt` and `model_card.json` into `model_dir` (created if needed)."""
        model_dir = Path(model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        card = self.card.model_copy(update={"kernel_overhead_ms": self.net.kernel_overhead_ms})
        torch.save(self.net.state_dict(), model_dir / WEIGHTS_FILE)
        card.save(model_dir / CARD_FILE)
        self.card = card
        return model_dir

    @classmethod
    def load(cls, model_dir: str | Path, device: DeviceSpec | str = "h100") -> MLPModel:
        """Load a saved model, refusing one that does not match this code or `device`.

        Raises:
            ModelError: `model_dir` holds no model at all.
            ModelCardMismatchError: a file is missing or the card/weights disagree with the
                running code or the device; the message says how to retrain.
        """
        model_dir = Path(model_dir)
        spec = get_device(device)
        weights, card_path = model_dir / WEIGHTS_FILE, model_dir / CARD_FILE
        hint = retrain_hint(model_dir, spec.key)
        if not weights.exists() and not card_path.exists():
            raise ModelError(f"no trained mlp model in {model_dir} for {spec.key}; {hint}")
        for path in (weights, card_path):
            if not path.exists():
                raise ModelCardMismatchError(f"{path}: missing (the model needs both {WEIGHTS_FILE} "
                                             f"and {CARD_FILE}); {hint}")
        card = ModelCard.load(card_path)
        _check_card(card, card_path, spec, hint)
        net = RuntimeNet(len(card.feature_names), card.hidden_widths)
        try:
            state = torch.load(weights, map_location="cpu", weights_only=True)
            net.load_state_dict(state, strict=True)
        except (RuntimeError, KeyError, TypeError) as exc:  # shape/key mismatch or not a state_dict
            raise ModelCardMismatchError(
                f"{weights}: weights do not fit the card's architecture "
                f"({len(card.feature_names)} features, widths {card.hidden_widths}): "
                f"{str(exc).splitlines()[0]}; {hint}") from None
        except Exception as exc:  # unpickling refused or a corrupt file
            raise ModelCardMismatchError(f"{weights}: cannot be loaded ({exc}); {hint}") from None
        return cls(spec, net, card)


def _check_card(card: ModelCard, path: Path, spec: DeviceSpec, hint: str) -> None:
    if card.device != spec.key:
        raise ModelCardMismatchError(f"{path}: model was trained for device {card.device!r}, "
                                     f"not {spec.key!r}; {hint}")
    if card.feature_version != FEATURE_VERSION or tuple(card.feature_names) != FEATURE_NAMES:
        raise ModelCardMismatchError(
            f"{path}: feature_version {card.feature_version} ({len(card.feature_names)} features) does "
            f"not match this code's feature version {FEATURE_VERSION} ({len(FEATURE_NAMES)} features); "
            f"{hint}")
    n = len(FEATURE_NAMES)
    if len(card.feature_mean) != n or len(card.feature_std) != n:
        raise ModelCardMismatchError(f"{path}: feature_mean/feature_std must have {n} entries, got "
                                     f"{len(card.feature_mean)}/{len(card.feature_std)}; {hint}")
    if not all(math.isfinite(s) and s > 0 for s in card.feature_std):
        raise ModelCardMismatchError(f"{path}: feature_std must be finite and positive; {hint}")


def _load_shipped(device: DeviceSpec) -> MLPModel:
    return MLPModel.load(models_dir() / device.key, device)


register_model("mlp", _load_shipped)

