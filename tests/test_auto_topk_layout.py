"""topk="auto" outside the model's training data: a layout its card does not list gets the cap."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_select.model import get_model, load_default
from kernel_select.model.auto_topk import hedge_reason
from kernel_select.problem import Problem
from kernel_select.select import AUTO_FALLBACK, resolve_k, top_k
from tests.synthetic import untrained_mlp

NN, NT = Problem(560, 1280, 3420), Problem(560, 1280, 3420, layout="nt")
CLEAR_WINNER = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # the gap rule asks for 1 config


def test_a_layout_the_card_does_not_list_gets_the_cap_and_says_why():
    model = untrained_mlp()
    assert model.trained_layouts() == ("nn",)
    assert resolve_k("auto", 6, model=model, predicted_ms=CLEAR_WINNER, cap=5, problem=NN) == 1
    assert resolve_k("auto", 6, model=model, predicted_ms=CLEAR_WINNER, cap=5, problem=NT) == 5
    assert hedge_reason(model, NN) == ""
    assert hedge_reason(model, NT) == "layout nt not in the model's training data"


def test_a_layout_the_card_lists_is_trusted_again():
    model = untrained_mlp()
    model.card = model.card.model_copy(update={"layouts": ["nn", "nt"]})
    assert resolve_k("auto", 6, model=model, predicted_ms=CLEAR_WINNER, cap=5, problem=NT) == 1
    assert hedge_reason(model, Problem(560, 1280, 3420, layout="tn")) != ""


def test_a_model_with_no_training_data_is_never_out_of_it():
    analytical = get_model("analytical", "h100")
    assert analytical.trained_layouts() is None and hedge_reason(analytical, NT) == ""
    auto = resolve_k("auto", 6, model=analytical, predicted_ms=CLEAR_WINNER, cap=8, problem=NT)
    assert auto == AUTO_FALLBACK


def test_top_k_auto_benchmarks_the_cap_for_a_transposed_weight():
    model = untrained_mlp()
    assert len(top_k(NT, "auto", model=model, auto_cap=6)) == 6
    assert len(top_k(NT, 3, model=model)) == 3  # a count is a count, whatever the layout


def test_shipped_models_list_the_layouts_they_were_trained_on():
    # the MLP (features v4) on the measured layouts; the ensemble (features v2) on "nn" only
    assert load_default("h100").trained_layouts() == ("nn", "nt", "tn")
    pytest.importorskip("lightgbm")
    from kernel_select.model.ensemble import load_shipped

    assert load_shipped("h100").trained_layouts() == ("nn",)
