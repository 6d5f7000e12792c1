"""`train --weight`: the problems of chosen dataset files weigh FACTOR times the others' in the MLP's
loss (both objectives), by the file their rows are read from; `val` stays unweighted."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest
import torch

from kernel_select.device import get_device
from kernel_select.errors import OptionError
from kernel_select.model.mlp import CARD_FILE, MLPModel, RuntimeNet
from kernel_select.offline.data import audit, dataset
from kernel_select.offline.training import fit_loop, train as train_module
from kernel_select.offline.training.file_weights import file_factors, names, problem_files, row_weights
from kernel_select.offline.training.fit_loop import MLPHParams, make_split, step_weights
from kernel_select.offline.training.train import train
from kernel_select.offline.training.training_data import training_rows
from tests.synthetic import synthetic_frame

LITERAL = f"cuda-events; {audit.LITERAL_SIZES} (one binary per shape)"
TINY = MLPHParams(hidden_widths=(16,), epochs=2, batch_rows=128, batch_problems=4, configs_per_problem=16,
                  members=1)


def _rows(problems: dict[str, int], seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Training rows of made-up problems ({id: configs}, sorted by id as training rows are) and
    standardized features for them."""
    rng = np.random.default_rng(seed)
    rows = pd.DataFrame({"problem_id": [pid for pid, count in problems.items() for _ in range(count)]})
    rows["split"] = "train"
    rows["runtime_ms"] = np.exp(rng.normal(-2, 1, len(rows)))
    return rows, rng.normal(size=(len(rows), 6)).astype(np.float32)


@pytest.mark.parametrize("objective", ["mse", "rank"])
def test_a_problem_of_weight_3_counts_as_that_problem_three_times(objective):
    """Weighted: problem b at 3, the others at 1. Repeated: b's rows three times as three problems, no
    weights. Over the same rows (rank: the same sampled configs per problem) the losses are equal, and
    differ from the unweighted one: the weight is what a step's loss sees, in either objective."""
    rows, x = _rows({"a": 5, "b": 4, "c": 6})
    weighted = make_split(rows, x, "train", np.where(rows["problem_id"] == "b", 3.0, 1.0))
    assert weighted.weights.tolist() == [1.0, 3.0, 1.0]  # one weight per problem
    b = (rows["problem_id"] == "b").to_numpy()
    copies = [rows[~b & (rows["problem_id"] == "a")], *(rows[b].assign(problem_id=f"b{i}") for i in range(3)),
              rows[rows["problem_id"] == "c"]]
    repeated_x = np.concatenate([x[rows["problem_id"] == "a"], *(x[b] for _ in range(3)),
                                 x[rows["problem_id"] == "c"]])
    repeated = make_split(pd.concat(copies, ignore_index=True), repeated_x, "train")
    torch.manual_seed(0)
    net = RuntimeNet(x.shape[1], (8,))
    if objective == "mse":
        index, repeated_index = torch.arange(len(rows)), torch.arange(len(repeated.y))
    else:  # 7 configs per problem, with replacement, the same offsets for each copy of b
        offsets = np.random.default_rng(1).integers(0, 4, size=(1, 7))
        index = torch.from_numpy(weighted.starts[:, None] + offsets)
        repeated_index = torch.from_numpy(repeated.starts[:, None] + offsets)
    hp = MLPHParams(rank_temperature=0.5)
    with torch.no_grad():
        got = fit_loop._loss(objective, net, weighted, index, hp, step_weights(objective, weighted))
        want = fit_loop._loss(objective, net, repeated, repeated_index, hp)
        plain = fit_loop._loss(objective, net, weighted, index, hp)
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    assert abs(got.item() - plain.item()) > 1e-3 * abs(plain.item())


def test_step_weights_average_one_over_what_a_step_draws():
    rows, x = _rows({"a": 2, "b": 6})
    split = make_split(rows, x, "train", np.where(rows["problem_id"] == "a", 4.0, 1.0))
    mse, rank = step_weights("mse", split), step_weights("rank", split)
    assert mse.mean().item() == pytest.approx(1.0)  # rows: mse draws rows alike
    assert rank[split.starts].mean().item() == pytest.approx(1.0)  # problems: rank draws problems alike
    assert (rank[:2] / rank[2:].mean()).tolist() == pytest.approx([4.0, 4.0])
    assert step_weights("mse", make_split(rows, x, "train")) is None


def _write(folder, name: str, frame: pd.DataFrame, method: str = "synthetic"):
    path = folder / name
    dataset.write(frame.assign(timing_method=method), path)
    return path


def test_a_problem_weighs_as_the_file_its_rows_are_read_from(tmp_path):
    """A literal-size file's problems replace the shared ones whatever the order, and bring its factor;
    a weighted shared file whose problem a literal file replaced brings nothing for it."""
    pool = synthetic_frame({"train": 4, "val": 0, "test": 0}, configs_per_problem=6, seed=4)
    ids = sorted(pool["problem_id"].unique())

    def of(*picks: int) -> pd.DataFrame:
        return pool[pool["problem_id"].isin([ids[i] for i in picks])]

    paths = [_write(tmp_path, "a_literal.parquet", of(0, 1), LITERAL),
             _write(tmp_path, "b_shared.parquet", of(0, 1, 2)),
             _write(tmp_path, "c_shared.parquet", of(3))]
    frame, source = dataset.read_many_with_sources(paths)
    assert frame.equals(dataset.read_many(paths))
    by_id = frame.assign(file=source).groupby("problem_id")["file"].unique().map(list).to_dict()
    assert by_id == {ids[0]: [0], ids[1]: [0], ids[2]: [1], ids[3]: [2]}

    factors = file_factors(paths, {"*literal*": 8, str(paths[1]): 0.5})
    weights, record = row_weights(frame, problem_files(frame, source), paths, factors)
    got = pd.Series(weights, index=frame["problem_id"]).groupby(level=0).unique().map(list).to_dict()
    assert got == {ids[0]: [8.0], ids[1]: [8.0], ids[2]: [0.5], ids[3]: [1.0]}
    assert record == {"a_literal.parquet": {"factor": 8.0, "train_problems": 2},
                      "b_shared.parquet": {"factor": 0.5, "train_problems": 1}}


def test_patterns_name_files_as_expanded_absolute_or_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = dataset.expand_paths("data/h200_literal.parquet")[0]
    for pattern in ("data/h200_literal.parquet", "./data/h200_literal.parquet", str(tmp_path / path),
                    "h200_literal.parquet", "*literal*", "data/h200*.parquet", f"{os.getcwd()}/data/*"):
        assert names(pattern, path), pattern
    for pattern in ("other/h200_literal.parquet", "H200_literal.parquet", "h200.parquet", "data/*.json"):
        assert not names(pattern, path), pattern


@pytest.mark.parametrize("factor", [0, -1.0, math.nan, math.inf, True, "2"])
def test_a_factor_that_is_not_a_finite_number_above_0_is_refused(tmp_path, factor):
    expected = r"weight a\.parquet: expected a factor that is a finite number > 0"
    with pytest.raises(OptionError, match=expected):
        file_factors([tmp_path / "a.parquet"], {"a.parquet": factor})


def test_a_pattern_naming_no_file_and_a_file_given_two_factors_are_refused(tmp_path):
    paths = [tmp_path / "a.parquet", tmp_path / "b_literal.parquet"]
    with pytest.raises(OptionError, match=r"weight nosuch\*=2: the pattern names none of the dataset files "
                                          r"\(.*a\.parquet, .*b_literal\.parquet\)"):
        file_factors(paths, {"nosuch*": 2})
    with pytest.raises(OptionError, match=r"b_literal\.parquet is named by \*literal\*=2 and by "
                                          r"\*\.parquet=3"):
        file_factors(paths, {"*literal*": 2, "*.parquet": 3})
    assert file_factors(paths, {"*literal*": 2, "b_*": 2.0}) == {paths[1]: 2.0}  # the same factor twice
    assert file_factors(paths, None) == {} == file_factors(paths, {})


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("weighted")
    return [_write(folder, "a.parquet", synthetic_frame({"train": 10, "val": 4, "test": 2},
                                                        configs_per_problem=24, seed=1)),
            _write(folder, "b_literal.parquet", synthetic_frame({"train": 4, "val": 2, "test": 0},
                                                                configs_per_problem=24, seed=2), LITERAL)]


def test_train_weighs_the_train_split_only_and_the_card_says_so(two_files, tmp_path, monkeypatch):
    seen = []
    real_fit = train_module.fit

    def recording_fit(objective, train_split, val, *args, **kwargs):
        seen.append((objective, train_split, val))
        return real_fit(objective, train_split, val, *args, **kwargs)

    monkeypatch.setattr(train_module, "fit", recording_fit)
    folder = two_files[0].parent
    result = train(str(folder / "*.parquet"), tmp_path / "w", device="h100", objective="both", hparams=TINY,
                   progress=False, weights={"b_literal.parquet": 5})
    assert [objective for objective, _, _ in seen] == ["mse", "rank"]
    literal_ids = set(dataset.read(two_files[1])["problem_id"])
    rows, _ = training_rows(dataset.read_many(two_files), get_device("h100"), two_files, 384, 0)
    train_ids = sorted(rows.loc[rows["split"] == "train", "problem_id"].unique())  # make_split's order
    for _, train_split, val in seen:
        assert train_split.weights.tolist() == [5.0 if pid in literal_ids else 1.0 for pid in train_ids]
        assert val.weights is None  # the epoch and the objective are chosen as without weights
    card = json.loads((tmp_path / "w" / CARD_FILE).read_text())
    recorded = card["hyperparameters"]["weights"]
    assert list(recorded) == ["b_literal.parquet"] and recorded["b_literal.parquet"]["factor"] == 5.0
    assert recorded["b_literal.parquet"]["train_problems"] == int((seen[0][1].weights == 5.0).sum()) > 0
    assert MLPModel.load(tmp_path / "w").card.model_dump(mode="json") == card
    assert result.model.card.hyperparameters["weights"] == recorded

    monkeypatch.setattr(train_module, "fit", real_fit)
    plain = train(str(folder / "*.parquet"), tmp_path / "p", device="h100", objective="rank", hparams=TINY,
                  progress=False)
    weighted = train(str(folder / "*.parquet"), tmp_path / "r", device="h100", objective="rank", hparams=TINY,
                     progress=False, weights={"b_literal.parquet": 5})
    assert "weights" not in plain.model.card.hyperparameters
    assert any(not torch.equal(a, b) for a, b in zip(plain.model.net.state_dict().values(),
                                                     weighted.model.net.state_dict().values()))


def test_bad_weights_are_refused_before_anything_is_written(two_files, tmp_path):
    out = tmp_path / "never"
    with pytest.raises(OptionError, match="names none of the dataset files"):
        train(two_files, out, device="h100", hparams=TINY, progress=False, weights={"nosuch.parquet": 2})
    with pytest.raises(OptionError, match="finite number > 0"):
        train(two_files, out, device="h100", hparams=TINY, progress=False, weights={"a.parquet": 0})
    assert not out.exists()
