"""Fine-tuning a saved MLP (`train(init=...)`, `kernel-select train --init`)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernel_select.cli import main
from kernel_select.errors import ModelError, OptionError
from kernel_select.offline.training.train import train
from tests.offline.test_train import SMALL, data  # noqa: F401  (data: the module's dataset fixture)

# the same small recipe and synthetic dataset as test_train.py
BASE = dataclasses.replace(SMALL, epochs=4)


@pytest.fixture(scope="module")
def base(data, tmp_path_factory):
    """The model to start from (saved in its `out_dir`)."""
    return train(data, tmp_path_factory.mktemp("base"), device="h100", objective="rank", hparams=BASE,
                 progress=False)


def _members(model):
    return list(model.net.members)


def test_each_member_starts_from_its_saved_member_with_its_statistics(data, base, tmp_path):
    # a learning rate this small leaves the weights where they started: they must be the saved ones
    result = train(data, tmp_path, device="h100", objective="rank", epochs=1, progress=False,
                   hparams=dataclasses.replace(BASE, lr=1e-12), init=base.out_dir)
    assert result.model.card.feature_mean == base.model.card.feature_mean
    assert result.model.card.feature_std == base.model.card.feature_std
    first, second = _members(base.model)
    assert not torch.allclose(first.body[0].weight, second.body[0].weight)  # distinct seeds
    for saved, tuned in zip(_members(base.model), _members(result.model)):
        for (name, a), b in zip(saved.state_dict().items(), tuned.state_dict().values()):
            assert torch.allclose(a, b, atol=1e-6), name
    init = result.model.card.hyperparameters["init"]
    assert init["device"] == "h100" and init["digest"] == base.model.digest()
    assert result.model.describe().endswith("fine-tuned from the h100 model")
    assert "fine-tuned" not in base.model.describe()


def test_the_saved_weights_win_when_fine_tuning_only_makes_them_worse(data, base, tmp_path):
    # a learning rate of 10 wrecks the net in one epoch: epoch 0 (the saved weights) must be kept
    result = train(data, tmp_path, device="h100", objective="rank", epochs=1, progress=False,
                   hparams=dataclasses.replace(BASE, lr=10.0), init=base.out_dir)
    assert result.metrics["val"]["rank"]["epoch"] == 0
    for saved, kept in zip(_members(base.model), _members(result.model)):
        for (name, a), b in zip(saved.state_dict().items(), kept.state_dict().values()):
            assert torch.equal(a, b), name


def test_fine_tuning_with_the_recipe_changes_the_weights(data, base, tmp_path):
    result = train(data, tmp_path, device="h100", objective="rank", epochs=2, progress=False, hparams=BASE,
                   init=base.out_dir)
    assert result.metrics["val"]["rank"]["epoch"] > 0  # more training on the same data helped on val
    for saved, tuned in zip(_members(base.model), _members(result.model)):
        assert not torch.equal(saved.body[0].weight, tuned.body[0].weight)


@pytest.mark.parametrize("change", [{"hidden_widths": (16,)}, {"members": 3}])
def test_another_shape_is_refused_before_anything_is_written(data, base, tmp_path, change):
    out = tmp_path / "never"
    with pytest.raises(OptionError, match="--init .*needs the same shape"):
        train(data, out, device="h100", hparams=dataclasses.replace(BASE, **change), init=base.out_dir,
              progress=False)
    assert not out.exists()


def test_an_empty_init_dir_is_refused(data, tmp_path):
    with pytest.raises(ModelError, match="no trained mlp model"):
        train(data, tmp_path / "out", device="h100", hparams=BASE, init=tmp_path, progress=False)


def test_cli_init_without_a_model_exits_2_with_one_line(data, tmp_path, capsys):
    out = tmp_path / "never"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", str(data), "--out", str(out), "--device", "h100", "--init", str(tmp_path),
              "--lr", "2e-4", "--no-progress"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "no trained mlp model" in err
    assert not out.exists()


def test_a_version_4_model_is_widened_to_version_5_and_predicts_the_same_for_single_gemms(data, tmp_path):
    from kernel_select.device import get_device
    from kernel_select.model.features import FEATURE_SETS, featurize
    from kernel_select.offline.training.warm_start import load_warm_start
    from kernel_select.problem import Problem
    from kernel_select.space import for_problem

    saved = train(data, tmp_path / "v4", device="h100", objective="rank", hparams=BASE, progress=False,
                  feature_version=4)
    spec = get_device("h100")
    warm = load_warm_start(saved.out_dir, spec, feature_version=5, hidden_widths=BASE.hidden_widths,
                           members=BASE.members)
    assert warm.record["widened"] == "feature version 4 -> 5"
    assert len(warm.feature_mean) == len(FEATURE_SETS[5]) and warm.feature_std[-1] == 1.0
    problem = Problem(560, 1280, 3420, "bfloat16")
    configs = for_problem(problem, spec)[:50]
    old = saved.model.net.members[0]
    x4 = saved.model.features(problem, configs)
    x5 = featurize(problem, configs, spec, 5)
    mean, inv_std = torch.tensor(saved.model._mean), torch.tensor(saved.model._inv_std)
    standardized = (torch.from_numpy(x4) - mean) * inv_std
    old_ms = old(standardized)
    new_ms = warm.members[0](torch.from_numpy(warm.standardize(x5)))
    assert torch.allclose(old_ms, new_ms, atol=1e-5)
    # batched problems read the new input once fine-tuning gives it weight; training v5 from it works
    tuned = train(data, tmp_path / "v5", device="h100", objective="rank", epochs=1, hparams=BASE,
                  progress=False, init=warm)
    assert tuned.model.card.feature_version == 5
    assert tuned.model.card.hyperparameters["init"]["widened"] == "feature version 4 -> 5"


def test_a_time_limit_bounds_the_epochs_and_the_card_says_how_many_ran(data, tmp_path):
    import time

    from kernel_select.offline.training.train import TimeLimit

    calls = []
    limit = TimeLimit(time.perf_counter() + 3.0, on_epoch=lambda: calls.append(1))
    result = train(data, tmp_path, device="h100", objective="rank", progress=False, time_limit=limit,
                   hparams=dataclasses.replace(BASE, epochs=500))
    rank = result.metrics["val"]["rank"]
    assert 1 <= rank["epochs_run"] < 500 and rank["epochs_planned"] == 500
    assert len(calls) >= rank["epochs_run"]  # every epoch of every member reported


def _start_knowing_more(base, **card_changes):
    """`base` as a warm start whose card claims a stratum the data lacks and more of one it has."""
    from kernel_select.device import get_device
    from kernel_select.offline.training.warm_start import load_warm_start

    warm = load_warm_start(base.out_dir, get_device("h100"), members=BASE.members,
                           feature_version=base.model.card.feature_version, hidden_widths=BASE.hidden_widths)
    domain = warm.card.domain
    strata = {**domain.strata, "bmm/float32/m>4096": 40}
    strata[next(iter(domain.strata))] += 1000
    card = warm.card.model_copy(update={"domain": domain.model_copy(update={
        "strata": strata, "m": (1, 10 ** 6)}), **card_changes})
    return dataclasses.replace(warm, card=card)


def test_a_fine_tune_claiming_its_start_keeps_what_it_knew_without_counting_twice(data, base, tmp_path):
    warm = _start_knowing_more(base)
    claimed = train(data, tmp_path / "claimed", device="h100", objective="rank", epochs=1, hparams=BASE,
                    progress=False, init=warm, claim_start_domain=True).model.card.domain
    own = train(data, tmp_path / "own", device="h100", objective="rank", epochs=1, hparams=BASE,
                progress=False, init=warm).model.card.domain
    assert "bmm/float32/m>4096" not in own.strata and claimed.strata["bmm/float32/m>4096"] == 40
    # the same files trained on again: the larger count of the two, not their sum
    assert claimed.strata == {key: max(own.strata.get(key, 0), warm.card.domain.strata.get(key, 0))
                              for key in {*own.strata, *warm.card.domain.strata}}
    assert claimed.m == (min(own.m[0], 1), 10 ** 6) and claimed.n == own.n


def test_claiming_needs_a_start_that_serves_this_gpu(data, base, tmp_path):
    with pytest.raises(OptionError, match="needs a start"):
        train(data, tmp_path / "a", device="h100", hparams=BASE, progress=False, claim_start_domain=True)
    with pytest.raises(OptionError, match="a100's, which does not serve h100"):
        train(data, tmp_path / "b", device="h100", hparams=BASE, progress=False, claim_start_domain=True,
              init=_start_knowing_more(base, device="a100"))
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", str(data), "--out", str(tmp_path / "c"), "--device", "h100",
              "--claim-init-domain", "--no-progress"])
    assert exc.value.code == 2 and not (tmp_path / "c").exists()


def test_a_kept_gate_is_written_with_the_model_and_recorded_in_its_card(data, base, tmp_path):
    from kernel_select.device import get_device
    from kernel_select.model.cublas import CublasGate
    from kernel_select.model.folders import gate_in
    from kernel_select.offline.training.cublas_fit import save_problem_net
    from tests.synthetic import untrained_problem_net

    spec = get_device("h100")
    kept = untrained_problem_net(CublasGate, seed=4)
    kept.card.metrics["validation"] = {"problems": 7, "sign_accuracy": 0.5}
    save_problem_net(kept, tmp_path / "gate")
    result = train(data, tmp_path / "kept", device="h100", objective="rank", epochs=1, hparams=BASE,
                   progress=False, init=base.out_dir, gate_from=tmp_path / "gate")
    assert gate_in(tmp_path / "kept", spec).digest() == kept.digest()
    recorded = result.model.card.hyperparameters["gate"]
    assert recorded == {"dir": str(tmp_path / "gate"), "digest": kept.digest()}
    assert result.metrics["cublas_gate"] == {"problems": 7, "sign_accuracy": 0.5}
    assert "gate" not in base.model.card.hyperparameters


def test_a_gate_folder_without_a_gate_is_refused_before_training(data, base, tmp_path):
    out = tmp_path / "never"
    with pytest.raises(ModelError, match="no cuBLAS gate here"):
        train(data, out, device="h100", hparams=BASE, progress=False, gate_from=tmp_path)
    assert not out.exists()
