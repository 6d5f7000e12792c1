"""Active learning: the committee's acquisition score, budget selection, the CLI, the experiment (CPU)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from kernel_select.cli.main import main
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import OptionError
from kernel_select.model import PerformanceModel
from kernel_select.offline.data import dataset, shapes, splits
from kernel_select.offline.data.plans import active
from kernel_select.offline.data.plans.sampler import compile_class
from kernel_select.offline.data.shapes import Shape
from kernel_select.offline.training import active_experiment
from kernel_select.offline.training.train import save_model
from kernel_select.problem import Problem
from tests.synthetic import synthetic_frame, untrained_mlp

H100 = get_device("h100")


class TileModel(PerformanceModel):
    """Predicts ms from the tile area, scaled by `scale`; on problems with m in `contrary` it
    prefers the opposite end of the space (so it disagrees there with a model that does not)."""

    name = "tile"

    def __init__(self, scale: float = 1.0, contrary: Sequence[int] = ()) -> None:
        super().__init__("h100")
        self.scale, self.contrary = scale, set(contrary)

    def predict(self, problem: Problem, device: DeviceSpec, configs: Sequence[GemmConfig]) -> np.ndarray:
        area = np.array([c.block_m * c.block_n * (1 + c.num_stages / 10) for c in configs], dtype=np.float64)
        ms = 1.0 / area if problem.m in self.contrary else area
        return self.scale * ms / ms.min()


def _pool() -> list[Shape]:
    sizes = [(64, 4096, 4096), (7, 4096, 4096), (128, 333, 4096), (256, 4096, 1000), (512, 4096, 4096),
             (1024, 333, 4096)]
    return [Shape(m, n, k, "bfloat16", "test pool", family="sampler:test") for m, n, k in sizes]


def test_a_committee_that_agrees_scores_zero():
    preds = np.array([1.0, 2.0, 3.0])
    assert active.committee_regret([preds, preds * 5.0, preds + 0.0]) == 0.0  # scale does not matter
    scored = active.score_candidates([TileModel(), TileModel(scale=3.0)], _pool(), progress=False)
    assert [c.score for c in scored] == [0.0] * len(_pool())


def test_committee_regret_is_the_predicted_loss_of_trusting_one_member():
    a, b = np.array([1.0, 2.0]), np.array([3.0, 1.0])  # a picks config 0, b picks config 1
    # b thinks a's pick costs 3/1, a thinks b's pick costs 2/1: mean ratio 2.5, regret 1.5
    assert active.committee_regret([a, b]) == pytest.approx(1.5)
    with pytest.raises(OptionError):
        active.committee_regret([a])


def test_the_problem_the_committee_disagrees_on_ranks_first():
    scored = active.score_candidates([TileModel(), TileModel(contrary=[7])], _pool(), progress=False)
    best = max(scored, key=lambda c: c.score)
    assert best.shape.m == 7 and best.score > 0
    assert all(c.score == 0 for c in scored if c.shape.m != 7)
    chosen = active.select_for_budget(scored, best.rows, "disagreement")
    assert [c.shape.m for c in chosen] == [7]


def test_committee_needs_two_members_of_one_device():
    with pytest.raises(OptionError, match="at least 2"):
        active.score_candidates([TileModel()], _pool(), progress=False)
    other = TileModel()
    other.device = get_device("a100")
    with pytest.raises(OptionError, match="different devices"):
        active.score_candidates([TileModel(), other], _pool(), progress=False)


@pytest.mark.parametrize("strategy", active.STRATEGIES)
@pytest.mark.parametrize("share", [0.0, 0.3, 0.7, 1.0])
def test_selection_never_exceeds_the_budget_and_groups_compile_classes(strategy, share):
    pool = active.candidates(_pool(), H100)
    pool = [active.Candidate(c.shape, c.rows, c.compile_class, score=float(i % 3))
            for i, c in enumerate(pool)]
    budget = int(share * sum(c.rows for c in pool))
    chosen = active.select_for_budget(pool, budget, strategy, seed=1)
    assert sum(c.rows for c in chosen) <= budget
    classes = [c.compile_class for c in chosen]
    runs = [cls for i, cls in enumerate(classes) if i == 0 or classes[i - 1] != cls]
    assert len(runs) == len(set(classes))  # each class in one stretch: its binaries compile once
    if share == 1.0:
        assert len(chosen) == len(pool)


def test_selection_skips_a_problem_too_big_for_what_is_left():
    cheap = active.Candidate(Shape(1, 16, 16, "bfloat16"), 10, "a", score=0.1)
    costly = active.Candidate(Shape(2, 16, 16, "bfloat16"), 100, "b", score=0.9)
    assert active.select_for_budget([costly, cheap], 50, "disagreement") == [cheap]
    with pytest.raises(OptionError):
        active.select_for_budget([cheap], 10, "best")


def test_costs_are_the_configs_of_the_pruned_space():
    from kernel_select.space import for_problem

    c = active.candidates([Shape(560, 1280, 3420, "bfloat16")], H100)[0]
    assert c.rows == len(for_problem(Problem(560, 1280, 3420, "bfloat16"), H100, "exhaustive"))
    assert c.compile_class == compile_class("bfloat16", 1280, 3420)


def test_only_a_committee_pick_is_marked_active():
    chosen = active.candidates(_pool()[:1], H100)
    assert active.as_shapes(chosen, "disagreement")[0].pass_ == "active"
    assert active.as_shapes(chosen, "random")[0].pass_ == "coverage"
    assert active.as_shapes(chosen, "random")[0].group == chosen[0].compile_class


def _write_pool(tmp_path):
    pool = tmp_path / "pool.json"
    shapes.save(_pool(), pool)
    measured = synthetic_frame({"train": 1}, configs_per_problem=8)
    m, n, k = (int(measured[c].iloc[0]) for c in ("m", "n", "k"))
    shapes.save([*_pool(), Shape(m, n, k, "bfloat16", "measured")], pool)
    dataset.write(measured, tmp_path / "measured.parquet")
    return pool, tmp_path / "measured.parquet"


def test_cli_random_skips_measured_problems_and_writes_a_summary(tmp_path, capsys):
    pool, measured = _write_pool(tmp_path)
    out, summary = tmp_path / "next.json", tmp_path / "summary.json"
    budget = sum(c.rows for c in active.candidates(_pool(), H100)) // 2
    assert main(["shapes", "--active", "--pool", str(pool), "--rows", str(budget), "--strategy", "random",
                 "--device", "h100", "--measured", str(measured), "--out", str(out),
                 "--json-out", str(summary)]) == 0
    report = json.loads(summary.read_text())
    chosen = shapes.load(out)
    assert report["pool_problems"] == len(_pool())  # the measured problem was left out
    assert 0 < report["rows"] <= budget and report["problems"] == len(chosen)
    assert {(s.m, s.n, s.k) for s in chosen} <= {(s.m, s.n, s.k) for s in _pool()}
    assert "unmeasured pool problems" in capsys.readouterr().out


def test_cli_disagreement_uses_the_committee(tmp_path):
    pool, _ = _write_pool(tmp_path)
    dirs = [tmp_path / f"member{seed}" for seed in range(2)]
    for seed, folder in enumerate(dirs):
        save_model(untrained_mlp(seed=seed), folder)
    out = tmp_path / "next.json"
    assert main(["shapes", "--active", "--pool", str(pool), "--rows", "2000", "--strategy", "disagreement",
                 "--committee", *map(str, dirs), "--out", str(out)]) == 0
    chosen = shapes.load(out)
    assert chosen and all(s.pass_ == "active" for s in chosen)


@pytest.mark.parametrize("extra, message", [
    (["--strategy", "disagreement"], "at least 2 model folders"),
    (["--measured", "missing.parquet"], "no such dataset file"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, extra, message):
    pool, _ = _write_pool(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["shapes", "--active", "--pool", str(pool), "--rows", "100", "--device", "h100",
              "--out", str(tmp_path / "x.json"), *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_verdict_keeps_disagreement_only_when_it_clearly_wins():
    def arm(name, score):
        return {"arm": name, **{s: {f"top{k}": score for k in (1, 2, 4, 8)} for s in ("test", "family")}}

    close = [arm("random (seed 0)", 0.90), arm("random (seed 1)", 0.92),
             arm("disagreement (seed 0)", 0.91), arm("disagreement (seed 1)", 0.93)]
    assert active_experiment.verdict(close)["winner"] == "random"
    clear = [arm("random (seed 0)", 0.90), arm("random (seed 1)", 0.901),
             arm("disagreement (seed 0)", 0.95), arm("disagreement (seed 1)", 0.951)]
    assert active_experiment.verdict(clear)["winner"] == "disagreement"


def test_experiment_runs_end_to_end_on_tiny_files(tmp_path):
    seed_file, pool_file = tmp_path / "seed.parquet", tmp_path / "pool.parquet"
    dataset.write(synthetic_frame({"train": 6, "val": 3, "test": 2}, configs_per_problem=40), seed_file)
    dataset.write(synthetic_frame({"train": 8, "test": 1}, configs_per_problem=40, seed=5), pool_file)
    report = active_experiment.run_experiment(seed_file, pool_file, "h100", seeds=2, committee_size=2,
                                              epochs=1, budget_share=0.5)
    arms = {r["arm"]: r for r in report["arms"]}
    trainable = {name: splits.split_rows(dataset.read(path), "train")["problem_id"].nunique()
                 for name, path in (("seed", seed_file), ("pool", pool_file))}  # odd N with odd K is held out
    assert (report["first_pass_problems"], report["pool_problems"]) == (trainable["seed"], trainable["pool"])
    assert arms["first pass only"]["rows"] == 0
    assert arms["whole pool (ceiling)"]["problems"] == trainable["pool"] > 0
    assert all(r["rows"] <= report["budget_rows"] for name, r in arms.items() if "seed" in name)
    assert 0 < arms["disagreement (seed 0)"]["test"]["top1"] <= 1
    assert report["verdict"]["winner"] in active.STRATEGIES
