"""Knobs, their precedence, and the torch.compile options kernel_select registers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("torch._inductor.kernel_template_choice")


from torch._inductor import config as inductor_config  # noqa: E402

import kernel_select.inductor as ks_inductor  # noqa: E402
import kernel_select.knobs as ks_config  # noqa: E402
from kernel_select.errors import OptionError  # noqa: E402
from tests.inductor.kit import run_python  # noqa: E402
from tests.subprocess_env import package_env  # noqa: E402


# -- knobs and precedence --------------------------------------------------------------------------

def test_knobs_validate_on_assignment_and_patch():
    with pytest.raises(OptionError, match="topk"):
        ks_config.topk = 0
    with pytest.raises(OptionError, match="DEFAULT"):
        ks_config.patch(topk="many").__enter__()
    with pytest.raises(OptionError, match="unknown knob"):
        ks_config.patch(top_k=3).__enter__()
    with pytest.raises(OptionError, match="device"):
        ks_config.device = "tpu-v9"
    with ks_config.patch(topk="4", device="NVIDIA H100 80GB HBM3", kernel_lut_path="~/lut.json"):
        assert ks_config.topk == 4 and ks_config.device == "h100"
        assert ks_config.kernel_lut_path == os.path.expanduser("~/lut.json")
    assert ks_config.topk == "DEFAULT" and ks_config.device is None


def test_environment_variables_are_read_and_validated():
    code = "import kernel_select.knobs as c; print(c.topk, c.kernel_lut_path)"
    env = package_env(TORCHINDUCTOR_GEMM_TOPK="same", TORCHINDUCTOR_KERNEL_LUT_PATH="/x/lut.json")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["SAME", "/x/lut.json"]
    env["TORCHINDUCTOR_GEMM_TOPK"] = "-3"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "environment variable TORCHINDUCTOR_GEMM_TOPK" in bad.stderr


def test_precedence_torch_option_over_install_over_knob():
    assert ks_inductor.register_options()
    with ks_config.patch(topk=16):
        assert ks_inductor.KernelSelectChoices().settings().topk == 16
        handler = ks_inductor.KernelSelectChoices(topk=4)
        assert handler.settings().topk == 4
        with inductor_config.patch(gemm_topk=2, kernel_lut_path="per-compile.json"):
            assert handler.settings().topk == 2
            assert handler.settings().kernel_lut_path == "per-compile.json"
        assert handler.settings().topk == 4


def test_torch_compile_accepts_the_options_only_after_install():
    result = run_python("""
        import torch
        options = {"gemm_topk": 4, "kernel_lut_path": "luts/h100.json", "max_autotune": True}
        try:
            torch.compile(lambda x: x + 1, options=options)
        except RuntimeError as exc:
            assert "Unexpected optimization option" in str(exc)
        else:
            raise AssertionError("torch knew gemm_topk before install()")
        import kernel_select.inductor as ks
        ks.install(topk=2, device="h100")
        torch.compile(lambda x: x + 1, options=options)
        ks.uninstall()
        torch.compile(lambda x: x + 1, options=options)  # the options stay registered, inert
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")




def test_cublas_margin_knob_is_validated_and_read_from_the_environment():
    with pytest.raises(OptionError, match="cublas_margin"):
        ks_config.cublas_margin = 1.5
    with pytest.raises(OptionError):
        ks_inductor.install(cublas_margin="sometimes")
    code = "import kernel_select.knobs as c; print(c.cublas_margin)"
    for raw, expected in (("0.1", "0.1"), ("off", "None"), ("", "0.15")):
        env = package_env(TORCHINDUCTOR_GEMM_CUBLAS_MARGIN=raw)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True)
        assert out.stdout.strip() == expected


@pytest.mark.parametrize("value", ["²", "٣", "１２", "+4", "4.0"])
def test_topk_accepts_only_ascii_digits(value: str):
    with pytest.raises(OptionError, match="expected a positive integer"):
        ks_config.parse_topk(value)


def test_a_non_ascii_digit_in_the_environment_is_an_option_error_not_a_value_error():
    env = package_env(TORCHINDUCTOR_GEMM_TOPK="²")
    code = "import kernel_select.knobs"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "OptionError: environment variable TORCHINDUCTOR_GEMM_TOPK" in bad.stderr
    assert "ValueError" not in bad.stderr
