"""Warm start: fine-tune a saved MLP on another dataset instead of training from random weights.

A new GPU of an architecture that already has a model (an H200 next to the H100) has little data
of its own at first; starting from the other device's weights keeps what they learned about the
config space. The saved model's standardization statistics are kept, not recomputed: its first
layer's weights are only meaningful for inputs scaled the way they were trained on.

A saved model of an older feature version whose features are a prefix of the new version's (the
shipped version-4 models, and version 5 = version 4 + log_batch) is widened: each new input gets
zero weights, mean 0 and standard deviation 1, so the widened network predicts exactly what the
saved one does wherever the new inputs are 0 (log_batch of a single GEMM), and fine-tuning learns
what they add (the batch of batched GEMMs).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import torch

from kernel_select.device import DeviceSpec
from kernel_select.errors import OptionError
from kernel_select.model.card import ModelCard
from kernel_select.model.features import FEATURE_SETS
from kernel_select.model.mlp import AveragedRuntimeNet, MLPModel, RuntimeNet


@dataclass(frozen=True)
class WarmStart:
    """The saved model's member networks (copies: training never changes the source) and statistics."""

    members: tuple[RuntimeNet, ...]
    feature_mean: np.ndarray
    feature_std: np.ndarray
    record: dict[str, Any]  # what the new card's hyperparameters say it started from
    card: ModelCard | None = None  # the saved model's card (its domain, for train's claim_start_domain)

    def standardize(self, features: np.ndarray) -> np.ndarray:
        return ((features - self.feature_mean) / self.feature_std).astype(np.float32)


def load_warm_start(init_dir: str | Path, spec: DeviceSpec, *, feature_version: int,
                    hidden_widths: tuple[int, ...], members: int,
                    any_architecture: bool = False) -> WarmStart:
    """The MLP saved in `init_dir`, for fine-tuning on `spec`'s data: the same widths and member
    count as the run asks for, the same feature version or one it widens to (module docstring),
    and a device of the same SM architecture (any device with `any_architecture`: calibrating a
    GPU from a model someone named).

    Raises:
        ModelError: `init_dir` holds no model, or one that does not load (another architecture...).
        OptionError: the saved model's shape differs from the requested one.
    """
    model = MLPModel.load(init_dir, None if any_architecture else spec, allow_same_architecture=True)
    card = model.card
    asked = {"feature version": feature_version, "hidden widths": list(hidden_widths), "members": members}
    saved = {"feature version": card.feature_version, "hidden widths": list(card.architecture.hidden_widths),
             "members": card.architecture.members}
    widened = widens(saved["feature version"], feature_version)
    differing = [f"{key} {saved[key]} (asked for {asked[key]})" for key in asked
                 if saved[key] != asked[key] and not (key == "feature version" and widened)]
    if differing:
        raise OptionError(f"--init {init_dir}: the saved model has {', '.join(differing)}; a warm start "
                          f"needs the same shape")
    net = model.net
    nets = [copy.deepcopy(member).train() for member in (net.members if isinstance(net, AveragedRuntimeNet)
                                                         else [net])]
    mean = np.asarray(card.feature_mean, dtype=np.float64)
    std = np.asarray(card.feature_std, dtype=np.float64)
    record = {"dir": str(init_dir), "device": card.device, "digest": model.digest(),
              "data": card.data.file if card.data is not None else None}
    added = len(FEATURE_SETS[feature_version]) - len(mean)
    if added:
        nets = [_widened(member, added) for member in nets]
        mean, std = np.r_[mean, np.zeros(added)], np.r_[std, np.ones(added)]
        record["widened"] = f"feature version {card.feature_version} -> {feature_version}"
    return WarmStart(members=tuple(nets), feature_mean=mean, feature_std=std, record=record, card=card)


def widens(saved: int, asked: int) -> bool:
    """Whether a model of feature version `saved` can start a model of version `asked`: the saved
    version's features are the first ones of the asked version's."""
    old, new = FEATURE_SETS.get(saved), FEATURE_SETS.get(asked)
    return old is not None and new is not None and len(new) > len(old) and new[:len(old)] == old


def _widened(net: RuntimeNet, added: int) -> RuntimeNet:
    """`net` with `added` more inputs, after the others, whose first-layer weights are 0."""
    first = net.body[0]
    wider = torch.nn.Linear(first.in_features + added, first.out_features)
    with torch.no_grad():
        wider.weight.zero_()
        wider.weight[:, :first.in_features] = first.weight
        wider.bias.copy_(first.bias)
    net.body[0] = wider
    return net
