"""The coverage sampler, the architecture table, the family split and the row writer (CPU only);
the multi-GPU scheduling is tested in test_host_sharding.py."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from kernel_select.device import get_device
from kernel_select.errors import ProblemError
from kernel_select.offline.data import shapes
from kernel_select.offline.data.plans import sampler
from kernel_select.offline.data.architectures import ARCHITECTURES, KINDS, layer_gemms
from kernel_select.offline.harness.bench_plan import distinct_keys, plan
from kernel_select.offline.harness.pipeline import RowWriter
from kernel_select.offline.data.splits import family_holdout
from tests.offline.test_bench_plan import _rows


@pytest.fixture(scope="module")
def coverage():
    return sampler.coverage_shapes(2000, seed=1)


def test_coverage_meets_every_minimum_share(coverage):
    assert len(coverage) == 2000
    assert sampler.check_shares(coverage) == []
    assert all(1 <= s.m <= 16384 and 2.0 * s.m * s.n * s.k <= 1e11 for s in coverage)
    assert len({s.family for s in coverage if not s.family.startswith("sampler:")}) >= 30


def test_groups_are_contiguous_and_share_compiled_binaries(coverage):
    runs = [list(g) for _, g in itertools.groupby(coverage, key=lambda s: s.group)]
    assert len(coverage) / len(runs) >= 64  # problems of a group are collected in long stretches
    group = next(g for g in runs if len(g) >= 100 and "/N<=16384/K<=16384" in g[0].group)[:40]
    planned = plan([s.problem() for s in group], get_device("h100"))
    pairs = sum(map(len, planned))
    assert pairs / len(distinct_keys(planned)) > 8  # one binary serves many problems


def test_architecture_table_covers_kinds_and_backward_gemms():
    assert len(ARCHITECTURES) >= 30 and {a.kind for a in ARCHITECTURES} == set(KINDS)
    llama = next(a for a in ARCHITECTURES if a.name == "llama3-8b")
    gemms = {(g.layer, g.m, g.n, g.k, g.layout) for g in layer_gemms(llama)}
    # nn.Linear(14336 -> 4096): W stored (4096, 14336); dW has W's shape
    assert {("down_proj fwd", 4096, 4096, 14336, "nt"), ("down_proj dX", 4096, 14336, 4096, "nn"),
            ("down_proj dW", 4096, 14336, 4096, "tn")} <= gemms


@pytest.mark.parametrize("cap", [0, -1, float("nan"), 100])
def test_a_cap_no_problem_meets_is_refused(cap):
    with pytest.raises(ProblemError, match="max_flop"):
        shapes.random_shapes(3, max_flop=cap)
    with pytest.raises(ProblemError, match="max_flop"):
        sampler.coverage_shapes(3, max_flop=cap)


def test_a_tiny_cap_still_returns_quickly():
    small = shapes.random_shapes(20, max_flop=shapes.SMALLEST_FLOP)
    assert all((s.m, s.n, s.k) == (1, 16, 16) for s in small)


def test_shapes_cli_max_flop_zero_exits_2_at_once(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernel_select.cli", "shapes", "--out",
                           str(tmp_path / "s.json"), "--max-flop", "0"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "--max-flop" in proc.stderr and proc.stderr.count("\n") == 1


def test_coverage_roundtrips_with_provenance(tmp_path, coverage):
    path = tmp_path / "c.json"
    shapes.save(coverage[:50], path)
    loaded = shapes.load(path)
    assert loaded == coverage[:50]
    assert {"family", "layer", "pass"} == set(loaded[0].provenance())


def test_family_holdout_names_architectures_and_one_alignment_class():
    assert family_holdout({"family": "gemma2-9b", "n": 4096, "k": 3584})
    assert family_holdout({"family": "sampler:nodd-kodd", "n": 33, "k": 101})
    assert not family_holdout({"family": "sampler:nodd-k8", "n": 33, "k": 104})
    assert not family_holdout({"family": "llama3-8b", "n": 4096, "k": 4096})


def test_row_writer_appends_in_the_background(tmp_path):
    out = tmp_path / "d.parquet"
    writer = RowWriter(out)
    for m in (16, 17, 18):
        writer.put(_rows(f"bfloat16/mm/1x{m}x16x16", [1.0]).to_dict("records"))
    writer.close()
    assert writer.rows_written == 3
    from kernel_select.offline.data import dataset
    assert dataset.read(out)["problem_id"].nunique() == 3
