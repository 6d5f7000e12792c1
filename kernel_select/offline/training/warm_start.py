"""Warm start: fine-tune a saved MLP on another dataset instead of training from random weights.

A new GPU of an architecture that already has a model (an H200 next to the H100) has little data
of its own at first; starting from the other device's weights keeps what they learned about the
config space. The saved model's standardization statistics are kept, not recomputed: its first
layer's weights are only meaningful for inputs scaled the way they were trained on.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernel_select.device import DeviceSpec
from kernel_select.errors import OptionError
from kernel_select.model.mlp import AveragedRuntimeNet, MLPModel, RuntimeNet


@dataclass(frozen=True)
class WarmStart:
    """The saved model's member networks (copies: training never changes the source) and statistics."""

    members: tuple[RuntimeNet, ...]
    feature_mean: np.ndarray
    feature_std: np.ndarray
    record: dict[str, Any]  # what the new card's hyperparameters say it started from

    def standardize(self, features: np.ndarray) -> np.ndarray:
        return ((features - self.feature_mean) / self.feature_std).astype(np.float32)


def load_warm_start(init_dir: str | Path, spec: DeviceSpec, *, feature_version: int,
                    hidden_widths: tuple[int, ...], members: int) -> WarmStart:
    """The MLP saved in `init_dir`, for fine-tuning on `spec`'s data: the same feature version,
    widths and member count as the run asks for, and a device of the same SM architecture.

    Raises:
        ModelError: `init_dir` holds no model, or one that does not load (another architecture...).
        OptionError: the saved model's shape differs from the requested one.
    """
    model = MLPModel.load(init_dir, spec, allow_same_architecture=True)
    card = model.card
    asked = {"feature version": feature_version, "hidden widths": list(hidden_widths), "members": members}
    saved = {"feature version": card.feature_version, "hidden widths": list(card.architecture.hidden_widths),
             "members": card.architecture.members}
    differing = [f"{key} {saved[key]} (asked for {asked[key]})" for key in asked if saved[key] != asked[key]]
    if differing:
        raise OptionError(f"--init {init_dir}: the saved model has {', '.join(differing)}; a warm start "
                          f"needs the same shape")
    net = model.net
    nets = list(net.members) if isinstance(net, AveragedRuntimeNet) else [net]
    return WarmStart(members=tuple(copy.deepcopy(member).train() for member in nets),
                     feature_mean=np.asarray(card.feature_mean, dtype=np.float64),
                     feature_std=np.asarray(card.feature_std, dtype=np.float64),
                     record={"dir": str(init_dir), "device": card.device, "digest": model.digest(),
                             "data": card.data.file if card.data is not None else None})
