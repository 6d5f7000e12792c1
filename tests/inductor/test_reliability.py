"""Inside torch.compile nothing raises and nothing blocks: hostile paths, values and model files.

"Nothing blocks" is shown by the work that would block never starting: a LUT that is no regular file is
neither read nor waited on (tests.lut.test_hardening.unread), and a model card that describes a network
too large to build is refused before any network is built but on torch's meta device."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("torch._inductor.kernel_template_choice")

from torch._inductor import config as inductor_config  # noqa: E402

import kernel_select.inductor as ks_inductor  # noqa: E402
import kernel_select.knobs as knobs  # noqa: E402
from kernel_select.configs import GemmConfig  # noqa: E402
from kernel_select.device import DeviceSpec  # noqa: E402
from kernel_select.errors import OptionError  # noqa: E402
from kernel_select.model import mlp as mlp_module  # noqa: E402
from kernel_select.problem import Problem  # noqa: E402
from kernel_select.resources import MODELS_DIR_ENV  # noqa: E402
from tests.inductor.kit import FakeInputs, finalize, inductor_candidates, warnings_of  # noqa: E402
from tests.inductor_doubles import FakeModel  # noqa: E402
from tests.lut.test_hardening import unread  # noqa: E402
from tests.subprocess_env import REPO  # noqa: E402


def stock(candidates: dict[str, list]) -> list:
    """What Inductor would have benchmarked without kernel_select: every candidate, in order."""
    return [c for items in candidates.values() for c in items]


def compile_gemms(handler: ks_inductor.KernelSelectChoices, shapes: Sequence[int],
                  caplog: pytest.LogCaptureFixture) -> None:
    """Lower one GEMM per M through the handler, as Inductor would, and check each fell back."""
    with caplog.at_level(logging.WARNING, logger="kernel_select.inductor"):
        for m in shapes:
            inputs = FakeInputs(m, 1280, 3420)
            candidates = inductor_candidates(inputs)
            assert finalize(handler, inputs, candidates) == stock(candidates)
            handler.uuid()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_dev_zero_lut_is_passed_over_unread_with_one_warning(
        kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    if kind == "fifo":
        path = str(tmp_path / "lut.fifo")
        os.mkfifo(path)
    else:
        path = "/dev/zero"
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, kernel_lut_path=path, gemm_model=FakeModel(),
                                              gemm_device="h100")
    with unread():
        compile_gemms(handler, (560, 1024), caplog)
    assert len(warnings_of(caplog)) == 1 and "regular file" in warnings_of(caplog)[0].getMessage()


@pytest.mark.parametrize("value", ["²", "٣", "1e3", "4.0"])
def test_a_non_ascii_or_non_integer_gemm_topk_option_falls_back_cleanly(value: str,
                                                                         caplog: pytest.LogCaptureFixture):
    assert ks_inductor.register_options()
    handler = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_model=FakeModel(), gemm_device="h100")
    with inductor_config.patch(gemm_topk=value):  # per thread on torch 2.13: no worker thread here
        compile_gemms(handler, (560, 1024), caplog)
    messages = [r.getMessage() for r in warnings_of(caplog)]
    assert len(messages) == 1 and "OptionError" in messages[0] and "gemm_topk" in messages[0]
    assert not any(r.exc_info for r in warnings_of(caplog))  # a clean message, not a traceback


class NaNModel(FakeModel):
    def predict(self, problem: Problem, device: DeviceSpec, configs: Sequence[GemmConfig]) -> np.ndarray:
        return np.full(len(configs), np.nan)


def test_a_model_with_nan_outputs_warns_once_over_fifty_shapes(caplog: pytest.LogCaptureFixture):
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=NaNModel(), gemm_device="h100")
    compile_gemms(handler, range(64, 64 + 50 * 16, 16), caplog)
    assert len(warnings_of(caplog)) == 1


def _truncate_weights(folder: Path) -> Path:
    weights = folder / "mlp.pt"
    weights.write_bytes(weights.read_bytes()[:100])
    return weights


def _widen_card(widths: list[int]) -> Callable[[Path], Path]:
    def widen(folder: Path) -> Path:
        card = json.loads((folder / "mlp.json").read_text())
        card["architecture"]["hidden_widths"] = widths
        (folder / "mlp.json").write_text(json.dumps(card))
        return folder / "mlp.json"

    return widen


@pytest.mark.parametrize("breakage", [_truncate_weights, _widen_card([20_000_000]), _widen_card([-1]),
                                      _widen_card([100_000, 100_000]), _widen_card([16] * 100_000)],
                         ids=["truncated weights", "width 2e7", "width -1", "widths 1e5", "1e5 layers"])
def test_a_broken_user_model_leaves_inductor_its_own_candidates(
        breakage: Callable[[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture):
    shutil.copytree(REPO / "models" / "h100", tmp_path / "h100")
    broken = breakage(tmp_path / "h100")
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    # gemm_model=None: the device's trained model, here the user's
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_device="h100")
    built_on: list[str] = []

    def build(architecture: object) -> torch.nn.Module:
        built_on.append(torch.empty(0).device.type)  # the device a factory call lands on now
        return mlp_module.build_net(architecture)

    monkeypatch.setattr(mlp_module, "build_net", build)
    compile_gemms(handler, (560, 1024, 2048), caplog)
    assert set(built_on) <= {"meta"}, f"a network was built on {built_on}"  # a card may describe gigabytes
    messages = [r.getMessage() for r in warnings_of(caplog)]
    assert len(messages) == 1 and str(broken) in messages[0] and "retrain" in messages[0]
    assert not handler.selections  # nothing was ranked, by the analytical model or any other


@pytest.mark.parametrize("route", ["knob", "torch option"])
def test_a_nul_byte_in_kernel_lut_path_falls_back_with_one_warning(route: str,
                                                                   caplog: pytest.LogCaptureFixture):
    assert ks_inductor.register_options()
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100")
    patch = knobs.patch if route == "knob" else inductor_config.patch
    with patch(kernel_lut_path="bad\0path.json"):
        compile_gemms(handler, (560, 1024), caplog)
    messages = [r.getMessage() for r in warnings_of(caplog)]
    assert len(messages) == 1 and "OptionError" in messages[0] and "\0" not in messages[0]
    assert "kernel_lut_path: a path cannot contain a NUL byte, got 'bad\\x00path.json'" in messages[0]


def test_install_refuses_a_nul_byte_in_kernel_lut_path_and_installs_nothing():
    with pytest.raises(OptionError,
                       match=r"^install\(kernel_lut_path=...\): a path cannot contain a NUL byte"):
        ks_inductor.install(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100", kernel_lut_path="a\0b")
    assert not ks_inductor.uninstall()
