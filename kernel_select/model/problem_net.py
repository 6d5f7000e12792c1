"""Full-batch training of a small problem-level network (the cuBLAS gate, the cuBLAS time head).

Both see one row per problem (a few hundred to a few thousand), so every epoch is one AdamW step
over all of them; the weights with the lowest validation RMSE are kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel_select.model.card import Architecture, build_body


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
    return FittedProblemNet(net.eval(), mean.astype(np.float32), std.astype(np.float32), best_rmse, best_epoch)
