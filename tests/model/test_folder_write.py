"""A model folder is written whole or not at all (issue 43, rows 2, 3 and 10): checked before any
training, staged beside the old folder and swapped in; a kill before the swap leaves the old folder
as it was, a failure after training keeps the trained model in a sibling folder named in the error."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernel_select.atomic_write import STALE_TEMP_AGE_S
from kernel_select.errors import ModelError
from kernel_select.model import folder_write
from kernel_select.model.cublas import CublasGate
from kernel_select.model.folder_write import check_model_folder
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset
from kernel_select.offline.training import fit_loop
from kernel_select.offline.training.cublas_fit import save_problem_net
from kernel_select.offline.training.fit_loop import MLPHParams
from kernel_select.offline.training.train import save_model, train
from kernel_select.problem import Problem
from kernel_select.space import for_problem
from tests.synthetic import synthetic_frame, untrained_mlp, untrained_problem_net

ROOT = Path(__file__).resolve().parents[2]
SEED = Problem(560, 1280, 3420, "bfloat16")
SMALL = MLPHParams(hidden_widths=(16,), epochs=2, batch_rows=256, batch_problems=8, configs_per_problem=32,
                   members=1)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "synthetic.parquet"
    dataset.write(synthetic_frame(), path)
    return path


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any fit fails the test: the refusal must come before the work."""
    def fit(*args, **kwargs):
        pytest.fail("training started before the output folder was checked")
    monkeypatch.setattr("kernel_select.offline.training.train.fit", fit)


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def _siblings(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.parent.iterdir() if path != folder)


# -- checked before the work ----------------------------------------------------------------------

def test_train_refuses_a_read_only_mlp_before_training(data: Path, tmp_path: Path, no_training) -> None:
    out = tmp_path / "model"
    save_model(untrained_mlp(), out)
    (out / "mlp.pt").chmod(0o444)
    before = _files(out)
    with pytest.raises(ModelError, match=r"mlp\.pt: is read-only \(mode 0444\); make it writable"):
        train(data, out, device="h100", hparams=SMALL, progress=False)
    assert _files(out) == before


def test_train_refuses_an_out_folder_that_cannot_be_created_before_training(data: Path, tmp_path: Path,
                                                                           no_training) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelError, match="cannot write the model folder"):
        train(data, tmp_path / "file" / "model", device="h100", hparams=SMALL, progress=False)
    with pytest.raises(ModelError, match="is a file, not a folder"):
        train(data, tmp_path / "file", device="h100", hparams=SMALL, progress=False)


def test_a_full_disk_is_refused_before_training(data: Path, tmp_path: Path, no_training,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    full = folder_write.shutil.disk_usage(tmp_path)._replace(free=4096)
    monkeypatch.setattr(folder_write.shutil, "disk_usage", lambda path: full)
    with pytest.raises(ModelError, match="only 4,096 bytes free on its disk"):
        train(data, tmp_path / "model", device="h100", hparams=SMALL, progress=False)
    assert not (tmp_path / "model").exists()


def test_a_diverging_training_stops_at_once_and_writes_nothing(data: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 43 row 10: --lr 1e30 trained to the end, then failed, leaving a folder with a gate only
    out = tmp_path / "model"
    finite: list[bool] = []  # each training batch's loss, in order, across every fit
    real_loss = fit_loop._loss

    def loss(*args: Any, **kwargs: Any) -> Any:  # fit_loop._loss, each value recorded
        value = real_loss(*args, **kwargs)
        finite.append(math.isfinite(value.item()))
        return value

    monkeypatch.setattr(fit_loop, "_loss", loss)
    with pytest.raises(ModelError, match=r"training diverged in epoch 1 .*smaller learning rate "
                                         r"\(--lr, now 1e\+30"):
        train(data, out, device="h100", progress=False,
              hparams=MLPHParams(hidden_widths=(16,), epochs=50, batch_rows=256, lr=1e30, members=1))
    assert not out.exists() and _siblings(out) == []
    # stopped at the first loss that is not finite: no batch after it, in this fit or another
    assert finite.index(False) == len(finite) - 1, finite


# -- written whole ---------------------------------------------------------------------------------

_KILL_BEFORE_THE_SWAP = """
import os, signal, sys
from kernel_select.model import folder_write
from kernel_select.offline.training.train import save_model
from tests.synthetic import untrained_mlp

folder_write._swap_into_place = lambda staging, target: os.kill(os.getpid(), signal.SIGKILL)
save_model(untrained_mlp(seed=7), sys.argv[1])
"""


def test_a_writer_killed_before_the_swap_leaves_the_old_folder_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "h100"
    old = untrained_mlp(seed=1)
    save_model(old, out)
    (out / "eval.json").write_text("{}")
    before = _files(out)
    child = subprocess.run([sys.executable, "-c", _KILL_BEFORE_THE_SWAP, str(out)], cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert child.returncode == -9, child.stderr
    assert _files(out) == before
    configs = for_problem(SEED, "h100")[:8]
    assert np.array_equal(MLPModel.load(out, "h100").estimate(SEED, configs), old.estimate(SEED, configs))
    [staged] = _siblings(out)  # the new model, hidden, for the next write to remove
    assert staged.startswith(".h100.") and staged.endswith(".tmp")
    assert (tmp_path / staged / "mlp.pt").is_file()


def test_the_stale_staging_folder_of_a_dead_writer_is_removed_by_the_next_write(tmp_path: Path) -> None:
    out = tmp_path / "h100"
    stale = tmp_path / ".h100.999999999.abc.tmp"  # no such pid
    stale.mkdir()
    (stale / "mlp.pt").write_bytes(b"half")
    old = time.time() - 2 * STALE_TEMP_AGE_S
    os.utime(stale, (old, old))
    save_model(untrained_mlp(), out)
    assert _siblings(out) == []


def test_a_failure_after_training_keeps_the_model_in_a_named_sibling(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "h100"
    save_model(untrained_mlp(seed=1), out)
    before = _files(out)

    def no_space(staging: Path, target: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(folder_write, "_swap_into_place", no_space)
    with pytest.raises(ModelError) as info:
        save_model(untrained_mlp(seed=2), out)
    message = str(info.value)
    assert "could not replace the folder (No space left on device); it is kept in" in message
    kept = Path(message.split("it is kept in ")[1].split(":")[0])
    assert kept.parent == tmp_path and kept.name.startswith("h100.unsaved-")
    assert {"mlp.pt", "mlp.json"} <= set(_files(kept)) and _files(out) == before


def test_a_new_training_drops_the_old_gate_and_keeps_other_files(tmp_path: Path) -> None:
    out = tmp_path / "h100"
    with_gate = untrained_mlp(seed=1)
    save_model(with_gate, out, untrained_problem_net(CublasGate))
    (out / "eval.json").write_text("{}")
    save_model(untrained_mlp(seed=2), out)  # this training produced no gate
    assert sorted(_files(out)) == ["eval.json", "mlp.json", "mlp.pt"]


def test_a_gate_written_alone_keeps_the_mlp_beside_it(tmp_path: Path) -> None:
    out = tmp_path / "h100"
    mine = untrained_mlp(seed=1)
    save_model(mine, out)
    mlp_before = (out / "mlp.pt").read_bytes()
    save_problem_net(untrained_problem_net(CublasGate), out)
    assert (out / "mlp.pt").read_bytes() == mlp_before and (out / "cublas_gate.pt").is_file()


def test_a_card_rewritten_beside_a_gate_keeps_its_weights_and_must_be_kept(tmp_path: Path) -> None:
    out = tmp_path / "h100"
    save_model(untrained_mlp(seed=1), out)
    weights = (out / "mlp.pt").read_bytes()
    card = MLPModel.load(out, "h100").card
    card.hyperparameters["gate"] = {"dir": "here", "digest": "abc"}
    save_problem_net(untrained_problem_net(CublasGate), out, cards=[("mlp", card)])
    assert (out / "mlp.pt").read_bytes() == weights
    assert MLPModel.load(out, "h100").card.hyperparameters["gate"] == {"dir": "here", "digest": "abc"}
    before = _files(out)
    with pytest.raises(ValueError, match="must be kept"):  # a card without its weights: refused
        folder_write.write_model_folder(out, [], keep=(), cards=[("mlp", card)])
    assert _files(out) == before


def test_a_checked_folder_is_left_as_it_was(tmp_path: Path) -> None:
    check_model_folder(tmp_path / "new" / "model")
    assert list(tmp_path.iterdir()) == []
