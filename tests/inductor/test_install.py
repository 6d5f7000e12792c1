"""install()/uninstall(), the factory Inductor instantiates, and the cache identity it carries."""

from __future__ import annotations

import copy
import logging
import pickle
from pathlib import Path

import pytest
import torch

pytest.importorskip("torch._inductor.kernel_template_choice")

from torch._inductor import config as inductor_config  # noqa: E402
from torch._inductor.choices import InductorChoices  # noqa: E402
from torch._inductor.virtualized import V  # noqa: E402

import kernel_select.inductor as ks_inductor  # noqa: E402
from kernel_select import options  # noqa: E402
from kernel_select import runtime  # noqa: E402
from kernel_select.errors import LUTError, ModelError, OptionError  # noqa: E402
from kernel_select.resources import MODELS_DIR_ENV  # noqa: E402
from tests.inductor.kit import FakeInputs, finalize, inductor_candidates, run_python, triton_of  # noqa: E402
from tests.inductor_doubles import FakeModel  # noqa: E402


# -- cache identity -----------------------------------------------------------------------------

def test_uuid_changes_with_k_lut_contents_model_and_device(lut_file: Path):
    model = FakeModel()

    def uuid(**kw: object) -> str:
        args = {"gemm_topk": 4, "kernel_lut_path": str(lut_file), "gemm_model": model,
                "gemm_device": "h100", **kw}
        return ks_inductor.KernelSelectChoices(**args).uuid()

    base = uuid()
    assert base == uuid()  # stable
    assert uuid(gemm_topk=8) != base
    assert uuid(gemm_device="a100") != base
    assert uuid(gemm_model=FakeModel(tag="v2")) != base
    assert uuid(kernel_lut_path=None) != base
    lut_file.write_text("seed-v2, edited")
    edited = uuid()
    assert edited != base
    lut_file.write_text("{ broken")  # a broken LUT still yields a key, and a different one
    assert uuid() not in (base, edited)
    assert ks_inductor.KernelSelectChoices(gemm_topk="SAME").uuid() != base


def test_factory_pickle_carries_the_uuid_and_copies_are_identity(lut_file: Path):
    factory = ks_inductor.ChoicesFactory(gemm_topk=4, kernel_lut_path=str(lut_file), gemm_device="h100")
    assert copy.deepcopy(factory) is factory
    first = pickle.dumps(factory)
    lut_file.write_text("seed-v2, edited")
    assert pickle.dumps(factory) != first  # 2.11 hashes this pickle into the FX-graph cache key
    clone = pickle.loads(first)
    assert clone == factory and isinstance(clone(), ks_inductor.KernelSelectChoices)
    with pytest.raises(OptionError, match="model name"):
        ks_inductor.ChoicesFactory(gemm_model=FakeModel())


def test_cache_key_config_contains_the_handler_uuid():
    handler = ks_inductor.install(gemm_topk=4, gemm_device="h100")
    portable = inductor_config.save_config_portable()
    if portable.get("inductor_choices_class") != handler.uuid():  # torch 2.11 pickles the factory
        assert isinstance(portable["inductor_choices_class"], ks_inductor.ChoicesFactory)
    assert portable["gemm_topk"] is None and portable["kernel_lut_path"] is None


# -- install / uninstall ------------------------------------------------------------------------

def test_install_and_uninstall_restore_the_previous_handler_and_config():
    previous_handler = V.choices
    previous_class = inductor_config.inductor_choices_class
    handler = ks_inductor.install(gemm_topk=4, gemm_device="h100")
    assert V.choices is handler
    assert isinstance(inductor_config.inductor_choices_class, ks_inductor.ChoicesFactory)
    assert inductor_config.inductor_choices_class().settings().gemm_topk == 4
    inner = ks_inductor.install(gemm_topk=2, gemm_device="h100")
    assert V.choices is inner
    assert ks_inductor.uninstall()
    assert V.choices is handler
    assert ks_inductor.uninstall()
    assert V.choices is previous_handler
    assert inductor_config.inductor_choices_class is previous_class
    assert not ks_inductor.uninstall()


def test_enabled_context_manager_restores_on_error():
    previous_handler = V.choices
    with pytest.raises(RuntimeError, match="boom"):
        with ks_inductor.enabled(gemm_topk=3, gemm_device="h100") as handler:
            assert V.choices is handler and handler.settings().gemm_topk == 3
            raise RuntimeError("boom")
    assert V.choices is previous_handler


def test_install_rejects_bad_arguments_before_changing_anything():
    previous_handler = V.choices
    with pytest.raises(OptionError):
        ks_inductor.install(gemm_topk=-1)
    with pytest.raises(OptionError):
        ks_inductor.install(kernel_lut_path=42)
    with pytest.raises(OptionError,
                       match="install: unknown knob 'gemm_tpok'; known: kernel_lut_path, gemm_topk"):
        ks_inductor.install(gemm_tpok=4)
    assert V.choices is previous_handler
    assert not ks_inductor.uninstall()


@pytest.mark.parametrize("old, new", sorted(options.DEPRECATED_NAMES.items()))
def test_old_spellings_warn_and_still_set_the_knob(old: str, new: str):
    value = {"gemm_topk": 4, "gemm_auto_topk_cap": 5, "gemm_cublas_margin": 0.1, "gemm_dynamic_m": "1,2",
             "gemm_precompile_in_process": True, "gemm_model": "analytical", "gemm_device": "a100"}[new]
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated; use '{new}'"):
        handler = ks_inductor.KernelSelectChoices(**{old: value})
    assert getattr(handler.settings(), new) == options.parse(new, value)


def test_install_with_the_old_topk_spelling_warns_and_works():
    with pytest.warns(DeprecationWarning, match="install: 'topk' is deprecated; use 'gemm_topk'"):
        handler = ks_inductor.install(topk=4, gemm_model="analytical", gemm_device="h100")
    rebuilt = inductor_config.inductor_choices_class()
    assert [h.settings().gemm_topk for h in (handler, rebuilt)] == [4, 4]
    inputs = FakeInputs(560, 1280, 3420)
    assert len(triton_of(finalize(handler, inputs, inductor_candidates(inputs)))) == 4


def test_a_deprecated_name_warns_at_the_users_call():
    with pytest.warns(DeprecationWarning) as caught:
        ks_inductor.install(topk=4, gemm_model="analytical", gemm_device="h100")
    with pytest.warns(DeprecationWarning) as in_with:
        with ks_inductor.enabled(cublas_margin=0.1, gemm_model="analytical", gemm_device="h100"):
            pass
    assert [w.filename for w in (*caught, *in_with)] == [__file__, __file__]


def test_python_shows_a_deprecated_name_by_default():
    # Python's default filters show a DeprecationWarning attributed to __main__ and hide the others.
    result = run_python("""
        import kernel_select.inductor as ks_inductor
        ks_inductor.install(topk=4, gemm_model="analytical", gemm_device="h100")
    """)
    assert result.returncode == 0, result.stderr
    assert "DeprecationWarning: install: 'topk' is deprecated; use 'gemm_topk'" in result.stderr


def test_install_checks_the_lut_and_raises_with_nothing_installed(tmp_path: Path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 4, "devices": {"h100": {"mm": {"bfloat16": [{"m": 1}]}}}}')
    previous_handler, previous_class = V.choices, inductor_config.inductor_choices_class
    for path in (broken, tmp_path / "missing.json"):
        with pytest.raises(LUTError) as info:
            ks_inductor.install(kernel_lut_path=str(path), gemm_model="analytical")
        assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert V.choices is previous_handler and inductor_config.inductor_choices_class is previous_class
    assert not ks_inductor.uninstall()


def test_install_loads_the_model_for_a_known_device_and_raises_when_it_does_not_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(ModelError, match="no_such_model"):
        ks_inductor.install(gemm_model="no_such_model", gemm_device="h100")
    assert not ks_inductor.uninstall()
    folder = tmp_path / "models" / "h100"
    folder.mkdir(parents=True)
    (folder / "mlp.json").write_text("{ not a model card")
    (folder / "mlp.pt").write_bytes(b"not weights")
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path / "models"))
    runtime.reset()
    with pytest.raises(ModelError):
        ks_inductor.install(gemm_device="h100")
    assert not ks_inductor.uninstall()


def test_a_gpu_without_a_trained_model_installs_with_a_warning(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING):
        ks_inductor.install(gemm_device="a100")
    assert ks_inductor.uninstall()
    assert any("no trained model for a100" in r.getMessage() for r in caplog.records)


def test_import_kernel_select_imports_neither_inductor_nor_triton():
    result = run_python("""
        import sys
        import kernel_select
        assert callable(kernel_select.triton_pruner)
        bad = [m for m in sys.modules if m.startswith(("torch._inductor", "triton"))]
        assert not bad, bad
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_real_cpu_compile_with_handler_installed(monkeypatch: pytest.MonkeyPatch):
    # Through real Inductor lowering (on the CPU every candidate passes through) with the handler
    # installed, the options set per compile and the uuid in the cache key: the result must be right.
    calls = []
    original = ks_inductor.KernelSelectChoices._replace

    def spy(self, choices, kernel_inputs, op_name, overrides):  # noqa: ANN001, ANN202
        calls.append((op_name, kernel_inputs.device_type, tuple(choices)))
        return original(self, choices, kernel_inputs, op_name, overrides)

    monkeypatch.setattr(ks_inductor.KernelSelectChoices, "_replace", spy)
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    with ks_inductor.enabled(gemm_topk=2, gemm_device="h100"), \
            torch.compiler.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        compiled = torch.compile(lambda x, y: x @ y, options={"gemm_topk": 4})
        torch.testing.assert_close(compiled(a, b), a @ b)
    assert calls and calls[0][:2] == ("mm", "cpu") and "aten::mm" in calls[0][2]




# -- composing with a handler already in place ----------------------------------------------------

class RecordingChoices(InductorChoices):
    """A custom handler: records what it finalizes and customizes one other heuristic."""

    seen: list[list[str]] = []

    def _finalize_template_configs(self, template_choices, kernel_inputs,  # noqa: ANN001, ANN201
                                   templates, op_name, kwarg_overrides=None):
        flat = super()._finalize_template_configs(template_choices, kernel_inputs, templates, op_name,
                                                  kwarg_overrides)
        RecordingChoices.seen.append([c.template.uid for c in flat])
        return flat

    def should_use_persistent_reduction(self, *args, **kwargs) -> bool:  # noqa: ANN002, ANN003
        return True


def test_install_wraps_torchs_lookup_table_choices_and_uninstall_restores_it(
        caplog: pytest.LogCaptureFixture):
    from torch._inductor.lookup_table.choices import LookupTableChoices

    with inductor_config.patch(inductor_choices_class=LookupTableChoices):
        previous_handler = V.choices
        with caplog.at_level(logging.INFO, logger="kernel_select.inductor"):
            handler = ks_inductor.install(gemm_topk=4, gemm_device="h100")
        assert isinstance(handler.inner, LookupTableChoices)
        assert isinstance(inductor_config.inductor_choices_class().inner, LookupTableChoices)
        assert isinstance(pickle.loads(pickle.dumps(inductor_config.inductor_choices_class))().inner,
                          LookupTableChoices)
        infos = [r.getMessage() for r in caplog.records if "installed" in r.getMessage()]
        assert len(infos) == 1
        assert "wrapping the choices handler already in place (LookupTableChoices)" in infos[0]
        assert ks_inductor.uninstall()
        assert V.choices is previous_handler
        assert inductor_config.inductor_choices_class is LookupTableChoices


def test_the_wrapped_handler_finalizes_our_candidates_and_keeps_its_heuristics():
    RecordingChoices.seen.clear()
    inner = RecordingChoices()
    handler = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_model=FakeModel(), gemm_device="h100",
                                              inner=inner)
    inputs = FakeInputs(560, 1280, 3420)
    finalize(handler, inputs, inductor_candidates(inputs))
    assert RecordingChoices.seen == [["aten::mm", "triton::mm", "triton::mm", "decompose_k"]]
    assert handler.should_use_persistent_reduction() is True  # the inner handler's customization
    plain = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_device="h100")
    assert handler.uuid() != plain.uuid()


def test_nested_installs_wrap_the_original_handler_not_each_other():
    with inductor_config.patch(inductor_choices_class=RecordingChoices):
        outer = ks_inductor.install(gemm_topk=4, gemm_device="h100")
        inner = ks_inductor.install(gemm_topk=2, gemm_device="h100")
        assert isinstance(outer.inner, RecordingChoices) and isinstance(inner.inner, RecordingChoices)
        assert inductor_config.inductor_choices_class.wraps is RecordingChoices
        ks_inductor.uninstall()
        assert V.choices is outer
        ks_inductor.uninstall()
