"""A Problem's operand layout: validated, shown, and ignored by LUT matching and the model features."""

from __future__ import annotations

import json

import pytest

from kernel_select.configs import GemmConfig
from kernel_select.errors import ProblemError
from kernel_select.lut import parse_lut
from kernel_select.model.analytical import AnalyticalModel
from kernel_select.problem import Problem
from kernel_select.decision import select
from kernel_select.space import for_problem
from tests.inductor_doubles import FakeLUT

TRITON = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
TRITON_JSON = {"block_m": 64, "block_n": 128, "block_k": 64, "num_stages": 3, "num_warps": 4}


def test_layout_defaults_to_nn_and_takes_part_in_equality():
    assert Problem(64, 128, 256).layout == "nn"
    assert Problem(64, 128, 256) == Problem(64, 128, 256, layout="nn")
    assert Problem(64, 128, 256) != Problem(64, 128, 256, layout="nt")
    assert len({Problem(64, 128, 256), Problem(64, 128, 256, layout="tn")}) == 2


@pytest.mark.parametrize("bad", ["NT", "n", "ntt", "", None, 1])
def test_a_bad_layout_is_a_problem_error_naming_the_accepted_ones(bad: object):
    with pytest.raises(ProblemError, match=r"layout: .*nn, nt, tn, tt"):
        Problem(64, 128, 256, layout=bad)  # type: ignore[arg-type]


def test_str_names_the_layout_only_when_it_is_not_nn():
    assert str(Problem(64, 128, 256)) == "mm 64x128x256 bfloat16"
    assert str(Problem(64, 128, 256, layout="nt")) == "mm 64x128x256 bfloat16 nt"
    assert str(Problem(64, 128, 256, batch=4, op="bmm", layout="tn")) == "bmm 4x64x128x256 bfloat16 tn"


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_a_lut_entry_matches_every_layout_of_its_sizes(layout: str):
    lut = parse_lut(json.dumps({"schema_version": 3, "devices": {"h100": {"mm": {"bfloat16": [
        {"m": 560, "n": 1280, "k": 3420, "configs": [TRITON_JSON]},
        {"m": {"min": 1024, "max": 4096}, "n": 1280, "k": 3420, "pin": TRITON_JSON}]}}}}))
    exact, ranged = Problem(560, 1280, 3420, layout=layout), Problem(2048, 1280, 3420, layout=layout)
    assert lut.lookup(exact, "h100") == [TRITON]
    entry = lut.match(exact, "h100")
    assert (entry.m, entry.n, entry.k, entry.layout, entry.configs) == (560, 1280, 3420, None, [TRITON])
    assert lut.pinned(ranged, "h100") == TRITON


def test_selection_is_the_same_for_every_layout_while_the_model_ignores_it():
    model = AnalyticalModel("h100")
    lut = FakeLUT({(560, 1280, 3420, "bfloat16"): [TRITON]})
    nn, nt = Problem(560, 1280, 3420), Problem(560, 1280, 3420, layout="nt")
    assert (model.estimate(nt, for_problem(nt, "h100")) == model.estimate(nn, for_problem(nn, "h100"))).all()
    picks = [select(problem, model=model, gemm_topk=6, lut=lut).choices for problem in (nt, nn)]
    assert picks[0] == picks[1] and len(picks[0]) == 6 and picks[0][0].source == "lut"
