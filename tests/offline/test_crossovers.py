"""Bucket edges from measured crossovers (kernel_select.offline.serving.crossovers), on the CPU."""

from __future__ import annotations

import math

from kernel_select.configs import GemmConfig
from kernel_select.lut import ATEN
from kernel_select.offline.serving import crossovers

#: Two GEMMs of one graph timed at four lengths: "x" wins the first up to 200 and "y" from 400;
#: the second is one choice everywhere.
FIRST = {100: {"x": 1.0, "y": 1.1}, 200: {"x": 1.0, "y": 1.01},
         400: {"x": 1.2, "y": 1.0}, 800: {"x": 1.5, "y": 1.0}}
SECOND = {length: {"p": 1.0, "aten": 1.3} for length in FIRST}
LENGTHS = sorted(FIRST)


def test_a_timing_is_labelled_aten_or_by_its_triton_config_and_other_choices_get_no_label():
    config = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
    assert crossovers.label_of("extern", None) == ATEN
    assert crossovers.label_of("triton", config) == config.short()
    assert crossovers.label_of("triton", None) is None  # a Triton template that is not the mm one
    assert crossovers.label_of("other", config) is None  # decompose-K: a LUT cannot name it


def test_fitting_labels_are_within_tolerance_at_every_length_best_geometric_mean_first():
    assert crossovers.fitting(FIRST, [100, 200], 0.02) == ["x"]
    assert crossovers.fitting(FIRST, [200], 0.02) == ["x", "y"]
    assert crossovers.fitting(FIRST, LENGTHS, 0.02) == []
    assert crossovers.fitting(FIRST, LENGTHS, math.inf) == ["y", "x"]  # geometric means 1.03 and 1.16


def test_a_label_that_failed_or_was_not_timed_at_a_length_does_not_fit_there():
    measured = {1: {"a": 1.0, "b": 1.0}, 2: {"a": math.inf, "b": 1.0}, 3: {"b": 1.0}}
    assert crossovers.fitting(measured, [1, 2, 3], math.inf) == ["b"]
    assert crossovers.best_ms({"a": math.inf}) == math.inf


def test_segments_are_the_fewest_runs_in_which_every_gemm_keeps_one_choice():
    assert crossovers.segment([FIRST, SECOND], LENGTHS, 0.02) == [(100, 200), (400, 800)]
    assert crossovers.segment([SECOND], LENGTHS, 0.02) == [tuple(LENGTHS)]  # no crossover: one bucket
    assert crossovers.segment([FIRST], LENGTHS, 0.15) == [tuple(LENGTHS)]  # y is within 15% everywhere


def test_the_gap_between_runs_is_timed_in_its_middle_and_the_edge_lies_in_the_middle_of_what_is_left():
    runs = crossovers.segment([FIRST, SECOND], LENGTHS, 0.02)
    assert crossovers.gaps(runs) == [(200, 400)]
    assert crossovers.middle(200, 400) == 283 and crossovers.edge(200, 400) == 283
    assert crossovers.middle(5, 6) is None  # nothing left between them
    assert crossovers.edge(5, 6) == 6 and crossovers.edge(1000, 1001) == 1001
