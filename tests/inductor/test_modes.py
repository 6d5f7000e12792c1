"""The torch.compile options kernel_select hands out are ones Inductor accepts and means."""

from __future__ import annotations

import torch
import torch._inductor as torch_inductor
from torch._inductor import config as inductor_config

import kernel_select.inductor as ks_inductor
from tests.inductor.test_eager_parity import _ops


def test_max_autotune_options_are_the_mode_plus_a_search_space() -> None:
    options = ks_inductor.max_autotune_options("exhaustive", gemm_topk=2)
    mode = torch_inductor.list_mode_options("max-autotune-no-cudagraphs")
    assert {k: options[k] for k in mode} == mode
    assert options["max_autotune_gemm_search_space"] == "EXHAUSTIVE" and options["gemm_topk"] == 2


def test_gemm_autotune_options_tune_gemms_only_and_keep_gemvs_on_cublas() -> None:
    ks_inductor.register_options()  # gemm_topk must be a known option for config.patch
    options = ks_inductor.gemm_autotune_options(gemm_topk=4)
    with inductor_config.patch(options):  # Inductor refuses unknown keys
        assert inductor_config.max_autotune_gemm and inductor_config.triton.cudagraphs
        assert not (inductor_config.max_autotune or inductor_config.max_autotune_pointwise)
        assert not inductor_config.coordinate_descent_tuning
        assert "aten.mm.default" in _ops(torch.mm, (1, 64), (64, 32))  # a GEMV stays a GEMM
    assert ks_inductor.gemm_autotune_options(cudagraphs=False)["triton.cudagraphs"] is False
