"""Knobs (kernel_select.knobs, a torch config module), their old spellings, their precedence, and the
torch.compile options kernel_select registers."""

from __future__ import annotations

import ast
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch._inductor.kernel_template_choice")


from torch._inductor import config as inductor_config  # noqa: E402

import kernel_select.inductor as ks_inductor  # noqa: E402
import kernel_select.knobs as ks_config  # noqa: E402
from kernel_select import options  # noqa: E402
from kernel_select.errors import OptionError  # noqa: E402
from kernel_select.inductor.settings import resolve_settings  # noqa: E402
from kernel_select.model.cublas import DEFAULT_MARGIN  # noqa: E402
from tests.inductor.kit import (  # noqa: E402
    FakeInputs, finalize, inductor_candidates, run_python, warnings_of)
from tests.inductor_doubles import FakeModel  # noqa: E402
from tests.subprocess_env import package_env  # noqa: E402

#: Per knob, three valid values that parse to three different settings: one for the knob, one for
#: install(), one for the torch.compile option (a boolean has two: the option repeats the knob's).
REPO = Path(__file__).resolve().parents[2]
VALUES: dict[str, tuple[object, object, object]] = {
    "kernel_lut_path": ("knob.json", "install.json", "option.json"),
    "gemm_topk": (16, "8", "auto"),
    "gemm_auto_topk_cap": (16, "4", 2),
    "gemm_cublas_margin": (0.05, "0.1", 0.2),
    "gemm_dynamic_m": ("1,2", [3, 4], "64..1024"),
    "gemm_dynamic_buckets": ("1024,2048", [512], "off"),
    "gemm_precompile_in_process": ("on", False, True),
    "gemm_model": ("knob-model", "install-model", "option-model"),  # names are looked up when loading
    "gemm_device": ("h100", "a100", "NVIDIA H200"),
}
#: The spellings before 1.0 that kernel_select.knobs keeps as aliases (`top_k` was triton_pruner's
#: argument, never a knob).
KNOB_ALIASES = sorted((old, new) for old, new in options.DEPRECATED_NAMES.items() if old != "top_k")


def test_every_knob_has_values_here():
    assert set(VALUES) == set(options.KNOBS)


# -- kernel_select.knobs ------------------------------------------------------------------------------

def test_an_unknown_knob_is_an_attribute_error():
    with pytest.raises(AttributeError, match="gemm_tpok"):
        ks_config.gemm_tpok = 3
    with pytest.raises(AttributeError, match="gemm_tpok"):
        ks_config.gemm_tpok  # noqa: B018
    with pytest.raises(AttributeError, match="gemm_tpok"), ks_config.patch(gemm_tpok=3):
        pass


@pytest.mark.parametrize("old, new", KNOB_ALIASES)
def test_an_old_spelling_reads_and_writes_the_same_knob(old: str, new: str):
    first, second, _ = VALUES[new]
    with ks_config.patch({new: first}):
        assert getattr(ks_config, old) == first
        with ks_config.patch({old: second}):
            assert getattr(ks_config, new) == second
        assert getattr(ks_config, new) == first


BAD_VALUES = {"kernel_lut_path": 42, "gemm_topk": 0, "gemm_auto_topk_cap": -1, "gemm_cublas_margin": 1.5,
              "gemm_dynamic_m": "9..3", "gemm_dynamic_buckets": "2,4",
              "gemm_precompile_in_process": "maybe", "gemm_model": 3,
              "gemm_device": "tpu-v9"}


@pytest.mark.parametrize("knob", sorted(options.KNOBS))
def test_a_bad_value_is_named_when_the_handler_resolves_its_settings(knob: str):
    handler = ks_inductor.KernelSelectChoices()
    with ks_config.patch({knob: BAD_VALUES[knob]}):
        assert getattr(ks_config, knob) == BAD_VALUES[knob]  # assignment does not check
        with pytest.raises(OptionError, match=f"kernel_select.knobs.{knob}: "):
            handler.settings()


def test_a_bad_knob_value_leaves_inductor_its_candidates_with_one_warning(caplog: pytest.LogCaptureFixture):
    handler = ks_inductor.KernelSelectChoices(gemm_model=FakeModel(), gemm_device="h100")
    with ks_config.patch(gemm_topk="lots"), caplog.at_level(logging.WARNING, logger="kernel_select"):
        for m in (560, 1024):
            inputs = FakeInputs(m, 1280, 3420)
            candidates = inductor_candidates(inputs)
            stock = [c for items in candidates.values() for c in items]
            assert finalize(handler, inputs, candidates) == stock
    messages = [r.getMessage() for r in warnings_of(caplog)]
    assert len(messages) == 1 and "OptionError: kernel_select.knobs.gemm_topk" in messages[0]
    assert not handler.selections


def test_the_cublas_margin_default_is_the_one_the_rule_was_chosen_for():
    assert options.DEFAULT_CUBLAS_MARGIN == DEFAULT_MARGIN


def knobs_in_a_fresh_process(**environment: str) -> dict[str, object]:
    """Every knob's value as `import kernel_select.knobs` sets it under `environment` (with no other
    TORCHINDUCTOR_ variable of a knob set)."""
    env = {name: value for name, value in package_env().items()
           if name not in {options.env_name(knob) for knob in options.KNOBS}}
    code = ("import kernel_select.knobs as c; from kernel_select.options import KNOBS; "
            "print(repr({name: getattr(c, name) for name in KNOBS}))")
    out = subprocess.run([sys.executable, "-c", code], env={**env, **environment}, capture_output=True,
                         text=True, check=True)
    return ast.literal_eval(out.stdout.strip())


def test_environment_variables_set_every_knobs_default():
    raw = {"kernel_lut_path": "~/lut.json", "gemm_topk": "same", "gemm_auto_topk_cap": "5",
           "gemm_cublas_margin": "off", "gemm_dynamic_m": "560,1024", "gemm_dynamic_buckets": "4096, 1024",
           "gemm_precompile_in_process": "yes", "gemm_model": "analytical",
           "gemm_device": "NVIDIA H100 80GB HBM3"}
    assert set(raw) == set(options.KNOBS)
    assert knobs_in_a_fresh_process() == {name: knob.default for name, knob in options.KNOBS.items()}
    assert knobs_in_a_fresh_process(**{options.env_name(knob): text for knob, text in raw.items()}) == {
        "kernel_lut_path": os.path.expanduser("~/lut.json"), "gemm_topk": "SAME", "gemm_auto_topk_cap": 5,
        "gemm_cublas_margin": None, "gemm_dynamic_m": (560, 1024), "gemm_dynamic_buckets": (1024, 4096),
        "gemm_precompile_in_process": True,
        "gemm_model": "analytical", "gemm_device": "h100"}


def test_a_bad_environment_variable_fails_the_import_naming_it():
    env = package_env(TORCHINDUCTOR_GEMM_TOPK="-3")
    bad = subprocess.run([sys.executable, "-c", "import kernel_select.knobs"], env=env, capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "OptionError: environment variable TORCHINDUCTOR_GEMM_TOPK" in bad.stderr


def test_a_non_ascii_digit_in_the_environment_is_an_option_error_not_a_value_error():
    env = package_env(TORCHINDUCTOR_GEMM_TOPK="²")
    code = "import kernel_select.knobs"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "OptionError: environment variable TORCHINDUCTOR_GEMM_TOPK" in bad.stderr
    assert "ValueError" not in bad.stderr


@pytest.mark.parametrize("value", ["²", "٣", "１２", "+4", "0.5e0", "four"])
def test_topk_accepts_only_ascii_digits(value: str):
    with pytest.raises(OptionError, match="expected a count >= 1, a fraction in"):
        options.parse_topk(value)


@pytest.mark.parametrize("value, parsed", [(4, 4), ("4", 4), (" 12 ", 12), (0.25, 0.25), ("0.25", 0.25),
                                           (".5", 0.5), (1.0, 1.0), ("default", "DEFAULT"), ("Auto", "auto"),
                                           ("same", "SAME")])
def test_topk_takes_a_count_a_fraction_or_a_word_in_any_case(value: object, parsed: object):
    assert options.parse_topk(value) == parsed and type(options.parse_topk(value)) is type(parsed)


@pytest.mark.parametrize("value, message", [(0, "a count must be >= 1"), (-2, "a count must be >= 1"),
                                            ("0", "a count must be >= 1"), (1.5, "a fraction must be in"),
                                            ("4.0", "for a count write 4"), (float("nan"), "a fraction"),
                                            (True, "expected a count")])
def test_topk_says_what_is_wrong_with_a_number(value: object, message: str):
    with pytest.raises(OptionError, match=message):
        options.parse_topk(value, source="gemm_topk")


# -- precedence ---------------------------------------------------------------------------------------

#: gemm_precompile_in_process is not the handler's (it changes how choices compile, not which):
#: test_precompile.py checks its precedence where it acts, in make_precompile_fn.
@pytest.mark.parametrize("knob", sorted(set(options.KNOBS) - {"gemm_precompile_in_process"}))
def test_a_torch_compile_option_overrides_install_which_overrides_the_knob(knob: str):
    assert ks_inductor.register_options()
    knob_value, install_value, option_value = VALUES[knob]
    expected = [options.parse(knob, value) for value in VALUES[knob]]
    assert len({repr(value) for value in expected[:2]}) == 2 and expected[1] != expected[2]
    if knob == "kernel_lut_path":  # install() reads the table it is given: make each a real one
        for name in VALUES[knob]:
            Path(str(name)).write_bytes((REPO / "luts" / "h100_seed.json").read_bytes())
    with ks_config.patch({knob: knob_value}):
        assert getattr(resolve_settings(), knob) == expected[0]
        handler = ks_inductor.install(**{knob: install_value})
        per_compile = inductor_config.inductor_choices_class()  # what Inductor instantiates
        assert [getattr(h.settings(), knob) for h in (handler, per_compile)] == [expected[1]] * 2
        with inductor_config.patch({knob: option_value}):  # what torch.compile(options=...) does
            assert [getattr(h.settings(), knob) for h in (handler, per_compile)] == [expected[2]] * 2
        assert getattr(handler.settings(), knob) == expected[1]


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
        ks.install(gemm_topk=2, gemm_device="h100")
        torch.compile(lambda x: x + 1, options=options)
        ks.uninstall()
        torch.compile(lambda x: x + 1, options=options)  # the options stay registered, inert
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


# -- the docs' knob tables ----------------------------------------------------------------------------


def knob_table(markdown: str) -> list[tuple[str, str]]:
    """(knob, default) of each row of the first table under "## Knobs"."""
    section = markdown.split("## Knobs", 1)[1]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section.split("\n## ", 1)[0], flags=re.MULTILINE)
    return [(name, default.strip()) for name, default in rows]


def shown_default(value: object) -> str | None:
    """How the tables write a declared default; None where they describe it in words (None defaults)."""
    if value is None:
        return None
    return str(value)


@pytest.mark.parametrize("document", ["README.md", "docs/guide.md"])
def test_the_docs_list_exactly_the_declared_knobs_with_their_defaults(document: str):
    table = knob_table((REPO / document).read_text(encoding="utf-8"))
    assert [name for name, _ in table] == list(options.KNOBS)
    for name, default in table:
        expected = shown_default(options.KNOBS[name].default)
        if isinstance(options.KNOBS[name].default, bool):
            assert default in (("on", "True") if options.KNOBS[name].default else ("off", "False")), name
        elif expected is not None:
            assert default == expected, name
