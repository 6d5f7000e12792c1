"""Shared pieces of the Inductor tests: stand-ins for what the handler reads from Inductor (with
torch's real KernelTemplateChoice classes) and small helpers."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._inductor.kernel_template_choice import KernelTemplateChoice
from torch._inductor.template_heuristics.params import DictKernelTemplateParams

from kernel_select import runtime
from kernel_select.configs import GemmConfig
from kernel_select.problem import Problem
from tests.inductor_doubles import FakeGate  # noqa: F401 -- tests elsewhere import it from here
from tests.subprocess_env import package_env


SEED = Problem(560, 1280, 3420, "bfloat16")
LUT_A = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
LUT_B = GemmConfig(block_m=128, block_n=64, block_k=32, num_stages=4, num_warps=8)
INDUCTOR_FIRST = {"EVEN_K": False, "USE_FAST_ACCUM": False, "ACC_TYPE": "tl.float32", "num_stages": 1,
                  "num_warps": 2, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "hint_override": None,
                  "GROUP_M": 8}


class FakeTemplate:
    def __init__(self, uid: str) -> None:
        self.uid = uid


class FakeNode:
    """An Inductor IR node as the layout reader sees it: sizes and strides (ints or sympy)."""

    def __init__(self, size: tuple[object, ...], stride: tuple[object, ...]) -> None:
        self.size, self.stride = size, stride

    def get_size(self) -> tuple[object, ...]:
        return self.size

    def get_stride(self) -> tuple[object, ...]:
        return self.stride


class FakeInputs:
    """What the handler reads from Inductor's MMKernelInputs. `strides`: those of the views A[M, K]
    and B[K, N] ((stride_am, stride_ak), (stride_bk, stride_bn)); default both row-major."""

    def __init__(self, m: int, n: int, k: int, dtype: torch.dtype = torch.bfloat16, device_type: str = "cuda",
                 batch: int = 1, k_symbolic: object = None,
                 strides: tuple[tuple[object, object], tuple[object, object]] | None = None,
                 bias: FakeNode | None = None) -> None:
        self.m, self.n, self.k, self.batch = m, n, k, batch
        self.bias = bias  # addmm's first input
        self._dtype, self.device_type = dtype, device_type
        self.k_symbolic = k if k_symbolic is None else k_symbolic
        self.strides = strides or ((k, 1), (n, 1))

    def mat1mat2(self) -> tuple[FakeNode, FakeNode]:
        return (FakeNode((self.m, self.k_symbolic), self.strides[0]),
                FakeNode((self.k_symbolic, self.n), self.strides[1]))

    def nodes(self) -> list[FakeNode]:
        return [*([self.bias] if self.bias is not None else []), *self.mat1mat2()]

    def mnk_hinted(self) -> tuple[int, int, int]:
        return self.m, self.n, self.k

    def mnk_symbolic(self) -> tuple[object, object, object]:
        return self.m, self.n, self.k_symbolic

    def batch_hinted(self) -> int:
        return self.batch

    def dtype(self, idx: int = 0) -> torch.dtype:
        return self._dtype

    def device(self) -> torch.device:
        return torch.device(self.device_type, 0)


def ktc(uid: str, inputs: FakeInputs, **params: object) -> KernelTemplateChoice:
    return KernelTemplateChoice(template=FakeTemplate(uid), params=DictKernelTemplateParams(dict(params)),
                                extra_kwargs={"ALLOW_TF32": False}, layout="layout", inputs=inputs)


def inductor_candidates(inputs: FakeInputs, triton_uid: str = "triton::mm") -> dict[str, list]:
    """Inductor-like template choices: one ATen, 20 Triton, one decompose_k."""
    triton = [ktc(triton_uid, inputs, **{**INDUCTOR_FIRST, "num_stages": 1 + i % 5}) for i in range(20)]
    return {"aten::mm": [ktc("aten::mm", inputs)], triton_uid: triton,
            "decompose_k": [ktc("decompose_k", inputs, k_split=4)]}


def finalize(handler, inputs, candidates, op="mm", overrides=None):  # noqa: ANN001, ANN201
    generators = {uid: iter(items) for uid, items in candidates.items()}
    return handler._finalize_template_configs(generators, inputs, [FakeTemplate(u) for u in candidates], op,
                                              overrides)


def triton_of(result: list, uid: str = "triton::mm") -> list:  # noqa: ANN001
    return [c for c in result if c.template.uid == uid]


def params_config(choice: KernelTemplateChoice) -> GemmConfig:
    return GemmConfig.from_inductor_kwargs(choice.params.to_kwargs())


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name.startswith("kernel_select.inductor") and r.levelno == logging.WARNING]


def use_gate(monkeypatch: pytest.MonkeyPatch, gate: object) -> None:
    monkeypatch.setattr(runtime, "gate", lambda device: gate)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = package_env()
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=240)


