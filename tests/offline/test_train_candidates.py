"""The model-selection candidates: labels, row capping, the fast_autotune net and the shortlist ensemble."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from kernel_select.offline.training.model_selection import cap_rows_per_problem
from kernel_select.offline.training.train_candidates import (
    Candidate, FastAutotuneNet, GBMParams, ensemble, rank_labels,
)


def test_rank_labels_fall_from_the_oracle_to_zero_at_twice_its_time():
    groups = np.array([0, 0, 0, 1, 1])
    log_ms = np.log([1.0, np.sqrt(2.0), 2.5, 3.0, 6.0])
    labels = rank_labels(groups, log_ms, GBMParams())
    assert labels.tolist() == [30, 15, 0, 30, 0]


def test_capping_keeps_every_contender_and_at_most_cap_rows():
    runtime = np.r_[np.linspace(1.0, 1.4, 20), np.linspace(2.0, 9.0, 80), np.linspace(1.0, 5.0, 10)]
    rows = pd.DataFrame({"problem_id": ["a"] * 100 + ["b"] * 10, "runtime_ms": runtime})
    keep = cap_rows_per_problem(rows, cap=32, seed=0)
    assert keep[:20].all() and keep[:100].sum() == 32  # the 20 within 1.5x of the best, then 12 sampled
    assert keep[100:].all()  # a problem under the cap keeps everything


def test_fast_autotune_net_scores_flat_and_listwise_batches_alike():
    torch.manual_seed(0)
    net = FastAutotuneNet(12).eval()
    assert sum(isinstance(m, torch.nn.BatchNorm1d) for m in net.modules()) == 6
    x = torch.randn(3, 5, 12)
    with torch.no_grad():
        torch.testing.assert_close(net(x), net(x.reshape(15, 12)).reshape(3, 5))
        # never below the fixed launch overhead of the PR (0.00541 ms)
        assert (net(x) >= np.log(0.00541) - 1e-6).all()


def _fixed(name, values):
    return Candidate(name, lambda f, g=None: np.asarray(values, dtype=np.float64)[f[:, 0].astype(int)],
                     calibrated=True, info={})


def test_shortlist_ensemble_rescoring_only_the_cheap_models_best():
    features = np.arange(6, dtype=np.float32)[:, None]
    groups = np.array([0, 0, 0, 1, 1, 1])
    cheap = _fixed("cheap", [1.0, 2.0, 3.0, 3.0, 1.0, 2.0])
    costly = _fixed("costly", [5.0, 0.0, 0.0, 0.0, 3.0, -1.0])
    full = ensemble("mean", [cheap, costly]).score(features, groups)
    np.testing.assert_allclose(full, [3.0, 1.0, 1.5, 1.5, 2.0, 0.5])
    short = ensemble("short", [cheap, costly], shortlist=2).score(features, groups)
    # shortlisted (cheap's best 2 per problem) get the mean; the rest at least the slowest of those
    np.testing.assert_allclose(short, [3.0, 1.0, 3.0, 3.0, 2.0, 0.5])
