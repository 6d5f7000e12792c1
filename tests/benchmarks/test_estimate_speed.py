"""Overhead budget: `estimate` over the full pruned EXHAUSTIVE space of the seed problem, one CPU thread.

Run with `make bench`. The seed problem (bf16 560x1280x3420 on h100) has ~1206 configs; the MLP
must score them in <= 2 ms median. Without a shipped MLP the benchmark times a randomly
initialized one of the default architecture (the time does not depend on the weight values); without
a GBDT in a model folder (none ships), random trees of the size a fit on the H100 data keeps
(tests/synthetic.py's random_gbdt: 400 trees of 63 leaves).

`space.for_problem` hands out the same config objects for every problem of a size class, and the
features read each object's fields once (model/features.py, ConfigColumns), so the usual call finds them
read; `test_estimate_speed_first_call` times the first call for a size class, configs never seen.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from kernel_select.errors import ModelError
from kernel_select.model import get_model, registered_models
from kernel_select.problem import Problem
from kernel_select.space import for_problem
from kernel_select.offline.training.train import MLPHParams
from tests.synthetic import random_gbdt, untrained_mlp

SEED = Problem(560, 1280, 3420, "bfloat16")

# importing registers the model
for _module in ("kernel_select.model.analytical", "kernel_select.model.mlp", "kernel_select.model.gbdt"):
    try:
        importlib.import_module(_module)
    except ImportError:
        pass


def _model(name: str):
    try:
        return get_model(name, "h100")
    except ModelError:
        if name == "gbdt":
            return random_gbdt()
        if name != "mlp":
            raise
        return untrained_mlp(MLPHParams().hidden_widths)


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", registered_models("h100"))
def test_estimate_speed(benchmark, one_thread, name):
    model = _model(name)
    configs = for_problem(SEED, "h100")
    assert len(configs) == 1206
    out = benchmark(model.estimate, SEED.m, SEED.n, SEED.k, SEED.dtype, configs)
    assert out.shape == (len(configs),)


@pytest.mark.parametrize("name", registered_models("h100"))
def test_estimate_speed_first_call(benchmark, one_thread, name):
    model = _model(name)
    space = for_problem(SEED, "h100")

    def never_seen():  # new objects each round: the config-column table has not read them
        return (SEED.m, SEED.n, SEED.k, SEED.dtype, [config.model_copy() for config in space]), {}

    out = benchmark.pedantic(model.estimate, setup=never_seen, rounds=100)
    assert out.shape == (len(space),)


@pytest.mark.parametrize("name", registered_models("h100"))
def test_select_speed(benchmark, one_thread, name):
    """The whole decision for the seed GEMM (score the exhaustive space, the cuBLAS rule, top-8): what a
    compile pays per GEMM on top of the model."""
    from kernel_select import select

    model = _model(name)
    candidates = for_problem(SEED, "h100")
    selection = benchmark(select, SEED, model=model, gemm_topk=8, candidates=candidates)
    assert len(selection.choices) == 8
