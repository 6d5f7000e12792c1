"""gemm_topk="auto" outside the model's training data: a layout its card does not list gets the cap."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_select.model import get_model
from kernel_select.model.auto_topk import hedge_reason
from kernel_select.model.mlp import MLPModel
from kernel_select.problem import Problem
from kernel_select.resources import shipped_dir
from kernel_select.decision import AUTO_FALLBACK, resolve_k, select
from tests.synthetic import untrained_mlp

NN, NT = Problem(560, 1280, 3420), Problem(560, 1280, 3420, layout="nt")
CLEAR_WINNER = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # the gap rule asks for 1 config


def _auto_k(model, problem: Problem, cap: int = 5) -> int:
    """resolve_k as select() calls it: hedged where the model says the problem is outside its data."""
    return resolve_k("auto", 6, model=model, predicted_ms=CLEAR_WINNER, cap=cap, problem=problem,
                     at_cap=bool(hedge_reason(model, problem)))


def test_a_layout_the_card_does_not_list_gets_the_cap_and_says_why():
    model = untrained_mlp()
    assert model.trained_layouts() == ("nn",)
    assert _auto_k(model, NN) == 1 and _auto_k(model, NT) == 5
    assert hedge_reason(model, NN) == ""
    assert hedge_reason(model, NT) == "layout nt not in the model's training data"
    assert resolve_k("auto", 6, model=model, predicted_ms=CLEAR_WINNER, cap=5, at_cap=True) == 5
    assert resolve_k("auto", 6, model=model, predicted_ms=CLEAR_WINNER, cap=5, at_cap=False) == 1


def test_a_layout_the_card_lists_is_trusted_again():
    model = untrained_mlp()
    model.card = model.card.model_copy(update={"layouts": ["nn", "nt"]})
    assert _auto_k(model, NT) == 1
    assert hedge_reason(model, Problem(560, 1280, 3420, layout="tn")) != ""


def test_a_model_with_no_training_data_is_never_out_of_it():
    analytical = get_model("analytical", "h100")
    assert analytical.trained_layouts() is None and hedge_reason(analytical, NT) == ""
    assert _auto_k(analytical, NT, cap=8) == AUTO_FALLBACK


def test_select_auto_benchmarks_the_cap_for_a_transposed_weight_and_says_why():
    model = untrained_mlp()
    hedged = select(NT, model=model, gemm_topk="auto", auto_cap=6)
    assert len(hedged.choices) == 6 and hedged.auto_at_cap == "layout nt not in the model's training data"
    counted = select(NT, model=model, gemm_topk=3)
    assert len(counted.choices) == 3 and counted.auto_at_cap == ""  # a count is a count, whatever the layout


@pytest.mark.parametrize("device", ["h100", "h200"])
def test_shipped_models_list_the_layouts_they_were_trained_on(device: str):
    assert MLPModel.load(shipped_dir("models") / device, device).trained_layouts() == ("nn", "nt", "tn")
