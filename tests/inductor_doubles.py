"""Test doubles for the selection, Inductor and Triton integration tests: a deterministic model, a
broken one, a LUT stand-in, a fixed-ratio cuBLAS gate, and what a correct top-k must return with them."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from kernel_select import space
from kernel_select.configs import GemmConfig
from kernel_select.errors import ModelError
from kernel_select.lut import LUTHit
from kernel_select.model import PerformanceModel
from kernel_select.model.cublas import BatchedGate, CublasGate
from kernel_select.problem import Problem


class FakeModel(PerformanceModel):
    """Deterministic, all-distinct predictions: prefers 128x128x64 tiles, few stages, few warps."""

    name = "fake"

    def __init__(self, device: str = "h100", tag: str = "v1") -> None:
        super().__init__(device)
        self.tag = tag
        self.calls = 0

    def predict(self, problem: Problem, device: object, configs: Sequence[GemmConfig]) -> np.ndarray:
        self.calls += 1
        return np.array([0.01 + score(c) for c in configs], dtype=np.float64)

    def describe(self) -> str:
        return f"fake model {self.tag} for {self.device.key}"


def score(c: GemmConfig) -> float:
    # Weighted so that no two configs of the exhaustive space tie.
    return (abs(c.block_m - 128) * 10 + abs(c.block_n - 128) + abs(c.block_k - 64) * 0.1
            + c.num_stages * 0.01 + c.num_warps * 0.001 + c.group_m * 1e-6)


class BrokenModel(FakeModel):
    def predict(self, problem, device, configs):  # noqa: ANN001, ANN201
        raise ModelError("fake.pt: weights do not match the model card")


class FakeLUT:
    """A lookup table (the decision's LookupTable): configs per (m, n, k, dtype), no pins or ranges."""

    def __init__(self, entries: dict[tuple[int, int, int, str], list[GemmConfig]], tag: str = "") -> None:
        self.entries = entries
        self.tag = tag

    def probe(self, problem: Problem, device: object) -> LUTHit | None:
        key = (problem.m, problem.n, problem.k, problem.dtype)
        return LUTHit(entry=key, configs=tuple(self.entries[key]), pin=None) if key in self.entries else None

    def digest(self) -> str:
        text = repr(sorted((key, [c.key for c in value]) for key, value in self.entries.items())) + self.tag
        return hashlib.sha256(text.encode()).hexdigest()


class _BatchedNet:
    """The batched network of a FakeGate: the decision asks it only which problems it covers."""

    supports = BatchedGate.supports


class FakeGate:
    """A cuBLAS gate (CublasGate's interface) that predicts a fixed cuBLAS / best-Triton time ratio
    for every problem, and counts how often it is asked."""

    def __init__(self, ratio: float, tag: str = "g1", batched: bool = False) -> None:
        self.ratio, self.tag, self.calls = ratio, tag, 0
        self.batched = _BatchedNet() if batched else None

    def supports(self, problem: Problem) -> bool:
        """What CublasGate.supports says: single GEMMs, and batched ones with a batched network."""
        return CublasGate.supports(self, problem)  # type: ignore[arg-type]

    def predict_log_ratio(self, problems: Sequence[Problem]) -> np.ndarray:
        self.calls += 1
        return np.full(len(problems), math.log(self.ratio))

    def digest(self) -> str:
        return self.tag


def expected_top(problem: Problem, k: int, pinned: Sequence[GemmConfig] = (),
                 device: str = "h100") -> list[GemmConfig]:
    """What a correct top-k must return with FakeModel: pinned first, then lowest scores."""
    pool = space.for_problem(problem, device, "exhaustive")
    rest = sorted((c for c in pool if c not in set(pinned)), key=score)
    return list(pinned) + rest[:k - len(pinned)]
