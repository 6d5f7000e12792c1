"""Full-batch training of a small problem-level network (the cuBLAS gate, the cuBLAS time head).

Both see one row per problem (a few hundred to a few thousand), so every epoch is one AdamW step
over all of them; the weights with the lowest validation RMSE are kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelError
from kernel_select.model.card import (
    Architecture,
    ModelCard,
    build_body,
    load_checkpoint,
    load_state,
    retrain_hint,
    save_checkpoint,
)
from kernel_select.problem import DTYPE_BYTES, Problem, dtype_name


class ProblemNetCheckpoint:
    """A trained problem-level network over the gate's features (model/gate.py), saved as the
    checkpoint `STEM` of card.py. Subclasses name the checkpoint and what the output means."""

    STEM = ""  # the checkpoint's file stem and card `model`
    WHAT = ""  # for error messages: "cuBLAS gate", ...

    def __init__(self, device: DeviceSpec | str, net: Any, card: ModelCard) -> None:
        self.device = get_device(device)
        self.net = net.eval()
        self.card = card
        self.mean = np.asarray(card.feature_mean, dtype=np.float32)
        self.std = np.asarray(card.feature_std, dtype=np.float32)

    def _outputs(self, problems: Sequence[Problem]) -> np.ndarray:
        """The network's output per problem, float64; a non-finite one is a ModelError."""
        import torch

        from kernel_select.model.gate import gate_features

        if not problems:
            return np.zeros(0)
        # gate features v1 have no layout input
        layout = [p.layout for p in problems] if self.card.feature_version >= 2 else None
        x = gate_features([p.m for p in problems], [p.n for p in problems], [p.k for p in problems],
                          [DTYPE_BYTES[dtype_name(p.dtype)] for p in problems], self.device, layout)
        with torch.inference_mode():
            out = self.net(torch.from_numpy((x - self.mean) / self.std)).squeeze(1).double().numpy()
        if not np.all(np.isfinite(out)):
            raise ModelError(f"{self.WHAT} for {self.device.key} returned non-finite predictions")
        return out

    def save(self, model_dir: str | Path) -> Path:
        """Write the checkpoint (`<STEM>.pt`, `<STEM>.json`) into `model_dir`."""
        return save_checkpoint(model_dir, self.STEM, self.net.state_dict(), self.card)

    @classmethod
    def load(cls, model_dir: str | Path, device: DeviceSpec | str, *,
             allow_same_architecture: bool = False) -> Any:
        """Raises ModelError naming the file when it is missing, unreadable or for another device."""
        from kernel_select.model.gate import GATE_FEATURE_SETS

        spec = get_device(device)
        model_dir = Path(model_dir)
        version = _card_feature_version(model_dir / f"{cls.STEM}.json", retrain_hint(model_dir, spec.key))
        state, card = load_checkpoint(model_dir, cls.STEM, spec, model=cls.STEM,
                                      feature_version=version, feature_names=GATE_FEATURE_SETS[version],
                                      allow_same_architecture=allow_same_architecture)
        net = load_state(build_body(card.architecture), state, model_dir / f"{cls.STEM}.pt", card,
                         retrain_hint(model_dir, spec.key))
        return cls(spec, net, card)


def _card_feature_version(card_path: Path, hint: str) -> int:
    """The card's gate feature version where this code computes it, else the current one (which
    the checkpoint check then refuses with the retrain hint; a missing card is reported there too)."""
    from kernel_select.model.card import read_card
    from kernel_select.model.gate import GATE_FEATURE_SETS, GATE_FEATURE_VERSION

    if not card_path.is_file():
        return GATE_FEATURE_VERSION
    version = read_card(card_path, hint).feature_version
    return version if version in GATE_FEATURE_SETS else GATE_FEATURE_VERSION


@dataclass
class FittedProblemNet:
    """A trained network with the standardization it expects and how it did on validation."""

    net: Any
    mean: np.ndarray  # float32 per feature, from the training rows
    std: np.ndarray
    val_rmse: float
    best_epoch: int


def fit_problem_net(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray,
                    architecture: Architecture, *, seed: int = 0, epochs: int = 1500, check_every: int = 10,
                    lr: float = 1e-2, weight_decay: float = 1e-2) -> FittedProblemNet:
    """Standardize on the training rows, fit MSE, keep the best validation epoch (checked every
    `check_every` epochs)."""
    import torch

    mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-6
    to_tensor = lambda a: torch.tensor((a - mean) / std, dtype=torch.float32)  # noqa: E731
    xt, xv = to_tensor(x_train), to_tensor(x_val)
    yt = torch.tensor(np.asarray(y_train), dtype=torch.float32)
    yv = np.asarray(y_val, dtype=np.float64)
    torch.manual_seed(seed)
    net = build_body(architecture)
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    best_rmse, best_epoch, best_state = math.inf, 0, None
    for epoch in range(1, epochs + 1):
        optimizer.zero_grad()
        loss = ((net(xt).squeeze(1) - yt) ** 2).mean()
        loss.backward()
        optimizer.step()
        if epoch % check_every == 0:
            with torch.no_grad():
                rmse = float(np.sqrt(np.mean((net(xv).squeeze(1).numpy() - yv) ** 2)))
            if rmse < best_rmse:
                best_rmse, best_epoch = rmse, epoch
                best_state = {name: t.clone() for name, t in net.state_dict().items()}
    assert best_state is not None  # epochs >= check_every: at least one check ran
    net.load_state_dict(best_state)
    return FittedProblemNet(net.eval(), mean.astype(np.float32), std.astype(np.float32), best_rmse,
                            best_epoch)
