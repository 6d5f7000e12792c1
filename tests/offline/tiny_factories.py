"""Factories for `compare-models --model` tests: a tiny network in each form a factory may return,
and the ways a factory can be wrong."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from kernel_select.offline.e2e.user_model import UserModel

NOT_CALLABLE = 3


class TwoLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.down(torch.relu(self.up(x))) * scale


def tiny_mlp() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return TwoLayer(), (torch.randn(8, 16),)


def tiny_mlp_tensor() -> tuple[nn.Module, torch.Tensor]:
    return TwoLayer(), torch.randn(8, 16)


def tiny_mlp_kwargs() -> tuple[nn.Module, dict[str, Any]]:
    return TwoLayer(), {"x": torch.randn(8, 16), "scale": 2.0}


def tiny_mlp_object() -> UserModel:
    return UserModel(TwoLayer(), (torch.randn(8, 16),), loss=lambda out: out.square().sum())


class Factories:
    @staticmethod
    def nested() -> tuple[nn.Module, list[torch.Tensor]]:
        return TwoLayer(), [torch.randn(8, 16)]


def raises() -> Any:
    raise RuntimeError("no weights here\nsecond line")


def module_only() -> nn.Module:
    return TwoLayer()


def three_tuple() -> tuple[Any, ...]:
    return TwoLayer(), (torch.randn(8, 16),), {}


def not_a_module() -> tuple[Any, Any]:
    return (lambda x: x), (torch.randn(2),)


def bad_inputs() -> tuple[nn.Module, int]:
    return TwoLayer(), 5
